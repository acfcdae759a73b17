#!/usr/bin/env bash
# Installs Open MPI from Debian's packages (openmpi-bin) when mpirun is missing, for the
# `mpirun -np 2 perfbench online ...` test (tests/it/shard.rs, `mpi_ranks_merge_on_rank_0`).
set -euo pipefail
if command -v mpirun >/dev/null 2>&1; then
  echo "mpirun: $(command -v mpirun)"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends openmpi-bin >/dev/null
echo "mpirun: $(command -v mpirun) ($(mpirun --version | head -n 1))"
