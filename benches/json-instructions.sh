#!/usr/bin/env bash
# Instructions per call of the JSON tensor codecs (issue 33), counted by callgrind, so the figures
# hold on a loaded machine where wall-clock ratios do not:
#   - server: `perfbench serve` under callgrind answers N HTTP JSON requests for `identity` FP32
#     [1,16] and [1,16384] (64 KiB; data in and out as JSON); prints the inclusive instructions per
#     call of decode_request (the body to an InferRequest) and encode_response (the outputs to JSON);
#   - client: `perfbench profile --input-tensor-format json --output-tensor-format json` under
#     callgrind against a native server; prints the instructions of `encode_request` (the body,
#     built once per data step) and of decode_response (only the probe's answer is parsed back into
#     tensors) over the whole run.
#
# Usage: benches/json-instructions.sh   (PERFBENCH_BIN=... to measure another build)
# Env: BENCH_PORT (24100), JSON_REQUESTS (40 per size).
set -euo pipefail
# --write-docs: run as usual, then put this run's printed tables into docs/performance.md (its
# "json-instructions" block) with the commit and the machine; a failed run writes nothing.
if [[ " $* " == *" --write-docs "* ]]; then
  args=()
  for arg in "$@"; do [ "$arg" = --write-docs ] || args+=("$arg"); done
  log=$(mktemp)
  "$0" "${args[@]}" | tee "$log"
  python3 "$(dirname "$0")/../scripts/bench-docs.py" json-instructions "$log" "benches/json-instructions.sh ${args[*]}"
  rm -f "$log"
  exit 0
fi
source "$(dirname "$0")/common.sh"
command -v valgrind >/dev/null || die "needs valgrind (apt-get install valgrind)"
REQUESTS=${JSON_REQUESTS:-40}
BIN=$(perfbench_binary)

# inclusive FILE FUNCTION: the function's inclusive instructions and its call count, "Ir calls".
inclusive() {
  # Lines are "Ir (share) file:function [object]"; a function with code inlined from other files
  # has a line per file, the largest of which (its own file's) counts the whole call.
  callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null | python3 -c '
import re, sys
name, total = sys.argv[1], 0
for line in sys.stdin:
    # The function may hold spaces ("<X as Trait>::f"): everything up to the [object].
    m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*?)(?:\s+\[[^\]]*\])?\s*$", line)
    if m and ":" in m.group(2) and m.group(2).split(":", 1)[1].endswith(name):
        total = max(total, int(m.group(1).replace(",", "")))
print(total)' "$2"
}

calls() {
  python3 - "$1" "$2" <<'PY'
import re, sys
path, name = sys.argv[1], sys.argv[2]
fn_names, calls, current = {}, 0, None
for line in open(path):
    m = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?", line)
    if m:
        kind, ident, label = m.groups()
        if label:
            fn_names[ident] = label.strip()
        if kind == "cfn":
            current = fn_names.get(ident, "")
        continue
    m = re.match(r"calls=(\d+)", line)
    if m and current and current.endswith(name):
        calls += int(m.group(1))
print(calls)
PY
}

per_call() {
  local file=$1 name=$2 ir n
  ir=$(inclusive "$file" "$name")
  n=$(calls "$file" "$name")
  python3 -c "import sys; ir, n = int(sys.argv[1]), int(sys.argv[2]); print(f'{ir / n:>14,.0f} {n:>6}' if n else f'{\"n/a\":>14} {0:>6}')" "$ir" "$n"
}

server_side() {
  local n=$1 out="$BENCH_TMP/server-$1.cg"
  valgrind --tool=callgrind --callgrind-out-file="$out" "$BIN" serve --host "$HOST" --http-port "$PORT" \
    --grpc-port $((PORT + 1)) --metrics-port $((PORT + 2)) --models identity >"$BENCH_TMP/serve.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 600); do
    curl -sf "http://$HOST:$PORT/v2/models/identity/ready" >/dev/null && break
    sleep 0.2
  done
  python3 - "$HOST" "$PORT" "$n" "$REQUESTS" <<'PY'
import http.client, json, random, struct, sys
host, port, n, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(12)
values = [struct.unpack("<f", struct.pack("<f", rng.random()))[0] for _ in range(n)]
body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, n], "datatype": "FP32", "data": values}]},
                  separators=(",", ":"))
conn = http.client.HTTPConnection(host, port, timeout=600)
for _ in range(count):
    conn.request("POST", "/v2/models/identity/infer", body, {"Content-Type": "application/json"})
    answer = conn.getresponse()
    data = json.loads(answer.read())
    assert answer.status == 200, data
    got = data["outputs"][0]["data"]
    assert [struct.unpack("<f", struct.pack("<f", x))[0] for x in got] == values
PY
  kill -TERM "$SERVER_PID"
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=
  printf '%-8s %-16s %s\n' server "decode_request" "$(per_call "$out" http_json::decode_request)"
  printf '%-8s %-16s %s\n' server "encode_response" "$(per_call "$out" http_json::encode_response)"
}

client_side() {
  local n=$1 out="$BENCH_TMP/client-$1.cg"
  valgrind --tool=callgrind --callgrind-out-file="$out" "$BIN" profile -u "$HOST:$PORT" -i http -m identity \
    --shape "INPUT0:$n" --input-tensor-format json --output-tensor-format json --concurrency-range 1 \
    --request-count "$REQUESTS" -f "$BENCH_TMP/pa.csv" >"$BENCH_TMP/profile.log" 2>&1 ||
    { tail -20 "$BENCH_TMP/profile.log" >&2; die "profile failed"; }
  # Only the probe's answer is parsed (the load loop times exchanges without decoding them), and
  # the body is encoded once per data step: both are counted over the whole run.
  printf '%-8s %-16s %14s %6s\n' client "encode (total)" \
    "$(inclusive "$out" client::http::wire::encode_request | python3 -c 'print(f"{int(input()):,}")')" \
    "$(calls "$out" client::http::wire::encode_request)"
  printf '%-8s %-16s %14s %6s\n' client "decode (total)" \
    "$(inclusive "$out" client::http::wire::decode_response | python3 -c 'print(f"{int(input()):,}")')" \
    "$(calls "$out" client::http::wire::decode_response)"
}

echo "perfbench $("$BIN" --version 2>/dev/null || echo '?'): callgrind instructions per call (inclusive), identity FP32 [1,N], JSON data both ways"
printf '%-8s %-16s %14s %6s\n' side function "Ir/call" calls
for n in 16 16384; do
  echo "N = $n"
  server_side "$n"
done
start_server "$BIN" identity
for n in 16 16384; do
  echo "N = $n"
  client_side "$n"
done
