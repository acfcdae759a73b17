#!/usr/bin/env bash
# Runs the generative interop tests under the AIPerf virtualenv of scripts/setup-genai-peers.sh:
# the openai Python client and AIPerf 0.13 against `perfbench serve`'s generative twin
# (test_generative.py), and the peers' numbers beside ours: AIPerf against `perfbench llm`,
# genai-perf on the real perf_analyzer (scripts/setup-peers.sh) against genai-perf on perfbench
# (test_llm_peers.py); the field's other peers, guidellm and inference-perf in their own
# virtualenvs (scripts/setup-field-peers.sh), on issue 43's endpoints (test_field_endpoints.py).
# Arguments: the test files (default test_generative.py), then pytest's.
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS=${PERFBENCH_PEERS:-$HOME/.cache/perfbench-peers}
VENV=$PEERS/aiperf-venv
# A given binary is used as it is (CI's, built by its `cargo test` stage); otherwise build one.
if [ -z "${PERFBENCH_BIN:-}" ]; then
  cargo build --locked --quiet
  export PERFBENCH_BIN=${CARGO_TARGET_DIR:-$PWD/target}/debug/perfbench
fi
export AIPERF_BIN=$VENV/bin/aiperf
export GUIDELLM_BIN=$PEERS/guidellm-venv/bin/guidellm
export INFERENCE_PERF_BIN=$PEERS/inference-perf-venv/bin/inference-perf
export PERFBENCH_PA=${PERFBENCH_PA:-$PEERS/pa.sh}
export PYTHONUNBUFFERED=1
tests=()
while [ $# -gt 0 ] && [[ $1 == tests/* ]]; do tests+=("$1"); shift; done
[ ${#tests[@]} -gt 0 ] || tests=(tests/interop/test_generative.py)
"$VENV/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}" "$@"
