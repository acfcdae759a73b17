#!/usr/bin/env bash
# Installs the real peers perfbench is checked against, under $PERFBENCH_PEERS (default
# ~/.cache/perfbench-peers). Idempotent; needs only the package registries.
#   - NVIDIA perf_analyzer 2.50 (C++ binary inside the tritonclient==2.50.0 manylinux wheel),
#     with libcudart.so.12 from nvidia-cuda-runtime-cu12 (it links it even without a GPU) and
#     Debian's libb64-0d (and openssl, for the interop tests' certificates);
#   - a real Triton server 2.51 inside nvidia-pytriton==0.7.0, and Python tritonclient + pytest,
#     in a virtualenv.
# Prints the two paths the interop tests need: $PEERS/pa.sh and $PEERS/venv/bin/python.
set -euo pipefail
PEERS=${PERFBENCH_PEERS:-$HOME/.cache/perfbench-peers}
mkdir -p "$PEERS/whl"
cd "$PEERS"

# libb64 for perf_analyzer; openssl makes the interop tests' throwaway certificates.
missing=()
dpkg -s libb64-0d >/dev/null 2>&1 || missing+=(libb64-0d)
command -v openssl >/dev/null || missing+=(openssl)
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq >/dev/null
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x "$PEERS/pa/bin/perf_analyzer" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux1_x86_64 \
    --python-version 3.11 tritonclient==2.50.0 -d whl/tritonclient
  python3 -m pip download -q --no-deps nvidia-cuda-runtime-cu12 -d whl/cudart
  mkdir -p pa/bin pa/lib
  (cd whl/tritonclient && unzip -o -q ./*.whl)
  (cd whl/cudart && unzip -o -q ./*.whl)
  cp whl/tritonclient/tritonclient-2.50.0.data/data/bin/perf_analyzer pa/bin/
  chmod +x pa/bin/perf_analyzer
  cp whl/cudart/nvidia/cuda_runtime/lib/libcudart.so.12 pa/lib/
fi

if [ ! -x "$PEERS/venv/bin/python" ] || ! "$PEERS/venv/bin/python" -c 'import pytriton, tritonclient, pytest' 2>/dev/null; then
  python3 -m venv "$PEERS/venv"
  "$PEERS/venv/bin/pip" install -q nvidia-pytriton==0.7.0 pytest
fi

cat > "$PEERS/pa.sh" <<EOT
#!/usr/bin/env bash
LD_LIBRARY_PATH=$PEERS/pa/lib exec $PEERS/pa/bin/perf_analyzer "\$@"
EOT
chmod +x "$PEERS/pa.sh"
# perf_analyzer exits non-zero on --help; --version proves the binary and its libraries load.
"$PEERS/pa.sh" --version >/dev/null 2>&1 || { echo "perf_analyzer does not start" >&2; exit 1; }
echo "peers ready in $PEERS"
