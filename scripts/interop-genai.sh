#!/usr/bin/env bash
# Runs the generative interop tests (tests/interop/test_generative.py) under the AIPerf
# virtualenv of scripts/setup-genai-peers.sh: the openai Python client and AIPerf 0.13 against
# `perfbench serve`'s generative twin. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS=${PERFBENCH_PEERS:-$HOME/.cache/perfbench-peers}
VENV=$PEERS/aiperf-venv
cargo build --locked --quiet
export PERFBENCH_BIN=${PERFBENCH_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/perfbench}
export AIPERF_BIN=$VENV/bin/aiperf
export PYTHONUNBUFFERED=1
"$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/interop/test_generative.py "$@"
