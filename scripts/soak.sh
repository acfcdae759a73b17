#!/usr/bin/env bash
# Soak and leak figures (issue 13): `perfbench serve` and `perfbench profile` at concurrency 256
# for N minutes, over HTTP and then over gRPC, inputs and outputs in system shared memory.
# Prints, per protocol: each minute's requests, errors and throughput (from the server's
# statistics, so nothing the client might hide), both processes' RSS each minute and the growth
# after the first minute, the client's own failure count, and /dev/shm before and after.
#
# Then the highest rate: the client calls the server in process (no sockets, so the 2 cores'
# network work does not cap the rate) for SOAK_MAX_RATE_MINUTES, printing throughput and RSS
# each minute: perf_analyzer leaks and is OOM-killed above ~30k QPS (its issue #84).
#
# Usage: scripts/soak.sh [MINUTES]      (default 10; builds perfbench --release unless
#                                        PERFBENCH_BIN names a binary)
# Env: SOAK_CONCURRENCY (256), SOAK_SHM (system | none; system), SOAK_PROTOCOLS ("http grpc"),
#      SOAK_SHAPE (INPUT0:16), SOAK_MAX_RATE_MINUTES (5; 0 skips), BENCH_PORT (24100).
#      Run it under `nice` on a shared machine.
set -euo pipefail
source "$(dirname "$0")/../benches/common.sh"
MINUTES=${1:-10}
CONCURRENCY=${SOAK_CONCURRENCY:-256}
SHM=${SOAK_SHM:-system}
PROTOCOLS=${SOAK_PROTOCOLS-http grpc} # set and empty: none (the highest rate alone)
SHAPE=${SOAK_SHAPE:-INPUT0:16}
MAX_RATE_MINUTES=${SOAK_MAX_RATE_MINUTES:-5}
CLIENT_PID=

stop_client() {
  if [ -n "$CLIENT_PID" ] && kill -0 "$CLIENT_PID" 2>/dev/null; then
    kill -INT "$CLIENT_PID"
    wait "$CLIENT_PID" 2>/dev/null || true
  fi
  CLIENT_PID=
}
trap 'stop_client; cleanup' EXIT

growth() { python3 -c "import sys; a, b = sys.argv[1:]; print(f'{(float(b) / float(a) - 1) * 100:+.1f}%' if a not in ('', '-') and b not in ('', '-') else 'n/a')" "$1" "$2"; }

rss_mb() { awk '/^VmRSS:/ {printf "%.1f", $2 / 1024}' "/proc/$1/status" 2>/dev/null || echo "-"; }

# success and failure counts of identity, from the statistics extension.
server_counts() {
  curl -sf "http://$HOST:$PORT/v2/models/identity/stats" | python3 -c '
import json, sys
s = json.load(sys.stdin)["model_stats"][0]["inference_stats"]
print(s["success"]["count"], s["fail"]["count"])'
}

# Only perfbench's own segments: other programs on the machine (a Triton beside it) come and go.
shm_entries() { find /dev/shm -mindepth 1 -maxdepth 1 -name 'perfbench*' -printf '%f\n' 2>/dev/null | sort; }

BIN=$(perfbench_binary)
echo "soak: $MINUTES min per protocol, concurrency $CONCURRENCY, identity $SHAPE, shared memory $SHM"
echo "binary: $BIN"
for protocol in $PROTOCOLS; do
  start_server "$BIN" identity
  url=$HOST:$PORT
  [ "$protocol" = grpc ] && url=$HOST:$((PORT + 1))
  shm_entries >"$BENCH_TMP/shm-before"
  read -r ok0 fail0 < <(server_counts)
  # One window per minute, never stable (-s 0.001), so the client runs MINUTES windows.
  "$BIN" profile -m identity -u "$url" -i "$protocol" --shape "$SHAPE" \
    --concurrency-range "$CONCURRENCY" --shared-memory "$SHM" \
    --measurement-mode time_windows -p 60000 --max-trials "$MINUTES" -s 0.001 \
    -f "$BENCH_TMP/$protocol.csv" >"$BENCH_TMP/$protocol.log" 2>&1 &
  CLIENT_PID=$!
  start=$(date +%s)
  echo
  echo "== $protocol (server pid $SERVER_PID, client pid $CLIENT_PID)"
  printf '%6s %10s %8s %12s %14s %14s\n' minute requests errors "infer/s" "server RSS MB" "client RSS MB"
  printf '%6s %10s %8s %12s %14s %14s\n' 0 - - - "$(rss_mb "$SERVER_PID")" "$(rss_mb "$CLIENT_PID")"
  prev_ok=$ok0 prev_fail=$fail0 minute=0 first_server= first_client= last_server= last_client=
  while [ "$minute" -lt "$MINUTES" ] && kill -0 "$CLIENT_PID" 2>/dev/null; do
    minute=$((minute + 1))
    wait_s=$((start + 60 * minute - $(date +%s)))
    [ "$wait_s" -gt 0 ] && sleep "$wait_s"
    read -r ok fail < <(server_counts)
    server_rss=$(rss_mb "$SERVER_PID") client_rss=$(rss_mb "$CLIENT_PID")
    # The client ends with its last window, so the last minute may find it gone: keep the last reading.
    [ "$server_rss" != "-" ] && last_server=$server_rss
    [ "$client_rss" != "-" ] && last_client=$client_rss
    [ "$minute" = 1 ] && first_server=$last_server first_client=$last_client
    printf '%6s %10s %8s %12s %14s %14s\n' "$minute" $((ok + fail - prev_ok - prev_fail)) $((fail - prev_fail)) \
      "$(python3 -c "print(f'{($ok - $prev_ok) / 60:.0f}')")" "$server_rss" "$client_rss"
    prev_ok=$ok prev_fail=$fail
  done
  stop_client
  read -r ok fail < <(server_counts)
  echo "total: $((ok - ok0)) requests, $((fail - fail0)) errors (server); client: $(grep -ho 'perfbench: [0-9]* failed' "$BENCH_TMP/$protocol.log" | tail -1 || echo 'no summary')"
  echo "RSS after minute 1 -> end: server $first_server -> $last_server MB ($(growth "$first_server" "$last_server")), client $first_client -> $last_client MB ($(growth "$first_client" "$last_client"))"
  kill -TERM "$SERVER_PID"
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=
  shm_entries >"$BENCH_TMP/shm-after"
  left=$(comm -13 "$BENCH_TMP/shm-before" "$BENCH_TMP/shm-after" | tr '\n' ' ')
  echo "/dev/shm: $(wc -l <"$BENCH_TMP/shm-before") entries before, $(wc -l <"$BENCH_TMP/shm-after") after;" \
    "left behind: ${left:-none}"
done

if [ "$MAX_RATE_MINUTES" -gt 0 ]; then
  # -v prints perf_analyzer's line per window ("Pass [n] throughput: X infer/sec. ..."): one a minute.
  "$BIN" profile -m identity --service-kind inprocess --shape "$SHAPE" --concurrency-range 16 \
    --measurement-mode time_windows -p 60000 --max-trials "$MAX_RATE_MINUTES" -s 0.001 -v \
    -f "$BENCH_TMP/inprocess.csv" >"$BENCH_TMP/inprocess.log" 2>&1 &
  CLIENT_PID=$!
  start=$(date +%s)
  echo
  echo "== highest rate: client and server in one process, concurrency 16 (pid $CLIENT_PID)"
  rss_at=("$(rss_mb "$CLIENT_PID")")
  minute=0 first= last=
  while [ "$minute" -lt "$MAX_RATE_MINUTES" ] && kill -0 "$CLIENT_PID" 2>/dev/null; do
    minute=$((minute + 1))
    wait_s=$((start + 60 * minute - $(date +%s)))
    [ "$wait_s" -gt 0 ] && sleep "$wait_s"
    rss=$(rss_mb "$CLIENT_PID")
    [ "$rss" != "-" ] && last=$rss
    [ "$minute" = 1 ] && first=$last
    rss_at+=("$rss")
  done
  # Each window ends a little after its minute: its pass line is read once the client is done.
  wait "$CLIENT_PID" 2>/dev/null || true
  CLIENT_PID=
  mapfile -t passes < <(grep -o 'throughput: [0-9.e+]* infer/sec' "$BENCH_TMP/inprocess.log" | awk '{print $2}' || true)
  printf '%6s %12s %14s\n' minute "infer/s" "RSS MB"
  for i in "${!rss_at[@]}"; do
    pass=-
    [ "$i" -gt 0 ] && pass=${passes[$((i - 1))]:--}
    printf '%6s %12s %14s\n' "$i" "$pass" "${rss_at[$i]}"
  done
  echo "client: $(grep -ho 'perfbench: [0-9]* failed' "$BENCH_TMP/inprocess.log" | tail -1 || echo 'no summary');" \
    "RSS after minute 1 -> end: $first -> $last MB ($(growth "$first" "$last"))"
fi
