#!/usr/bin/env bash
# Tests scripts/diff-steps (and the docs' diff_to_html.awk on its output) on two
# synthetic steps in a scratch directory, then runs it on every pair of
# consecutive steps of this repository. Registered with ctest as `diff_steps`.
#
#   scripts/tests/test-diff-steps.sh      # prints "ok" lines, exits 1 on the first failure
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
diff_steps="$repo/scripts/diff-steps"
awk_html="$repo/docs/tools/diff_to_html.awk"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAIL: $*" >&2
  [[ -f "$tmp/out" ]] && { echo "--- last output:" >&2; cat "$tmp/out" >&2; }
  exit 1
}
ok() { echo "ok: $*"; }

# count PATTERN -> how many lines of the last output match the extended regex.
count() { grep -c -E -- "$1" "$tmp/out" || true; }

# run ARGS... -> the exit status; the output (stdout and stderr) in $tmp/out.
run() {
  local rc=0
  "$diff_steps" --root "$tmp/steps" "$@" >"$tmp/out" 2>&1 || rc=$?
  return "$rc"
}

# Two step-like directories: the kernel renamed attention.cpp -> attention.cu with
# two lines changed, a helper that the second step drops, a header it adds, and a
# page and a test that only --all compares.
mkdir -p "$tmp/steps/step01_first" "$tmp/steps/step02_second"
s1="$tmp/steps/step01_first" s2="$tmp/steps/step02_second"
for i in $(seq 1 40); do echo "kernel line $i"; done >"$s1/attention.cpp"
sed -e 's/^kernel line 10$/kernel line 10, now on a GPU/' \
    -e 's/^kernel line 30$/kernel line 30, now on a GPU/' "$s1/attention.cpp" >"$s2/attention.cu"
for i in $(seq 1 25); do echo "helper_only_in_step01 $i"; done >"$s1/helper.hpp"
for i in $(seq 1 12); do echo "header_only_in_step02 $i"; done >"$s2/extra.cuh"
echo 'int main() { return step01::run(); }' >"$s1/main.cpp"
echo 'int main() { return step02::run(); }' >"$s2/main.cpp"
# Files that differ only by the step's name, and one that differs by more.
printf '/// \\file step01_first/attention.hpp\nnamespace step01 {}\n' >"$s1/attention.hpp"
printf '/// \\file step02_second/attention.hpp\nnamespace step02 {}\n' >"$s2/attention.hpp"
echo 'flash_add_step(step01_first SOURCES attention.cpp)' >"$s1/CMakeLists.txt"
echo 'flash_add_step(step02_second SOURCES attention.cu)' >"$s2/CMakeLists.txt"
echo '# Step 1' >"$s1/README.md"; echo '# Step 2' >"$s2/README.md"
echo 'TEST 1' >"$s1/test_attention.cpp"; echo 'TEST 2' >"$s2/test_attention.cpp"

# The default diff: the rename is one pair, the unpaired files one line per side.
run 01 02 || fail "01 02 exited $? (expected 0: the steps differ, which is no error)"
[[ $(count '^rename from step01_first/attention\.cpp$') -eq 1 &&
   $(count '^rename to step02_second/attention\.cu$') -eq 1 &&
   $(count '^diff --git a/step01_first/attention\.cpp b/step02_second/attention\.cu$') -eq 1 ]] ||
  fail "the rename attention.cpp -> attention.cu is not one pair"
[[ $(count '^[-+]kernel line') -eq 4 ]] || fail "the renamed kernel's diff is not its 2 changed lines"
[[ $(count '^deleted file mode') -eq 0 ]] || fail "a file found only in the older step is printed as a deleted file"
[[ $(count '^only in step01_first: helper\.hpp \(25 lines\) — not carried into step02_second$') -eq 1 ]] ||
  fail "the dropped helper is not summarised in one line"
[[ $(count '^\+header_only_in_step02') -eq 12 ]] || fail "the header new in step 2 is not shown in full"
[[ $(count 'helper_only_in_step01') -eq 0 ]] || fail "the contents of a file left behind are printed"
[[ $(count 'README|TEST') -eq 0 ]] || fail "the page or the test is compared without --all"
ok "rename paired, a file left behind in one line, a new file in full, pages and tests left out"

# Files that differ only by the step's name: one line, not a diff.
[[ $(count "^same but for the step's name: attention\.hpp, main\.cpp$") -eq 1 ]] ||
  fail "main.cpp and attention.hpp (only the step's name differs) are not listed in one line"
[[ $(count '^diff --git a/step01_first/(main\.cpp|attention\.hpp)') -eq 0 ]] ||
  fail "a file that differs only by the step's name is diffed"
[[ $(count '^\+flash_add_step\(step02_second SOURCES attention\.cu\)$') -eq 1 ]] ||
  fail "CMakeLists.txt, which differs by more than the step's name, is not diffed"
run --stat 01 02 || fail "--stat exited $?"
[[ $(count "^  same but for the step's name: attention\.hpp, main\.cpp$") -eq 1 &&
   $(count '^  main\.cpp ') -eq 0 ]] || fail "--stat: the files that differ only by the step's name are not one line"
ok "files that differ only by the step's name listed in one line"

# Step names in every accepted form.
for names in "1 step02_second" "step01 2" "01 02"; do
  read -ra words <<<"$names"
  run "${words[@]}" || fail "steps written '$names' not accepted"
  [[ $(count '^rename from') -eq 1 ]] || fail "steps written '$names': no rename"
done
ok "step names 1, 01, step01, step01_first"

# --full prints the unpaired files; --all adds the pages and the tests.
run --full 01 02 || fail "--full exited $?"
[[ $(count '^\+header_only_in_step02') -eq 12 && $(count '^-helper_only_in_step01') -eq 25 &&
   $(count '^only in ') -eq 0 && $(count '^rename from') -eq 1 ]] ||
  fail "--full does not print the unpaired files whole (or loses the rename)"
run --all 01 02 || fail "--all exited $?"
[[ $(count '^\+# Step 2$') -eq 1 && $(count '^\+TEST 2$') -eq 1 ]] || fail "--all leaves out the page or the test"
ok "--full and --all"

# --stat: per file lines added and removed, and the kernel file's total.
run --stat 01 02 || fail "--stat exited $?"
[[ $(count '^  attention\.cpp -> attention\.cu +\+2 +-2  renamed') -eq 1 ]] || fail "--stat: no row for the renamed kernel"
[[ $(count '^  helper\.hpp +\+0 +-25  only in step01_first$') -eq 1 ]] || fail "--stat: no row for the dropped helper"
[[ $(count '^  kernel file +\+2 +-2  attention\.cpp -> attention\.cu$') -eq 1 ]] || fail "--stat: no kernel-file total"
ok "--stat"

# One step: the step it declares it extends ("extends step NN" in the first 20 lines
# of its main source, backward.* before attention.*), else the directory before it.
mkdir -p "$tmp/steps/step03_third" "$tmp/steps/step04_fourth" "$tmp/steps/step05_fifth"
{ echo '/// This step extends step 1 by a third line.'; cat "$s2/attention.cu"; } >"$tmp/steps/step03_third/attention.cu"
{ echo '/// This step extends step 1.'; cat "$s2/attention.cu"; } >"$tmp/steps/step04_fourth/attention.cu"
{ echo '/// The backward pass; it extends step 2.'; echo 'backward'; } >"$tmp/steps/step04_fourth/backward.cu"
{ for i in $(seq 1 20); do echo "// line $i"; done; echo '/// This step extends step 1.'; cat "$s2/attention.cu"; } \
  >"$tmp/steps/step05_fifth/attention.cu"
run --no-color 03 || fail "diff-steps 03 exited $?"
[[ $(count '^step03_third extends step01_first \(declared in its attention\.cu, line 1\)$') -eq 1 &&
   $(count '^diff --git a/step01_first/attention\.cpp b/step03_third/attention\.cu$') -eq 1 ]] ||
  fail "diff-steps 03 does not diff against the step it declares (step 1)"
run --no-color 04 || fail "diff-steps 04 exited $?"
[[ $(count '^step04_fourth extends step02_second \(declared in its backward\.cu, line 1\)$') -eq 1 ]] ||
  fail "diff-steps 04: a backward step's backward.cu does not name the parent"
run --no-color 05 || fail "diff-steps 05 exited $?"
[[ $(count '^step05_fifth extends step04_fourth \(the step before it') -eq 1 &&
   $(count '^diff --git a/step04_fourth/') -ge 1 ]] ||
  fail "diff-steps 05: a declaration after line 20 is not ignored (expected the step before it)"
run --no-color 02 || fail "diff-steps 02 exited $?"
[[ $(count '^step02_second extends step01_first \(the step before it') -eq 1 &&
   $(count '^rename from step01_first/attention\.cpp$') -eq 1 ]] ||
  fail "diff-steps 02 (no declaration) does not fall back to the step before it"
run --stat 03 || fail "diff-steps --stat 03 exited $?"
[[ $(count '^step01_first -> step03_third: ') -eq 1 ]] || fail "--stat with one step: not against the declared parent"
rm -rf "$tmp/steps/step03_third" "$tmp/steps/step04_fourth" "$tmp/steps/step05_fifth"
ok "one step: its declared parent, a backward step's backward.cu first, else the step before it"

# The docs' HTML: git's rename lines and the one-line lists are file headers.
run --no-color 01 02 || fail "--no-color exited $?"
awk -f "$awk_html" "$tmp/out" >"$tmp/html" || fail "diff_to_html.awk failed"
for header in 'rename from' 'rename to' 'similarity index' 'only in step01_first'; do
  grep -q "<div class=\"line diff-file\">$header" "$tmp/html" || fail "diff_to_html.awk: '$header' is not a file header"
done
[[ $(grep -c 'diff-add' "$tmp/html") -eq 15 && $(grep -c 'diff-del' "$tmp/html") -eq 3 ]] ||
  fail "diff_to_html.awk: expected 15 added and 3 removed lines (2 kernel lines, 1 in CMakeLists.txt, the new header)"
grep -q "<div class=\"line diff-file\">same but for the step's name" "$tmp/html" ||
  fail "diff_to_html.awk: the line of files that differ only by the step's name is not a file header"
ok "diff_to_html.awk renders rename headers and one-line lists as file headers"

# Bad arguments exit 2; a step compared with itself is no difference and exits 0.
for bad in "01" "7" "01 02 03" "--bogus 01 02" "01 07" "--root" "--root $tmp/none 01 02"; do
  read -ra words <<<"$bad"
  rc=0; "$diff_steps" --root "$tmp/steps" "${words[@]}" >"$tmp/out" 2>&1 || rc=$?
  [[ $rc -eq 2 ]] || fail "'diff-steps $bad' exited $rc (expected 2)"
  [[ $(count '^diff-steps: ') -eq 1 ]] || fail "'diff-steps $bad' does not say what is wrong in one line"
done
run 01 01 || fail "a step against itself exited $?"
[[ ! -s "$tmp/out" ]] || fail "a step against itself is not an empty diff"
"$diff_steps" --help >"$tmp/out" 2>&1 || fail "--help exited $?"
[[ $(count '--stat|--full|--root') -ge 3 ]] || fail "--help does not name --stat, --full and --root"
ok "bad arguments exit 2; --help"

# This repository's steps, each against the step it extends (the one before it, or the one
# its main source declares: step 25 extends step 2, not step 21), as diff-steps resolves it:
# exit 0, nothing printed whole, the kernel file paired.
prev=""
for d in "$repo"/step[0-9][0-9]_*/; do
  step=$(basename "$d")
  if [[ -n "$prev" ]]; then
    rc=0; "$diff_steps" --no-color "$step" >"$tmp/out" 2>&1 || rc=$?
    [[ $rc -eq 0 ]] || fail "diff-steps $step exited $rc"
    [[ $(count "^deleted file mode") -eq 0 ]] || fail "diff-steps $step prints a file left behind in full"
    # The kernel file is the lesson: when it changes from attention.cpp to attention.cu
    # it must still pair, or the page shows it only as a name.
    [[ $(count '^only in .*attention\.(cpp|cu) ') -eq 0 ]] ||
      fail "diff-steps $step: the kernel file does not pair (git finds it less than 30% similar)"
  fi
  # With one step, against the step it extends: every step but the first has one.
  if [[ -n "$prev" ]]; then
    rc=0; "$diff_steps" --stat "$step" >"$tmp/out" 2>&1 || rc=$?
    [[ $rc -eq 0 ]] || fail "diff-steps $step (against the step it extends) exited $rc"
  fi
  prev=$step
done
ok "every step of this repository against the one it extends, in full and with --stat"
