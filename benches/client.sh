#!/usr/bin/env bash
# Client efficiency (issue 3, acceptance 4): `perfbench profile` and NVIDIA perf_analyzer each
# send the same number of requests to `perfbench serve`'s `identity` (FP32 [16], concurrency 16)
# over HTTP and over gRPC; prints each CLIENT's CPU-µs per request (its user + system time from
# getrusage, divided by the requests the server completed while it ran). Target: perfbench at
# most half of perf_analyzer.
#
# Usage: benches/client.sh            (builds perfbench --release; PERFBENCH_BIN=... to skip)
# Env: PERFBENCH_PEERS or PERFBENCH_PA, BENCH_PORT (24100), BENCH_REQUESTS (20000),
#      BENCH_CONCURRENCY (16).
set -euo pipefail
# --write-docs: run as usual, then put this run's printed tables into docs/performance.md (its
# "client" block) with the commit and the machine; a failed run writes nothing.
if [[ " $* " == *" --write-docs "* ]]; then
  args=()
  for arg in "$@"; do [ "$arg" = --write-docs ] || args+=("$arg"); done
  log=$(mktemp)
  "$0" "${args[@]}" | tee "$log"
  python3 "$(dirname "$0")/../scripts/bench-docs.py" client "$log" "benches/client.sh ${args[*]}"
  rm -f "$log"
  exit 0
fi
source "$(dirname "$0")/common.sh"
REQUESTS=${BENCH_REQUESTS:-20000}
CONCURRENCY=${BENCH_CONCURRENCY:-16}
[ -x "$PA" ] || die "no perf_analyzer at $PA (run scripts/setup-peers.sh)"
BIN=$(perfbench_binary)
"$BIN" profile --help >/dev/null 2>&1 || die "$BIN has no 'profile' subcommand"
start_server "$BIN" identity

echo "client CPU per request: identity FP32 [16], concurrency $CONCURRENCY, --request-count $REQUESTS"
printf '%-6s %-14s %10s %12s %16s\n' protocol client requests "client CPU s" "CPU-us/request"
for protocol in http grpc; do
  url=$HOST:$PORT
  [ "$protocol" = grpc ] && url=$HOST:$((PORT + 1))
  common=(-m identity -u "$url" -i "$protocol" --shape INPUT0:16
    --concurrency-range "$CONCURRENCY" --request-count "$REQUESTS")
  declare -A per_request=()
  for client in perf_analyzer perfbench; do
    cmd=("$PA")
    [ "$client" = perfbench ] && cmd=("$BIN" profile)
    done0=$(server_success_count identity)
    cpu_s=$(cpu_seconds_of "${cmd[@]}" "${common[@]}" -f "$BENCH_TMP/$client-$protocol.csv")
    done=$(( $(server_success_count identity) - done0 ))
    per_request[$client]=$(python3 -c "print(f'{$cpu_s * 1e6 / $done:.1f}' if $done else 'n/a')")
    printf '%-6s %-14s %10s %12s %16s\n' "$protocol" "$client" "$done" "$cpu_s" "${per_request[$client]}"
  done
  python3 -c 'import sys; pa, pb = map(float, sys.argv[1:]); print("       perfbench / perf_analyzer = %.2f (target <= 0.50)" % (pb / pa))' \
    "${per_request[perf_analyzer]}" "${per_request[perfbench]}"
done
