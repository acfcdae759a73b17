#!/usr/bin/env bash
# Performs the Containerfile's steps without a container engine: the build stage's RUN line
# (read from the Containerfile and run in this tree), then the runtime stage's COPY lines
# assembled into a directory, and the ENTRYPOINT run there with --version. An instruction this
# script does not know fails it, so the Containerfile and the script cannot drift apart.
#
#   scripts/container-build.sh [--debug] [--out DIR]
#
# --debug builds the dev profile instead: the build line without --release and with --tests,
# reading the binary from target/debug. CI passes it to reuse the build its `cargo test` stage
# made: a release build would cost CI many minutes on two cores, and a plain `cargo build` after
# `cargo test` recompiles tokio (whose dev-only test-util feature `cargo test` turns on) and
# everything above it, about six minutes. The tradeoff: CI checks the recipe's steps and layout
# and that the binary starts, not the optimised build itself.
# --out DIR: where the runtime stage's files go (default: a temporary directory, removed after).
set -euo pipefail
cd "$(dirname "$0")/.."

debug=0
out=""
while [ $# -gt 0 ]; do
  case $1 in
    --debug) debug=1 ;;
    --out) out=$2; shift ;;
    *) echo "usage: $0 [--debug] [--out DIR]" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$out" ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
target=${CARGO_TARGET_DIR:-$PWD/target}
fail() { echo "container-build: $*" >&2; exit 1; }

# The Containerfile's instructions, one per line (comments and blank lines dropped; no line
# continuations are used there).
mapfile -t lines < <(grep -v '^[[:space:]]*\(#\|$\)' Containerfile)
stage="" workdir="/" entrypoint="" built=0
for line in "${lines[@]}"; do
  read -r op rest <<< "$line"
  case "$stage:$op" in
    *:FROM)
      stage=${rest##* AS }
      ;;
    build:WORKDIR)
      workdir=$rest
      ;;
    build:COPY)
      [ "$rest" = ". ." ] || fail "the build stage copies '$rest'; this script knows only 'COPY . .'"
      ;;
    build:RUN)
      [[ $rest == "cargo build "* ]] || fail "the build stage runs '$rest'; this script knows only 'cargo build ...'"
      [[ $rest == *" --locked"* ]] || fail "the build must use the locked dependencies (--locked)"
      command=$rest
      [ "$debug" -eq 1 ] && command="${command/ --release/} --tests"
      echo "container-build: $command" >&2
      $command
      built=1
      ;;
    runtime:COPY)
      read -r from source dest <<< "$rest"
      [ "$from" = "--from=build" ] || fail "the runtime stage copies '$rest'; it may copy only from the build stage"
      [ "$built" -eq 1 ] || fail "the runtime stage copies before anything was built"
      case $source in
        "$workdir"/target/release/*)
          file=${source#"$workdir"/target/release/}
          profile=release
          [ "$debug" -eq 1 ] && profile=debug
          source=$target/$profile/$file
          ;;
        "$workdir"/*) source=$PWD/${source#"$workdir"/} ;;
      esac
      [ -f "$source" ] || fail "nothing to copy at $source (for '$line')"
      mkdir -p "$out$(dirname "$dest")"
      cp "$source" "$out$dest"
      ;;
    runtime:ENTRYPOINT)
      entrypoint=$(sed -e 's/^\["//' -e 's/"\]$//' <<< "$rest")
      ;;
    *)
      fail "unknown Containerfile instruction in stage '$stage': $line"
      ;;
  esac
done
[ -n "$entrypoint" ] || fail "the runtime stage has no ENTRYPOINT"

# The image's only files, as the runtime stage lays them out.
echo "container-build: the runtime stage's files, under $out:" >&2
(cd "$out" && find . -type f | sort) >&2
# The ENTRYPOINT resolved on the image's PATH, as the container runtime resolves it.
PATH="$out/usr/local/bin:$out/usr/bin:$out/bin" "$entrypoint" --version
