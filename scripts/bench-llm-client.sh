#!/usr/bin/env bash
# What streaming costs the client (issue 31); a bench: it prints figures, it asserts nothing.
#   1. CPU time per received SSE event, `perfbench llm` and AIPerf 0.13, same server, same load
#      (scripts/llm-client-truth.py, which also prints each one's TTFT error against the server's
#      clock). Skipped without the AIPerf virtualenv (scripts/setup-genai-peers.sh) or with --no-aiperf.
#   2. 1,000 concurrent streams from one client core: `perfbench llm` pinned to CPU 0 (taskset),
#      an open loop of 500 requests/s whose streams last 2 s each, against `perfbench serve` on the
#      other CPUs; its send lag (how late each request left its schedule) and CPU.
# Usage: scripts/bench-llm-client.sh [--write-docs] [--no-aiperf] [--perfbench PATH] [--rate R] [--seconds S]
set -euo pipefail
# --write-docs: run as usual, then put this run's printed tables into docs/performance.md (its
# "llm-client" block) with the commit and the machine; a failed run writes nothing.
if [[ " $* " == *" --write-docs "* ]]; then
  args=()
  for arg in "$@"; do [ "$arg" = --write-docs ] || args+=("$arg"); done
  log=$(mktemp)
  "$0" "${args[@]}" | tee "$log"
  python3 "$(dirname "$0")/../scripts/bench-docs.py" llm-client "$log" "scripts/bench-llm-client.sh ${args[*]}"
  rm -f "$log"
  exit 0
fi
cd "$(dirname "$0")/.."
PEERS=${PERFBENCH_PEERS:-$HOME/.cache/perfbench-peers}
aiperf=1
bin=""
rate=500
seconds=8
while [ $# -gt 0 ]; do
  case $1 in
    --no-aiperf) aiperf=0 ;;
    --perfbench) bin=$2; shift ;;
    --rate) rate=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$bin" ]; then
  cargo build --locked --quiet
  bin=${CARGO_TARGET_DIR:-$PWD/target}/debug/perfbench
fi
cpus=$(nproc)
work=$(mktemp -d)
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

if [ "$aiperf" = 1 ] && [ -x "$PEERS/aiperf-venv/bin/python" ]; then
  echo "== CPU per event and TTFT error: perfbench llm and AIPerf 0.13 (chat, streaming, 64 input / 32 output tokens)"
  "$PEERS/aiperf-venv/bin/python" scripts/llm-client-truth.py --perfbench "$bin" --concurrency 1 64
  echo
fi

echo "== 1,000 streams from one client core ($cpus CPUs here)"
mkdir -p "$work/repo/llm"
# 20 ms decode steps whatever the batch, room for 2,048 sequences: every stream of 100 tokens
# lasts about 2 s, so 500 requests/s keep about 1,000 streams open (50,000 events/s).
cat > "$work/repo/llm/config.pbtxt" <<'EOF'
backend: "llm"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
parameters { key: "step_us" value { string_value: "20000" } }
parameters { key: "decode_us_per_seq" value { string_value: "0" } }
parameters { key: "prefill_us_per_token" value { string_value: "0" } }
parameters { key: "max_num_seqs" value { string_value: "2048" } }
parameters { key: "max_num_batched_tokens" value { string_value: "1000000" } }
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
load=(llm -m llm -u "127.0.0.1:$port" --streaming --synthetic-input-tokens-mean 32 --output-tokens-mean 100)
# Warm-up: the twin opens its tokenizer on its first request.
"$bin" "${load[@]}" --request-count 4 --artifact-dir "$work/warmup" > /dev/null
# Client CPU from /usr/bin/time when installed, else from the kernel's child accounting.
timer=(python3 -c 'import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{r.ru_utime} {r.ru_stime}\n")
sys.exit(rc)' "$work/cpu")
[ -x /usr/bin/time ] && timer=(/usr/bin/time -o "$work/cpu" -f "%U %S")
"${timer[@]}" taskset -c 0 "$bin" "${load[@]}" \
  --request-rate "$rate" --arrival-pattern constant --benchmark-duration "$seconds" --artifact-dir "$work/streams" \
  > "$work/streams.out" 2>&1 || { tail -n 20 "$work/streams.out"; exit 1; }
grep -E "Request Count|Request Throughput|Output Token Throughput \(|Gaps between|Client:|CLIENT-LIMITED" \
  "$work/streams.out" || true
python3 - "$work/streams/profile_export.jsonl" "$work/cpu" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
user, system = map(float, open(sys.argv[2]).read().split()[-2:])
lags = sorted(l["metadata"]["send_lag_ns"] / 1e3 for l in lines)
spans = sorted((l["metadata"]["request_start_ns"], l["metadata"]["request_end_ns"]) for l in lines)
# Events: one per content response (the twin sends one token per event).
events = sum(len(l["metrics"].get("inter_chunk_latency", {"value": []})["value"]) + 1
             for l in lines if l.get("error") is None and "time_to_first_token" in l["metrics"])
failed = sum(1 for l in lines if l.get("error") is not None)
# The most streams open at once: a sweep over starts and ends.
edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
open_now = peak = 0
for _, step in edges:
    open_now += step
    peak = max(peak, open_now)
p = lambda q: lags[min(len(lags) - 1, int(q * (len(lags) - 1)))]
print(f"requests {len(lags)} ({failed} failed), most streams open at once {peak}, events {events}")
print(f"send lag p50 {p(0.5):.0f} µs, p99 {p(0.99):.0f} µs, max {lags[-1]:.0f} µs")
print(f"client CPU {user:.2f} s user + {system:.2f} s system, start-up included: "
      f"{(user + system) / max(events, 1) * 1e6:.1f} µs per event")
EOF
