#!/usr/bin/env bash
# Command 1 of the README: install what is missing, configure, build the programs,
# the tour and the Python module (not the tests: scripts/test.sh builds those), run the tour.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-packages.sh
ensure_packages
# The CUDA steps are compiled only where they can run: without an NVIDIA GPU their programs
# and the tour could only report them as skipped, and compiling them is most of the build's
# time. scripts/test.sh (command 2) turns them on again: the default preset sets
# FLASH_ENABLE_CUDA=ON, and only the -D below overrides it.
if nvidia-smi -L >/dev/null 2>&1; then
  cuda=ON
else
  cuda=OFF
  echo "setup-and-tour: no NVIDIA GPU here: building the CPU steps, the tour and the Python module;" \
    "the CUDA steps are compiled by ./scripts/test.sh" >&2
fi
cmake --preset default -DFLASH_ENABLE_CUDA="$cuda"
cmake --build --preset programs
./build/bin/tour "$@"
