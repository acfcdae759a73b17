#!/usr/bin/env bash
# Browser check of perfbench's pages (issue K): renders compare.html of two runs and a seed
# table's report.html, then opens those and the runs' report.html files in headless Chromium
# (Debian's `chromium`, installed here when missing, as setup-peers.sh installs its packages):
# screenshots, no console errors, no network requests, every plot present, sorting works.
#
# Usage: scripts/browser-check.sh [CURRENT_RUN BASELINE_RUN]   (run folders with offline/ and/or
# online/; without them, two tiny runs of the delay model are made first)
# Env: PERFBENCH_BIN (default target/debug/perfbench), BROWSER_CHECK_OUT (default a temp folder;
# the screenshots land in its shots/).
set -euo pipefail
cd "$(dirname "$0")/.."
perfbench=${PERFBENCH_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/perfbench}
out=${BROWSER_CHECK_OUT:-$(mktemp -d)}
mkdir -p "$out"

if ! command -v chromium >/dev/null; then
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

if [ $# -ge 2 ]; then
  current=$1 baseline=$2
else
  for delay in 2000 3000; do
    cat > "$out/delay$delay.toml" <<TOML
name = "browser_check"
[model]
name = "browser_check"
config = """
backend: "delay"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
parameters { key: "delay_us" value { string_value: "$delay" } }
"""
[offline]
batch_sizes = [1, 4]
measurement_request_count = 30
warmup_request_count = 3
max_trials = 3
stability_percentage = 100.0
[online]
batch = 1
concurrency = "1,2"
measurement_request_count = 30
warmup_request_count = 3
max_trials = 3
stability_percentage = 100.0
TOML
    "$perfbench" run "$out/delay$delay.toml" --out "$out/delay$delay" >/dev/null
  done
  current=$out/delay3000 baseline=$out/delay2000
fi

# A regression (exit 1) still writes the page; only bad input (2) stops here.
rc=0
"$perfbench" compare "$baseline" "$current" --out "$out/compare" >/dev/null 2>&1 || rc=$?
[ "$rc" -le 1 ] || { echo "perfbench compare failed (exit $rc)" >&2; exit "$rc"; }
"$perfbench" report reference-results/seeds/001-wide-deep/online-01-nvidia-a30-tensorflow-with-fp32.csv \
  --html --out "$out/seed" >/dev/null

pages=("$out/compare/compare.html" "$out/seed/report.html")
for page in "$current"/*/report.html "$current"/report.html; do
  [ -f "$page" ] && pages+=("$page")
done
python3 scripts/browser-check.py --shots "$out/shots" "${pages[@]}"
