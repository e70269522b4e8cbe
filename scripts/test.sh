#!/usr/bin/env bash
# Command 2 of the README: install what is missing, build, run every test.
# GPU tests report "skipped" on a machine without an NVIDIA GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-packages.sh
ensure_packages
cmake --workflow --preset default
