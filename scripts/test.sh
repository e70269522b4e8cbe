#!/usr/bin/env bash
# Command 2 of the README: install what is missing, build, run every test.
# GPU tests report "skipped" on a machine without an NVIDIA GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-packages.sh
ensure_packages
# Command 1 leaves the CUDA steps out on a machine without a GPU; every test is built here.
cmake --preset default -DFLASH_ENABLE_CUDA=ON >/dev/null
cmake --workflow --preset default
