#!/usr/bin/env bash
# Renders every seed table under reference-results/seeds/ as a self-contained page beside its CSV
# (<table>.html, as `perfbench report FILE.csv --html` writes it) and an index.html linking them,
# so the seeds' reports can be browsed as pages.
# Usage: scripts/seed-pages.sh   (PERFBENCH_BIN: default target/debug/perfbench)
set -euo pipefail
cd "$(dirname "$0")/.."
perfbench=${PERFBENCH_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/perfbench}
seeds=reference-results/seeds
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
index="$tmp/index.html"
{
  echo '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Seed tables</title></head><body>'
  echo '<h1>The seed reports'"'"' results tables</h1><ul>'
} > "$index"
for csv in "$seeds"/*/*.csv; do
  seed=$(basename "$(dirname "$csv")") stem=$(basename "$csv" .csv)
  "$perfbench" report "$csv" --html --out "$tmp/page" >/dev/null
  mv "$tmp/page/report.html" "$seeds/$seed/$stem.html"
  title=$(sed -n 's|^<title>\(.*\)</title>$|\1|p;/^<\/head>/q' "$seeds/$seed/$stem.html")
  echo "<li><a href=\"$seed/$stem.html\">$seed: $title</a></li>" >> "$index"
done
echo '</ul></body></html>' >> "$index"
mv "$index" "$seeds/index.html"
echo "$(ls "$seeds"/*/*.html | wc -l) pages and $seeds/index.html written"
