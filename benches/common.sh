# Shared by the bench scripts (sourced, not run): the binaries, a `perfbench serve` that is stopped
# on exit, and the counters the benches divide: a process's CPU time and the server's completed
# requests.

PEERS=${PERFBENCH_PEERS:-$HOME/.cache/perfbench-peers}
PA=${PERFBENCH_PA:-$PEERS/pa.sh}
PORT=${BENCH_PORT:-24100}
HOST=127.0.0.1
TICKS_PER_S=$(getconf CLK_TCK)
BENCH_TMP=$(mktemp -d)
SERVER_PID=

die() { echo "bench: $*" >&2; exit 1; }

cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$BENCH_TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The perfbench binary: $PERFBENCH_BIN, or a release build of this checkout.
perfbench_binary() {
  if [ -n "${PERFBENCH_BIN:-}" ]; then
    echo "$PERFBENCH_BIN"
    return
  fi
  (cd "$(dirname "${BASH_SOURCE[0]}")/.." && cargo build --release --locked --quiet) >&2 \
    || die "cargo build --release failed"
  echo "${CARGO_TARGET_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/target}/release/perfbench"
}

# start_server BIN MODEL: `perfbench serve` on $PORT (http), +1 (grpc), +2 (metrics).
start_server() {
  "$1" serve --host "$HOST" --http-port "$PORT" --grpc-port $((PORT + 1)) \
    --metrics-port $((PORT + 2)) --models "$2" >"$BENCH_TMP/serve.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 600); do
    if curl -sf "http://$HOST:$PORT/v2/models/$2/ready" >/dev/null; then
      return
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$BENCH_TMP/serve.log" >&2; die "server exited"; }
    sleep 0.1
  done
  die "model $2 not ready after 60 s"
}

# CPU time (user + system, all threads) a live process has used, in clock ticks.
cpu_ticks() {
  # Fields after the ")" that closes the command name: utime and stime are the 12th and 13th.
  sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}

# Requests the server has completed successfully for MODEL (statistics extension).
server_success_count() {
  curl -sf "http://$HOST:$PORT/v2/models/$1/stats" |
    python3 -c 'import json, sys; s = json.load(sys.stdin)["model_stats"][0]; print(s["inference_stats"]["success"]["count"])'
}

# csv_field FILE COLUMN: that column of the first row of a perf_analyzer CSV.
csv_field() {
  python3 - "$1" "$2" <<'PY'
import csv, sys
rows = csv.DictReader(l for l in open(sys.argv[1]) if l.strip())
print(next(rows)[sys.argv[2]])
PY
}

# µs per request from a tick delta and a request count.
us_per_request() {
  python3 -c "import sys; t, n, hz = map(float, sys.argv[1:]); print(f'{t / hz * 1e6 / n:.1f}' if n else 'n/a')" "$1" "$2" "$TICKS_PER_S"
}

# cpu_seconds_of CMD...: runs CMD (output to $BENCH_TMP/cmd.log) and prints the user + system
# CPU seconds it and its children used; fails with the log's tail if CMD fails.
cpu_seconds_of() {
  python3 - "$BENCH_TMP/cmd.log" "$@" <<'PY' || { tail -20 "$BENCH_TMP/cmd.log" >&2; die "$1 failed"; }
import resource, subprocess, sys
with open(sys.argv[1], "wb") as log:
    rc = subprocess.run(sys.argv[2:], stdout=log, stderr=subprocess.STDOUT).returncode
if rc != 0:
    sys.exit(rc)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{r.ru_utime + r.ru_stime:.3f}")
PY
}
