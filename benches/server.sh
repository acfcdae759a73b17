#!/usr/bin/env bash
# Server efficiency (issue 2, acceptance 4): NVIDIA perf_analyzer drives `perfbench serve`'s
# `identity` model (FP32 [16], concurrency 16) over HTTP and over gRPC; prints the server's
# inferences/s (perf_analyzer's stable measurement) and the server's CPU-µs per request (its
# /proc utime + stime over the whole run, divided by the requests it completed in that time).
#
# Usage: benches/server.sh            (builds perfbench --release; PERFBENCH_BIN=... to skip)
# Env: PERFBENCH_PEERS or PERFBENCH_PA (perf_analyzer), BENCH_PORT (24100), BENCH_REQUESTS
#      (requests per measurement window, 10000), BENCH_CONCURRENCY (16), BENCH_STABILITY
#      (perf_analyzer's -s, 25: this 2-core machine is shared, 10% rarely stabilises).
set -euo pipefail
# --write-docs: run as usual, then put this run's printed tables into docs/performance.md (its
# "server" block) with the commit and the machine; a failed run writes nothing.
if [[ " $* " == *" --write-docs "* ]]; then
  args=()
  for arg in "$@"; do [ "$arg" = --write-docs ] || args+=("$arg"); done
  log=$(mktemp)
  "$0" "${args[@]}" | tee "$log"
  python3 "$(dirname "$0")/../scripts/bench-docs.py" server "$log" "benches/server.sh ${args[*]}"
  rm -f "$log"
  exit 0
fi
source "$(dirname "$0")/common.sh"
REQUESTS=${BENCH_REQUESTS:-10000}
STABILITY=${BENCH_STABILITY:-25}
CONCURRENCY=${BENCH_CONCURRENCY:-16}
[ -x "$PA" ] || die "no perf_analyzer at $PA (run scripts/setup-peers.sh)"
BIN=$(perfbench_binary)
start_server "$BIN" identity

echo "perfbench serve: identity FP32 [16], concurrency $CONCURRENCY, perf_analyzer count windows of $REQUESTS, -s $STABILITY"
printf '%-6s %12s %10s %10s %14s %16s\n' protocol "infer/s" "p50 us" requests "server CPU s" "CPU-us/request"
for protocol in http grpc; do
  url=$HOST:$PORT
  [ "$protocol" = grpc ] && url=$HOST:$((PORT + 1))
  ticks0=$(cpu_ticks "$SERVER_PID")
  done0=$(server_success_count identity)
  "$PA" -m identity -u "$url" -i "$protocol" --shape INPUT0:16 \
    --concurrency-range "$CONCURRENCY" --measurement-mode count_windows \
    --measurement-request-count "$REQUESTS" -s "$STABILITY" -r 20 -f "$BENCH_TMP/$protocol.csv" \
    >"$BENCH_TMP/$protocol.log" 2>&1 || { tail -20 "$BENCH_TMP/$protocol.log" >&2; die "perf_analyzer failed ($protocol)"; }
  ticks=$(( $(cpu_ticks "$SERVER_PID") - ticks0 ))
  done=$(( $(server_success_count identity) - done0 ))
  printf '%-6s %12s %10s %10s %14s %16s\n' "$protocol" \
    "$(csv_field "$BENCH_TMP/$protocol.csv" 'Inferences/Second')" \
    "$(csv_field "$BENCH_TMP/$protocol.csv" 'p50 latency')" "$done" \
    "$(python3 -c "print(f'{$ticks / $TICKS_PER_S:.2f}')")" \
    "$(us_per_request "$ticks" "$done")"
done
