#!/usr/bin/env bash
# Installs the bench's load generators and profiler from Debian's packages, when missing: wrk
# (HTTP), h2load (nghttp2-client, gRPC), perf (linux-perf: `perf record` of `perfbench profile`),
# taskset (util-linux) and /usr/bin/time (time). One `apt-get update`, then one install.
set -euo pipefail
missing=()
command -v wrk >/dev/null || missing+=(wrk)
command -v h2load >/dev/null || missing+=(nghttp2-client)
command -v perf >/dev/null || missing+=(linux-perf)
command -v taskset >/dev/null || missing+=(util-linux)
[ -x /usr/bin/time ] || missing+=(time)
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup-bench-tools: installing ${missing[*]} (Debian packages)" >&2
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
for tool in wrk h2load perf taskset; do
  echo "$tool: $(command -v "$tool")"
done
