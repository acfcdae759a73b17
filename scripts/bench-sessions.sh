#!/usr/bin/env bash
# 10,000 concurrent sessions from one `perfbench llm` process (issue 44); a bench: it prints
# figures, it asserts nothing. Each session runs --turns turns of 16 output tokens with 5 s of
# think time between them; the sessions' slots open over 5 s (--concurrency-ramp-duration), so
# about 10,000 / 5.2 s = 1,900 turns/s arrive once all are open. The client is pinned to CPU 0,
# `perfbench serve`'s twin (10 ms steps whatever the batch) to the other CPUs. Printed: turns/s,
# TTFT, the client's event-handling lag and CLIENT-LIMITED verdict, its peak RSS and CPU; then the
# same load from AIPerf 0.13 when its virtualenv is there (scripts/setup-genai-peers.sh).
# Usage: scripts/bench-sessions.sh [--write-docs] [--no-aiperf] [--perfbench PATH] [--sessions N] [--turns T]
set -euo pipefail
# --write-docs: run as usual, then put this run's printed tables into docs/performance.md (its
# "sessions" block) with the commit and the machine; a failed run writes nothing.
if [[ " $* " == *" --write-docs "* ]]; then
  args=()
  for arg in "$@"; do [ "$arg" = --write-docs ] || args+=("$arg"); done
  log=$(mktemp)
  "$0" "${args[@]}" | tee "$log"
  python3 "$(dirname "$0")/../scripts/bench-docs.py" sessions "$log" "scripts/bench-sessions.sh ${args[*]}"
  rm -f "$log"
  exit 0
fi
cd "$(dirname "$0")/.."
PEERS=${PERFBENCH_PEERS:-$HOME/.cache/perfbench-peers}
aiperf=1
bin=""
sessions=10000
turns=4
while [ $# -gt 0 ]; do
  case $1 in
    --no-aiperf) aiperf=0 ;;
    --perfbench) bin=$2; shift ;;
    --sessions) sessions=$2; shift ;;
    --turns) turns=$2; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$bin" ]; then
  cargo build --locked --quiet
  bin=${CARGO_TARGET_DIR:-$PWD/target}/debug/perfbench
fi
[ -x /usr/bin/time ] || { echo "bench-sessions needs /usr/bin/time (Debian's time package)" >&2; exit 2; }
cpus=$(nproc)
work=$(mktemp -d)
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

mkdir -p "$work/repo/llm"
# Room for every turn in flight at once; no prefill cost, so the twin's step is the only wait.
cat > "$work/repo/llm/config.pbtxt" <<'EOF'
backend: "llm"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
parameters { key: "step_us" value { string_value: "10000" } }
parameters { key: "decode_us_per_seq" value { string_value: "0" } }
parameters { key: "prefill_us_per_token" value { string_value: "0" } }
parameters { key: "max_num_seqs" value { string_value: "16384" } }
parameters { key: "max_num_batched_tokens" value { string_value: "100000000" } }
parameters { key: "max_model_len" value { string_value: "8192" } }
EOF
server_cpus="1-$((cpus - 1))"
[ "$cpus" -gt 1 ] || server_cpus=0
port=${BENCH_PORT:-$((20000 + RANDOM % 20000))}
taskset -c "$server_cpus" "$bin" serve --host 127.0.0.1 --http-port "$port" --grpc-port 0 --metrics-port 0 \
  --model-repository "$work/repo" --models llm 2> "$work/serve.log" &
server_pid=$!
for _ in $(seq 100); do
  python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/v2/models/llm/ready', timeout=1)" \
    2> /dev/null && break
  sleep 0.1
done

# The same flags for both tools (AIPerf 0.13's names).
load=(-m llm --streaming --endpoint-type chat --concurrency "$sessions" --conversation-num "$sessions"
  --conversation-turn-mean "$turns" --conversation-turn-stddev 0
  --conversation-turn-delay-mean 5000 --conversation-turn-delay-stddev 0 --concurrency-ramp-duration 5
  --synthetic-input-tokens-mean 32 --synthetic-input-tokens-stddev 0
  --output-tokens-mean 16 --output-tokens-stddev 0)
# Warm-up: the twin opens its tokenizer on its first request.
"$bin" llm -m llm -u "127.0.0.1:$port" --streaming --request-count 4 --artifact-dir "$work/warmup" > /dev/null

# summarize NAME EXPORT_JSONL TIME_FILE: turns/s once every session is open, TTFT, errors, RSS, CPU.
summarize() {
  python3 - "$@" <<'EOF'
import json, sys
name, export, timing = sys.argv[1:4]
lines = [json.loads(l) for l in open(export) if l.strip()]
user, system, rss_kb, wall = open(timing).read().split()[-4:]
ok = [l for l in lines if l.get("error") is None]
def ms(m):
    return m["value"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0}[m.get("unit", "ms")]
ttft = sorted(ms(l["metrics"]["time_to_first_token"]) for l in ok if "time_to_first_token" in l["metrics"])
starts = sorted(l["metadata"]["request_start_ns"] for l in lines)
# Steady state: from 6 s after the first turn (every slot open, first think time over) to 1 s
# before the last turn left.
lo, hi = starts[0] + 6e9, starts[-1] - 1e9
steady = [s for s in starts if lo <= s <= hi]
rate = len(steady) / ((hi - lo) / 1e9) if hi > lo else float("nan")
p = lambda xs, q: xs[min(len(xs) - 1, int(q * (len(xs) - 1)))] if xs else float("nan")
print(f"{name}: {len(lines)} turns ({len(lines) - len(ok)} failed), {rate:.0f} turns/s in steady state, "
      f"TTFT p50 {p(ttft, 0.5):.1f} ms p99 {p(ttft, 0.99):.1f} ms")
print(f"{name}: peak RSS {int(rss_kb) / 1024:.0f} MiB (largest process), CPU {float(user):.1f} s user + "
      f"{float(system):.1f} s system over {float(wall):.1f} s")
EOF
}

echo "== $sessions sessions x $turns turns, 5 s think time, 16 output tokens a turn ($cpus CPUs here; client on CPU 0)"
/usr/bin/time -o "$work/pb.time" -f "%U %S %M %e" taskset -c 0 "$bin" llm -u "127.0.0.1:$port" "${load[@]}" \
  --artifact-dir "$work/pb" > "$work/pb.out" 2>&1 || { tail -n 20 "$work/pb.out"; exit 1; }
grep -E "^Client:|CLIENT-LIMITED|Session Count|Request Throughput" "$work/pb.out" || true
summarize "perfbench llm" "$work/pb/profile_export.jsonl" "$work/pb.time"

if [ "$aiperf" = 1 ] && [ -x "$PEERS/aiperf-venv/bin/aiperf" ]; then
  echo
  echo "== the same load from AIPerf 0.13 (its processes pinned to CPU 0 as well)"
  # AIPerf 0.13 must run without HF_HUB_OFFLINE (offline, it rejects a plain directory); it
  # counts tokens with a tokenizer: the bench trains the interop suite's small one.
  tok="$work/tokenizer"
  "$PEERS/aiperf-venv/bin/python" -c "import sys; sys.path.insert(0, 'tests/interop'); from twin import train_tokenizer; train_tokenizer('$tok')"
  if env -u HF_HUB_OFFLINE /usr/bin/time -o "$work/ai.time" -f "%U %S %M %e" taskset -c 0 \
      "$PEERS/aiperf-venv/bin/aiperf" profile --url "http://127.0.0.1:$port" "${load[@]}" \
      --tokenizer "$tok" --ui-type none --artifact-dir "$work/ai" > "$work/ai.out" 2>&1; then
    summarize "AIPerf 0.13" "$(find "$work/ai" -name profile_export.jsonl | head -n 1)" "$work/ai.time"
  else
    echo "AIPerf 0.13 failed; its last lines:"
    tail -n 15 "$work/ai.out"
  fi
fi
