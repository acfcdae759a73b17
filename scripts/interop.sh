#!/usr/bin/env bash
# Runs the interop suite (tests/interop, pytest) with the peers from scripts/setup-peers.sh:
# NVIDIA perf_analyzer and Python tritonclient against `perfbench serve`, and `perfbench profile`
# against a real Triton server; the drop-in corpus (tests/interop/pa_lines.txt) through both.
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS=${PERFBENCH_PEERS:-$HOME/.cache/perfbench-peers}
# A given binary is used as it is (CI's, built by its `cargo test` stage); otherwise build one.
if [ -z "${PERFBENCH_BIN:-}" ]; then
  cargo build --locked --quiet
  export PERFBENCH_BIN=${CARGO_TARGET_DIR:-$PWD/target}/debug/perfbench
fi
export PERFBENCH_PA=$PEERS/pa.sh
export PYTHONUNBUFFERED=1
# Every row of the drop-in corpus (test_pa_corpus.py), for reading after the run.
export PA_CORPUS_REPORT=${PA_CORPUS_REPORT:-${CARGO_TARGET_DIR:-$PWD/target}/pa-corpus-report.json}
rm -f "$PA_CORPUS_REPORT"
# pytriton's Python backend stub links libpython: point the loader at the interpreter's LIBDIR.
PY_LIBDIR=$("$PEERS/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
export LD_LIBRARY_PATH=$PY_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Test files or folders among the arguments choose what runs; otherwise the whole suite.
paths=()
for arg in "$@"; do
  case $arg in tests/*) paths+=("$arg") ;; esac
done
[ ${#paths[@]} -gt 0 ] || set -- tests/interop "$@"
"$PEERS/venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
