#!/usr/bin/env bash
# The openssl CLI, which the X.509 v1 certificate tests (tests/it/server_tls.rs) use to make their
# certificates as Triton's tests make them. Idempotent; needs only the Debian package registry.
set -euo pipefail
command -v openssl >/dev/null && exit 0
SUDO=$([ "$(id -u)" -eq 0 ] || echo sudo)
$SUDO apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends openssl >/dev/null
