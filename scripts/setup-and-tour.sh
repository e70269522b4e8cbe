#!/usr/bin/env bash
# Command 1 of the README: install what is missing, configure, build the programs,
# the tour and the Python module (not the tests: scripts/test.sh builds those), run the tour.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-packages.sh
ensure_packages
cmake --preset default
cmake --build --preset programs
./build/bin/tour "$@"
