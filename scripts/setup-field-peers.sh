#!/usr/bin/env bash
# Installs the field's generative benchmarks that issue 43's interop checks run against
# `perfbench serve`, under $PERFBENCH_PEERS (default ~/.cache/perfbench-peers), each in its own
# virtualenv because their pins differ. Idempotent and version-checked; needs only PyPI.
#   - guidellm 0.8.1 in guidellm-venv/ (it pulls torch: about 6 GB, most of the time);
#   - inference-perf 0.7.0 in inference-perf-venv/, under pyenv's Python 3.12 (it needs >= 3.12;
#     $PYTHON312 overrides the interpreter).
# The two installs run side by side; each prints how long it took. The anthropic SDK goes into
# AIPerf's virtualenv (scripts/setup-genai-peers.sh), beside the openai SDK.
set -euo pipefail
PEERS=${PERFBENCH_PEERS:-$HOME/.cache/perfbench-peers}
PYTHON312=${PYTHON312:-$HOME/.pyenv/versions/3.12.1/bin/python}
mkdir -p "$PEERS"

# install NAME PYTHON PACKAGE VERSION: makes $PEERS/NAME-venv and installs PACKAGE==VERSION there
# unless that exact version already imports.
install() {
  local name=$1 python=$2 package=$3 version=$4 venv=$PEERS/$1-venv start=$SECONDS
  local want="from importlib.metadata import version; assert version('$package') == '$version'"
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$want" 2>/dev/null; then
    echo "$name: $package $version already installed in $venv"
    return 0
  fi
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q "$package==$version"
  "$venv/bin/python" -c "$want"
  echo "$name: installed $package $version in $venv in $((SECONDS - start))s ($(du -sh "$venv" | cut -f1))"
}

install guidellm python3 guidellm 0.8.1 &
guidellm=$!
install inference-perf "$PYTHON312" inference-perf 0.7.0 &
inference_perf=$!
rc=0
wait "$guidellm" || rc=$?
wait "$inference_perf" || rc=$?
exit "$rc"
