#!/usr/bin/env bash
# test-format.sh — fails when a C++ or CUDA source is not formatted as .clang-format says
# (scripts/dev/format --check lists them; scripts/dev/format fixes them). Registered with
# ctest (label cpu). Without clang-format 14 it exits 77, which ctest reports as skipped,
# never as passed; with FLASH_REQUIRE_CLANG_FORMAT=1 (as .ci/run sets) it fails instead.
set -uo pipefail
format="$(cd "$(dirname "${BASH_SOURCE[0]}")/../dev" && pwd)/format"
rc=0
"$format" --check || rc=$?
if [[ $rc -eq 77 && "${FLASH_REQUIRE_CLANG_FORMAT:-0}" == 1 ]]; then
  echo "test-format: FLASH_REQUIRE_CLANG_FORMAT=1 and clang-format 14 is missing" >&2
  exit 1
fi
exit "$rc"
