#!/usr/bin/env bash
# Hot paths against their floor (issue 12). Each server runs pinned to core 0 and each load
# generator to core 1, 16 requests in flight, `identity` FP32 with 16 floats and with 64 KiB:
#   - req/s and server CPU-µs per request of `perfbench serve` next to a bare echo server doing
#     the same exchange (examples/echo_axum.rs, examples/echo_tonic.rs), and their ratio: the
#     echo's CPU per request over ours, which is our req/s over the echo's when the server core
#     is saturated (req/s alone also moves with whatever else runs on the machine),
#     for HTTP JSON and HTTP binary tensors (wrk), gRPC unary (h2load), gRPC streaming
#     (`perfbench profile --streaming`), and in-process (`--service-kind inprocess`, one process);
#   - streamed tokens: server CPU-µs per SSE chunk of `perfbench serve`'s llm twin (step costs
#     set to 0, so the batcher runs flat out) next to echo_axum's bare SSE answer of the same
#     number of chunks of the same shape (wrk posting streamed /v1/completions, SSE_TOKENS each);
#   - the client's CPU-µs per request (user + system from /usr/bin/time over the run) for
#     `perfbench profile` against wrk / h2load (and perf_analyzer when installed) on the same
#     server at the same concurrency;
#   - Server Queue from the statistics extension at concurrency 1, and at 16 with the average
#     batch size, so a faster queue is seen not to change batching;
#   - real Triton as a peer (when scripts/setup-peers.sh installed it): its server CPU-µs per
#     request serving the same identity model (python backend: tests/interop/models/identity),
#     beside perfbench serve's, same load, same cores. A python model is not a floor; users ask.
#
# Usage: scripts/bench-hot-paths.sh [--write-docs]  (builds --release; installs wrk, h2load and perf with
#                                        scripts/setup-bench-tools.sh)
# Env: BENCH_SECONDS (5, per wrk/h2load row), BENCH_REQUESTS (20000, per perfbench row, a
#      quarter of it for 64 KiB), BENCH_CLIENT_REQUESTS (200000, per perfbench client row),
#      BENCH_PORT (24100), PERFBENCH_PEERS / PERFBENCH_PA (optional
#      perf_analyzer, see scripts/setup-peers.sh), BENCH_SKIP_BUILD=1 (use target/release as is),
#      PERFBENCH_BIN (another perfbench binary to measure, e.g. an older build, against the same echoes),
#      BENCH_SSE_ONLY=1 (only the SSE row), BENCH_TRITON_ONLY=1 (only the Triton rows),
#      BENCH_CLIENT_ONLY=1 (only the client rows), BENCH_SERVER_PATHS="json grpc" (only these
#      server rows, of json jsonin jsonout bin grpc stream inprocess).
set -euo pipefail
# --write-docs: run as usual, then put this run's printed tables into docs/performance.md (its
# "hot-paths" block) with the commit and the machine; a failed run writes nothing.
if [[ " $* " == *" --write-docs "* ]]; then
  args=()
  for arg in "$@"; do [ "$arg" = --write-docs ] || args+=("$arg"); done
  log=$(mktemp)
  "$0" "${args[@]}" | tee "$log"
  python3 "$(dirname "$0")/../scripts/bench-docs.py" hot-paths "$log" "scripts/bench-hot-paths.sh ${args[*]}"
  rm -f "$log"
  exit 0
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/benches/common.sh"
SECONDS_PER_ROW=${BENCH_SECONDS:-5}
REQUESTS=${BENCH_REQUESTS:-20000}
# The client rows' CPU comes from /usr/bin/time, in 10 ms steps: 200,000 requests make a step
# 0.05 us per request (at 20,000 it was 0.5 us, 7% of the figure).
CLIENT_REQUESTS=${BENCH_CLIENT_REQUESTS:-200000}
CONCURRENCY=16
ECHO_HTTP_PORT=$((PORT + 10))
ECHO_GRPC_PORT=$((PORT + 11))
ECHO_PARSE_PORT=$((PORT + 12))
LLM_PORT=$((PORT + 20))
TRITON_PORT=$((PORT + 30))
SSE_TOKENS=64
SERVER_CORE=0
LOAD_CORE=1
EXTRA_PIDS=()

[ "$(nproc --all)" -ge 2 ] || die "needs two cores: one for the server, one for the load"

stop_extra() {
  for pid in "${EXTRA_PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  done
  cleanup
}
trap stop_extra EXIT

need_tools() {
  "$ROOT/scripts/setup-bench-tools.sh" >&2 || die "cannot install the bench's tools (scripts/setup-bench-tools.sh)"
}

build() {
  TARGET=${CARGO_TARGET_DIR:-$ROOT/target}/release
  if [ -z "${BENCH_SKIP_BUILD:-}" ]; then
    (cd "$ROOT" && cargo build --release --locked --quiet --bin perfbench --features bench-echo --example echo_axum --example echo_tonic) >&2 ||
      die "cargo build --release failed"
  fi
  BIN=${PERFBENCH_BIN:-$TARGET/perfbench}
  local needed=("$BIN")
  [ -n "${BENCH_TRITON_ONLY:-}" ] || needed+=("$TARGET/examples/echo_axum")
  [ -n "${BENCH_SSE_ONLY:-}${BENCH_TRITON_ONLY:-}" ] || needed+=("$TARGET/examples/echo_tonic")
  for b in "${needed[@]}"; do
    [ -x "$b" ] || die "missing $b"
  done
}

# Request bodies in $BENCH_TMP: identity's INPUT0 of N floats as HTTP JSON (json-N), as HTTP
# binary tensor data (bin-N, with bin-N.len holding Inference-Header-Content-Length), and as a
# gRPC-framed ModelInferRequest (grpc-N); wrk scripts post-N.lua / bin-N.lua.
make_bodies() {
  python3 - "$BENCH_TMP" "$@" <<'PY'
import json, random, struct, sys
out, sizes = sys.argv[1], [int(n) for n in sys.argv[2:]]
rng = random.Random(12)

def varint(n):
    b = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        b.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(b)

def field(number, payload):  # length-delimited field
    return varint(number << 3 | 2) + varint(len(payload)) + payload

for n in sizes:
    values = [struct.unpack("<f", struct.pack("<f", rng.random()))[0] for _ in range(n)]
    raw = struct.pack(f"<{n}f", *values)
    shape = [1, n]
    body = {"inputs": [{"name": "INPUT0", "shape": shape, "datatype": "FP32", "data": values}]}
    open(f"{out}/json-{n}", "w").write(json.dumps(body, separators=(",", ":")))
    header = json.dumps({"inputs": [{"name": "INPUT0", "shape": shape, "datatype": "FP32",
                                     "parameters": {"binary_data_size": len(raw)}}],
                         "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]},
                        separators=(",", ":")).encode()
    open(f"{out}/bin-{n}", "wb").write(header + raw)
    open(f"{out}/bin-{n}.len", "w").write(str(len(header)))
    # One direction of JSON at a time: JSON data in, the output back binary (jsonin-N), and
    # binary data in, the output back as JSON data (jsonout-N).
    jsonin = dict(body, outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": True}}])
    open(f"{out}/jsonin-{n}", "w").write(json.dumps(jsonin, separators=(",", ":")))
    out_header = json.dumps({"inputs": [{"name": "INPUT0", "shape": shape, "datatype": "FP32",
                                         "parameters": {"binary_data_size": len(raw)}}],
                             "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}]},
                            separators=(",", ":")).encode()
    open(f"{out}/jsonout-{n}", "wb").write(out_header + raw)
    tensor = field(1, b"INPUT0") + field(2, b"FP32") + field(3, b"".join(varint(d) for d in shape))
    request = field(1, b"identity") + field(5, tensor) + field(6, field(1, b"OUTPUT0")) + field(7, raw)
    open(f"{out}/grpc-{n}", "wb").write(b"\0" + struct.pack(">I", len(request)) + request)
    for kind, headers in [("json", {"Content-Type": "application/json"}),
                          ("jsonin", {"Content-Type": "application/json"}),
                          ("jsonout", {"Content-Type": "application/octet-stream",
                                       "Inference-Header-Content-Length": str(len(out_header))}),
                          ("bin", {"Content-Type": "application/octet-stream",
                                   "Inference-Header-Content-Length": str(len(header))})]:
        lua = ['wrk.method = "POST"', f'wrk.body = io.open("{out}/{kind}-{n}", "rb"):read("*a")']
        lua += [f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()]
        open(f"{out}/{kind}-{n}.lua", "w").write("\n".join(lua) + "\n")
PY
}

wait_port() {
  for _ in $(seq 1 300); do
    (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null && return
    sleep 0.1
  done
  die "nothing listens on $1"
}

start_servers() {
  taskset -c $SERVER_CORE "$BIN" serve --host "$HOST" --http-port "$PORT" --grpc-port $((PORT + 1)) \
    --metrics-port $((PORT + 2)) --models identity,delay >"$BENCH_TMP/serve.log" 2>&1 &
  SERVER_PID=$!
  if [ -n "${BENCH_TRITON_ONLY:-}" ]; then
    wait_port "$PORT"
    return
  fi
  taskset -c $SERVER_CORE "$TARGET/examples/echo_axum" "$ECHO_HTTP_PORT" >"$BENCH_TMP/echo_axum.log" 2>&1 &
  ECHO_HTTP_PID=$!
  EXTRA_PIDS+=("$ECHO_HTTP_PID")
  taskset -c $SERVER_CORE "$TARGET/examples/echo_axum" "$ECHO_PARSE_PORT" --parse >"$BENCH_TMP/echo_parse.log" 2>&1 &
  ECHO_PARSE_PID=$!
  EXTRA_PIDS+=("$ECHO_PARSE_PID")
  local ports=("$PORT" $((PORT + 1)) "$ECHO_HTTP_PORT" "$ECHO_PARSE_PORT")
  if [ -z "${BENCH_SSE_ONLY:-}" ]; then
    taskset -c $SERVER_CORE "$TARGET/examples/echo_tonic" "$ECHO_GRPC_PORT" >"$BENCH_TMP/echo_tonic.log" 2>&1 &
    ECHO_GRPC_PID=$!
    EXTRA_PIDS+=("$ECHO_GRPC_PID")
    ports+=("$ECHO_GRPC_PORT")
  fi
  # The llm twin with free steps: what is left is the server's own work per token.
  mkdir -p "$BENCH_TMP/llm-repo/llm"
  sed -E 's/key: "(step_us|decode_us_per_seq|prefill_us_per_token)" value \{ string_value: "[0-9]+" \}/key: "\1" value { string_value: "0" }/' \
    "$ROOT/src/server/zoo/llm.pbtxt" >"$BENCH_TMP/llm-repo/llm/config.pbtxt"
  taskset -c $SERVER_CORE "$BIN" serve --host "$HOST" --http-port "$LLM_PORT" --grpc-port $((LLM_PORT + 1)) \
    --metrics-port $((LLM_PORT + 2)) --model-repository "$BENCH_TMP/llm-repo" >"$BENCH_TMP/serve-llm.log" 2>&1 &
  LLM_PID=$!
  EXTRA_PIDS+=("$LLM_PID")
  for p in "${ports[@]}" "$LLM_PORT"; do wait_port "$p"; done
  curl -sf "http://$HOST:$PORT/v2/models/identity/ready" >/dev/null || die "identity not ready"
}

# A model's statistics as "success_count queue_count queue_ns inference_count execution_count".
stats() {
  curl -sf "http://$HOST:$PORT/v2/models/$1/stats" | python3 -c '
import json, sys
s = json.load(sys.stdin)["model_stats"][0]
i = s["inference_stats"]
print(i["success"]["count"], i["queue"]["count"], i["queue"]["ns"], s["inference_count"], s["execution_count"])'
}

# CPU ticks of a process and its children (Triton's python backend runs each model instance in
# a stub process of its own; perfbench serve and the echoes have none).
tree_ticks() {
  local total=0 p
  for p in "$1" $(pgrep -P "$1"); do total=$((total + $(cpu_ticks "$p"))); done
  echo "$total"
}

# Runs a load command pinned to the load core; sets LOAD_CPU_S (its user + system seconds),
# SERVER_CPU_TICKS (the server's ticks meanwhile, its children's included) and leaves its output
# in $BENCH_TMP/load.out.
run_load() {
  local server_pid=$1
  shift
  local t0
  t0=$(tree_ticks "$server_pid")
  taskset -c $LOAD_CORE /usr/bin/time -f '%U %S' -o "$BENCH_TMP/time.out" "$@" >"$BENCH_TMP/load.out" 2>&1 ||
    { tail -20 "$BENCH_TMP/load.out" >&2; die "load failed: $*"; }
  SERVER_CPU_TICKS=$(($(tree_ticks "$server_pid") - t0))
  LOAD_CPU_S=$(awk 'END {print $1 + $2}' "$BENCH_TMP/time.out")
}

# Parses the last load's output into REQS (completed requests) and RATE (req/s).
parse_wrk() {
  grep -q "Non-2xx" "$BENCH_TMP/load.out" && { cat "$BENCH_TMP/load.out" >&2; die "wrk saw errors"; }
  REQS=$(awk '/requests in/ {print $1}' "$BENCH_TMP/load.out")
  RATE=$(awk '/^Requests\/sec/ {print $2}' "$BENCH_TMP/load.out")
}
parse_h2load() {
  REQS=$(awk '/^requests:/ {print $8}' "$BENCH_TMP/load.out")
  local failed
  failed=$(awk '/^requests:/ {print $10}' "$BENCH_TMP/load.out")
  [ "$failed" = 0 ] || { cat "$BENCH_TMP/load.out" >&2; die "h2load saw failures"; }
  RATE=$(awk '/^finished in/ {print $4}' "$BENCH_TMP/load.out")
}
parse_profile() {
  REQS=$1
  RATE=$(csv_field "$BENCH_TMP/pa.csv" 'Inferences/Second')
}

per_request_us() { python3 -c "import sys; v, n = float(sys.argv[1]), float(sys.argv[2]); print(f'{v * 1e6 / n:.1f}' if n else 'n/a')" "$1" "$2"; }
ticks_s() { python3 -c "print($1 / $TICKS_PER_S)"; }

# measure KIND N SERVER_PID PORT: one load of KIND at payload N against one server; prints
# "req/s CPU-us/request" of that server.
measure() {
  local kind=$1 n=$2 pid=$3 port=$4 model=identity count=$REQUESTS
  [ "$n" -gt 16 ] && count=$((REQUESTS / 4))
  case $kind in
  json | jsonin | jsonout | bin)
    taskset -c $LOAD_CORE wrk -t1 -c$CONCURRENCY -d1s -s "$BENCH_TMP/$kind-$n.lua" "http://$HOST:$port/v2/models/identity/infer" >/dev/null
    run_load "$pid" wrk -t1 -c$CONCURRENCY -d"${SECONDS_PER_ROW}s" -s "$BENCH_TMP/$kind-$n.lua" \
      "http://$HOST:$port/v2/models/identity/infer"
    parse_wrk
    ;;
  grpc)
    local h2=(h2load -c1 -m$CONCURRENCY -t1 -d "$BENCH_TMP/grpc-$n" -H 'content-type: application/grpc' -H 'te: trailers'
      "http://$HOST:$port/inference.GRPCInferenceService/ModelInfer")
    taskset -c $LOAD_CORE "${h2[@]}" -D 1 >/dev/null
    run_load "$pid" "${h2[@]}" -D "$SECONDS_PER_ROW"
    parse_h2load
    ;;
  stream)
    [ "$port" = "$ECHO_GRPC_PORT" ] && model=echo
    run_load "$pid" "$BIN" profile -u "$HOST:$port" -i grpc --streaming -m $model --shape "INPUT0:$n" \
      --concurrency-range $CONCURRENCY --request-count "$count" -f "$BENCH_TMP/pa.csv"
    parse_profile "$count"
    ;;
  inprocess)
    # Client and server are one process here: its CPU is the load's, on the server core. Ten
    # times the requests, so /usr/bin/time's 10 ms resolution is a small part of the total.
    count=$((count * 10))
    taskset -c $SERVER_CORE /usr/bin/time -f '%U %S' -o "$BENCH_TMP/time.out" "$BIN" profile --service-kind inprocess -m identity --shape "INPUT0:$n" \
      --concurrency-range $CONCURRENCY --request-count "$count" -f "$BENCH_TMP/pa.csv" >"$BENCH_TMP/load.out" 2>&1 ||
      { tail -20 "$BENCH_TMP/load.out" >&2; die "in-process profile failed"; }
    parse_profile "$count"
    echo "$RATE $(per_request_us "$(awk 'END {print $1 + $2}' "$BENCH_TMP/time.out")" "$REQS")"
    return
    ;;
  esac
  echo "$RATE $(per_request_us "$(ticks_s "$SERVER_CPU_TICKS")" "$REQS")"
}

server_table() {
  echo
  echo "servers on core $SERVER_CORE, load on core $LOAD_CORE, $CONCURRENCY in flight; identity FP32 [1,N];"
  echo "ratio = echo CPU-us/req / perfbench CPU-us/req (the req/s ratio on a saturated server core)"
  echo "the echo answers each request with the body it received, unparsed (JSON rows: the request's JSON text)"
  printf '%-14s %-8s %12s %10s %12s %10s %7s\n' path payload "perfbench/s" "CPU-us/req" "echo/s" "CPU-us/req" ratio
  local path kind n ours echo label parse_rate parse_cpu
  local sizes parsed_rows=()
  for path in "HTTP JSON:json" "HTTP JSON in:jsonin" "HTTP JSON out:jsonout" "HTTP binary:bin" "gRPC unary:grpc" \
    "gRPC stream:stream" "in-process:inprocess"; do
    label=${path%%:*}
    kind=${path##*:}
    [ -n "${BENCH_SERVER_PATHS:-}" ] && [[ " $BENCH_SERVER_PATHS " != *" $kind "* ]] && continue
    sizes="16 16384"
    [[ $kind == jsonin || $kind == jsonout ]] && sizes=16384
    for n in $sizes; do
      ours=$(measure "$kind" "$n" "$SERVER_PID" "$([[ $kind == json* || $kind == bin ]] && echo "$PORT" || echo $((PORT + 1)))")
      case $kind in
      json | jsonin | jsonout | bin) echo=$(measure "$kind" "$n" "$ECHO_HTTP_PID" "$ECHO_HTTP_PORT") ;;
      grpc | stream) echo=$(measure "$kind" "$n" "$ECHO_GRPC_PID" "$ECHO_GRPC_PORT") ;;
      *) echo="- -" ;;
      esac
      read -r our_rate our_cpu <<<"$ours"
      read -r echo_rate echo_cpu <<<"$echo"
      printf '%-14s %-8s %12.0f %10s %12s %10s %7s\n' "$label" "$([ "$n" = 16 ] && echo "16 f32" || echo "64 KiB")" \
        "$our_rate" "$our_cpu" "$([ "$echo_rate" = - ] && echo - || printf '%.0f' "$echo_rate")" "$echo_cpu" \
        "$([ "$echo_rate" = - ] && echo - || python3 -c "print(f'{$echo_cpu / $our_cpu:.2f}')")"
      if [ "$kind" = json ]; then
        read -r parse_rate parse_cpu <<<"$(measure json "$n" "$ECHO_PARSE_PID" "$ECHO_PARSE_PORT")"
        parsed_rows+=("$(printf '%-14s %-8s %12.0f %10s %12.0f %10s %7s' "HTTP JSON" \
          "$([ "$n" = 16 ] && echo "16 f32" || echo "64 KiB")" "$our_rate" "$our_cpu" "$parse_rate" "$parse_cpu" \
          "$(python3 -c "print(f'{$parse_cpu / $our_cpu:.2f}')")")")
      fi
    done
  done
  [ -z "${BENCH_SERVER_PATHS:-}" ] && sse_row
  echo
  echo "HTTP JSON against the echo doing the JSON exchange (echo_axum --parse: serde_json parses the request into"
  echo "typed FP32 tensors, float_roundtrip on as for perfbench, and writes the answer's text as perfbench does)"
  printf '%-14s %-8s %12s %10s %12s %10s %7s\n' path payload "perfbench/s" "CPU-us/req" "parse-echo/s" "CPU-us/req" ratio
  printf '%s\n' "${parsed_rows[@]}"
}

# sse_row: server CPU-µs per streamed chunk, the twin against the SSE echo.
sse_row() {
  local body='{"model":"llm","prompt":"Hello there","max_tokens":'$SSE_TOKENS',"stream":true,"ignore_eos":true}'
  printf 'wrk.method = "POST"\nwrk.body = %s\nwrk.headers["Content-Type"] = "application/json"\n' \
    "'$body'" >"$BENCH_TMP/sse.lua"
  local name pid port rates=() cpus=()
  for name in perfbench echo; do
    pid=$LLM_PID port=$LLM_PORT
    [ $name = echo ] && pid=$ECHO_HTTP_PID port=$ECHO_HTTP_PORT
    curl -sf "http://$HOST:$port/v1/completions" -d "$body" | grep -q '^data: \[DONE\]' || die "no SSE stream from $name"
    taskset -c $LOAD_CORE wrk -t1 -c$CONCURRENCY -d1s -s "$BENCH_TMP/sse.lua" "http://$HOST:$port/v1/completions" >/dev/null
    run_load "$pid" wrk -t1 -c$CONCURRENCY -d"${SECONDS_PER_ROW}s" -s "$BENCH_TMP/sse.lua" "http://$HOST:$port/v1/completions"
    parse_wrk
    rates+=("$(python3 -c "print($RATE * $SSE_TOKENS)")")
    cpus+=("$(per_request_us "$(ticks_s "$SERVER_CPU_TICKS")" "$((REQS * SSE_TOKENS))")")
  done
  printf '%-14s %-8s %12.0f %10s %12.0f %10s %7s\n' "SSE chunks/s" "$SSE_TOKENS tok" "${rates[0]}" "${cpus[0]}" \
    "${rates[1]}" "${cpus[1]}" "$(python3 -c "print(f'{${cpus[1]} / ${cpus[0]}:.2f}')")"
  echo "(SSE row: per chunk, not per request: llm twin with zero step costs, streamed /v1/completions, $SSE_TOKENS chunks a request; goal ratio >= 0.5)"
}

client_table() {
  echo
  echo "client CPU per request against perfbench serve (core $SERVER_CORE), client on core $LOAD_CORE, $CONCURRENCY in flight, 16 f32"
  printf '%-6s %-14s %10s %10s %12s\n' proto client requests "req/s" "CPU-us/req"
  local perfbench_us wrk_us
  run_load "$SERVER_PID" "$BIN" profile -u "$HOST:$PORT" -i http -m identity --shape INPUT0:16 \
    --concurrency-range $CONCURRENCY --request-count "$CLIENT_REQUESTS" -f "$BENCH_TMP/pa.csv"
  parse_profile "$CLIENT_REQUESTS"
  perfbench_us=$(per_request_us "$LOAD_CPU_S" "$REQS")
  printf '%-6s %-14s %10s %10.0f %12s\n' http perfbench "$REQS" "$RATE" "$perfbench_us"
  run_load "$SERVER_PID" wrk -t1 -c$CONCURRENCY -d"${SECONDS_PER_ROW}s" -s "$BENCH_TMP/bin-16.lua" \
    "http://$HOST:$PORT/v2/models/identity/infer"
  parse_wrk
  wrk_us=$(per_request_us "$LOAD_CPU_S" "$REQS")
  printf '%-6s %-14s %10s %10.0f %12s\n' http wrk "$REQS" "$RATE" "$wrk_us"
  if [ -x "$PA" ]; then
    run_load "$SERVER_PID" "$PA" -u "$HOST:$PORT" -i http -m identity --shape INPUT0:16 \
      --concurrency-range $CONCURRENCY --request-count "$REQUESTS" -f "$BENCH_TMP/pa.csv"
    parse_profile "$REQUESTS"
    local pa_us
    pa_us=$(per_request_us "$LOAD_CPU_S" "$REQS")
    printf '%-6s %-14s %10s %10.0f %12s\n' http perf_analyzer "$REQS" "$RATE" "$pa_us"
    python3 -c "print(f'       perfbench / perf_analyzer = {$perfbench_us / $pa_us:.2f} (goal <= 0.3)')"
  fi
  python3 -c "print(f'       perfbench / wrk = {$perfbench_us / $wrk_us:.2f} (goal <= 1.25)')"
  run_load "$SERVER_PID" "$BIN" profile -u "$HOST:$((PORT + 1))" -i grpc -m identity --shape INPUT0:16 \
    --concurrency-range $CONCURRENCY --request-count "$CLIENT_REQUESTS" -f "$BENCH_TMP/pa.csv"
  parse_profile "$CLIENT_REQUESTS"
  perfbench_us=$(per_request_us "$LOAD_CPU_S" "$REQS")
  printf '%-6s %-14s %10s %10.0f %12s\n' grpc perfbench "$REQS" "$RATE" "$perfbench_us"
  run_load "$SERVER_PID" h2load -c1 -m$CONCURRENCY -t1 -d "$BENCH_TMP/grpc-16" -H 'content-type: application/grpc' \
    -H 'te: trailers' -D "$SECONDS_PER_ROW" "http://$HOST:$((PORT + 1))/inference.GRPCInferenceService/ModelInfer"
  parse_h2load
  local h2load_us
  h2load_us=$(per_request_us "$LOAD_CPU_S" "$REQS")
  printf '%-6s %-14s %10s %10.0f %12s\n' grpc h2load "$REQS" "$RATE" "$h2load_us"
  python3 -c "print(f'       perfbench / h2load = {$perfbench_us / $h2load_us:.2f} (goal <= 1.25)')"
}

# start_triton: the tritonserver of the nvidia-pytriton wheel (scripts/setup-peers.sh), pinned to
# the server core, serving tests/interop/models/identity (python backend) on TRITON_PORT; sets
# TRITON_PID. The python backend's stub sits next to libtriton_python.so and links libpython and
# the wheel's libcudart, as tests/interop/peers.py sets it up.
start_triton() {
  local site wheel pyver pylib
  site=$(ls -d "$PEERS"/venv/lib/python3*/site-packages 2>/dev/null | head -1)
  wheel=$site/pytriton/tritonserver
  [ -x "$wheel/bin/tritonserver" ] || return 1
  pyver=$("$PEERS/venv/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  pylib=$("$PEERS/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
  mkdir -p "$BENCH_TMP/triton-repo"
  cp -r "$ROOT/tests/interop/models/identity" "$BENCH_TMP/triton-repo/"
  cp -r "$wheel/backends" "$BENCH_TMP/triton-backends"
  cp "$wheel/python_backend_stubs/$pyver/triton_python_backend_stub" "$BENCH_TMP/triton-backends/python/"
  PATH="$PEERS/venv/bin:$PATH" LD_LIBRARY_PATH="$pylib:$site/nvidia_pytriton.libs" taskset -c $SERVER_CORE \
    "$wheel/bin/tritonserver" --model-repository="$BENCH_TMP/triton-repo" \
    --backend-directory="$BENCH_TMP/triton-backends" --http-port "$TRITON_PORT" --grpc-port $((TRITON_PORT + 1)) \
    --metrics-port $((TRITON_PORT + 2)) >"$BENCH_TMP/triton.log" 2>&1 &
  TRITON_PID=$!
  EXTRA_PIDS+=("$TRITON_PID")
  for _ in $(seq 1 600); do
    curl -sf "http://$HOST:$TRITON_PORT/v2/models/identity/ready" >/dev/null && return 0
    kill -0 "$TRITON_PID" 2>/dev/null || break
    sleep 0.1
  done
  tail -20 "$BENCH_TMP/triton.log" >&2
  die "Triton did not get ready (log above)"
}

# triton_table: server CPU-µs per request of real Triton beside perfbench serve, 16 f32.
triton_table() {
  echo
  if ! start_triton; then
    echo "Triton rows skipped: no tritonserver in $PEERS (scripts/setup-peers.sh installs it)"
    return
  fi
  echo "real Triton (python-backend identity, tests/interop/models/identity) beside perfbench serve, both on core"
  echo "$SERVER_CORE, load on core $LOAD_CORE, $CONCURRENCY in flight, 16 f32; Triton's CPU includes its python stub"
  printf '%-12s %12s %10s %12s %10s %9s\n' path "perfbench/s" "CPU-us/req" "triton/s" "CPU-us/req" "Triton/ours"
  local path kind ours theirs
  for path in "HTTP JSON:json" "HTTP binary:bin" "gRPC unary:grpc"; do
    kind=${path##*:}
    ours=$(measure "$kind" 16 "$SERVER_PID" "$([ "$kind" = grpc ] && echo $((PORT + 1)) || echo "$PORT")")
    theirs=$(measure "$kind" 16 "$TRITON_PID" "$([ "$kind" = grpc ] && echo $((TRITON_PORT + 1)) || echo "$TRITON_PORT")")
    read -r our_rate our_cpu <<<"$ours"
    read -r their_rate their_cpu <<<"$theirs"
    printf '%-12s %12.0f %10s %12.0f %10s %9s\n' "${path%%:*}" "$our_rate" "$our_cpu" "$their_rate" "$their_cpu" \
      "$(python3 -c "print(f'{$their_cpu / $our_cpu:.1f}x')")"
  done
}

queue_table() {
  echo
  echo "Server Queue (statistics extension) of perfbench serve, 16 f32, perfbench profile; delay (1 ms + 50 us/item)"
  echo "does not run inline: its batches show that batching behind a busy instance is unchanged"
  printf '%-9s %-6s %11s %10s %12s %10s\n' model proto concurrency requests "queue us" "avg batch"
  local model proto c before after count
  for run in identity:http:1 identity:http:$CONCURRENCY identity:grpc:1 identity:grpc:$CONCURRENCY \
    delay:http:1 delay:http:$CONCURRENCY; do
    IFS=: read -r model proto c <<<"$run"
    count=$((REQUESTS / 4))
    [ "$model" = delay ] && count=$((REQUESTS / 20))
    before=$(stats "$model")
    local port=$PORT
    [ "$proto" = grpc ] && port=$((PORT + 1))
    run_load "$SERVER_PID" "$BIN" profile -u "$HOST:$port" -i "$proto" -m "$model" --shape INPUT0:16 \
      --concurrency-range "$c" --request-count "$count" -f "$BENCH_TMP/pa.csv"
    after=$(stats "$model")
    python3 - "$model" "$proto" "$c" $before $after <<'PY'
import sys
model, proto, c = sys.argv[1:4]
b, a = [list(map(int, sys.argv[4:9])), list(map(int, sys.argv[9:14]))]
d = [y - x for x, y in zip(b, a)]
print(f"{model:<9} {proto:<6} {c:>11} {d[0]:>10} {d[2] / 1e3 / max(d[1], 1):>12.1f} {d[3] / max(d[4], 1):>10.2f}")
PY
  done
}

need_tools
build
make_bodies 16 16384
start_servers
echo "perfbench $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?'), $(nproc --all) cores, $SECONDS_PER_ROW s per wrk/h2load row, $REQUESTS requests per perfbench row (a quarter for 64 KiB)"
if [ -n "${BENCH_TRITON_ONLY:-}" ]; then
  triton_table
  exit 0
fi
if [ -n "${BENCH_SERVER_PATHS:-}" ]; then
  server_table
  exit 0
fi
if [ -n "${BENCH_CLIENT_ONLY:-}" ]; then
  client_table
  exit 0
fi
if [ -n "${BENCH_SSE_ONLY:-}" ]; then
  printf '%-14s %-8s %12s %10s %12s %10s %7s\n' path payload "perfbench/s" "CPU-us/chk" "echo/s" "CPU-us/chk" ratio
  sse_row
  exit 0
fi
server_table
client_table
queue_table
triton_table
