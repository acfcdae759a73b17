#!/usr/bin/env bash
# Installs the generative peers perfbench serve is checked against, under $PERFBENCH_PEERS
# (default ~/.cache/perfbench-peers). Idempotent; needs only the package registries.
#   - AIPerf 0.13 with the official openai and anthropic Python clients, the tokenizers/transformers packages
#     (the tests build a local Hugging Face tokenizer directory: nothing is fetched from the hub)
#     and pytest, in aiperf-venv/; opentelemetry-proto, to decode perfbench serve's OTLP spans.
#   - genai-perf 0.0.16 in genai-venv/ (its pins differ from AIPerf's); it runs the
#     perf_analyzer first on PATH, which the tests point at the real one or at perfbench.
# Prints the interpreter the generative interop tests run under.
set -euo pipefail
PEERS=${PERFBENCH_PEERS:-$HOME/.cache/perfbench-peers}
VENV=$PEERS/aiperf-venv
mkdir -p "$PEERS"
want='import aiperf, openai, anthropic, tokenizers, transformers, pytest, pytest_timeout, opentelemetry.proto.trace.v1.trace_pb2; from importlib.metadata import version; assert version("aiperf") == "0.13.0"'
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "$want" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q aiperf==0.13.0 openai anthropic tokenizers transformers pytest pytest-timeout opentelemetry-proto
fi
GENAI=$PEERS/genai-venv
if [ ! -x "$GENAI/bin/genai-perf" ] || ! "$GENAI/bin/python" -c 'from importlib.metadata import version; assert version("genai-perf") == "0.0.16"' 2>/dev/null; then
  python3 -m venv "$GENAI"
  "$GENAI/bin/pip" install -q genai-perf==0.0.16
fi
echo "$VENV/bin/python"
