#!/usr/bin/env bash
# test-render-pages.sh — scripts/docs/render-pages on a small made-up repository: a block
# written as one line fills in, and what follows it up to the next block survives
# (a one-line block once swallowed everything up to the next block's end marker), and
# a run block inside a list item keeps the item's indentation (the Answers lists of
# steps 11 and 12 once restarted at "1." after a run).
# Registered with ctest (label cpu); exits 1 with a diff when a case fails.
set -euo pipefail
render=$(cd "$(dirname "$0")/../docs" && pwd)/render-pages
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/step01_x" "$tmp/step02_x" "$tmp/docs/results/runs"
printf "# Python\n" >"$tmp/docs/python.md"
printf '# machine, 2026-01-01, commit abc\n$ build/bin/a\nA\n' >"$tmp/docs/results/runs/a.txt"
printf '# machine, 2026-01-01, commit abc\n$ build/bin/b\nB\n' >"$tmp/docs/results/runs/b.txt"
printf 'int f() {\n  //! [body]\n  return 1;\n  //! [body]\n}\n' >"$tmp/step01_x/code.cpp"
# A page with one-line blocks before filled ones, and text between them.
cat >"$tmp/step01_x/README.md" <<'PAGE'
# Page
<!-- run: a -->
text after a one-line run block
<!-- run: b -->
```text
old
```
Run on old.
<!-- /run -->
<!-- snippet: step01_x/code.cpp body -->
text after a one-line snippet
```bash
echo a fence that is not the snippet's
```
<!-- snippet: step01_x/code.cpp body -->
```cpp
old
```
<!-- /snippet -->
the end
PAGE
# A run block inside a list item: indented like its opening line, so the list goes on.
cat >"$tmp/step02_x/README.md" <<'PAGE'
# Page
1. An answer with a run:

   <!-- run: a -->
2. The next answer.
PAGE
python3 "$render" "$tmp" >/dev/null
failures=0
for indented in '   ```text' '   $ build/bin/a' '   A' '   <!-- /run -->'; do
  grep -qxF -- "$indented" "$tmp/step02_x/README.md" || { echo "FAIL: not indented in a list item: '$indented'"; failures=$((failures + 1)); }
done
for kept in "text after a one-line run block" "text after a one-line snippet" "echo a fence that is not the snippet's" "the end"; do
  grep -qxF "$kept" "$tmp/step01_x/README.md" || { echo "FAIL: lost the line '$kept'"; failures=$((failures + 1)); }
done
for filled in "^A$" "^B$"; do
  grep -q "$filled" "$tmp/step01_x/README.md" || { echo "FAIL: no run output /$filled/"; failures=$((failures + 1)); }
done
[[ $(grep -c "^  return 1;$\|^return 1;$" "$tmp/step01_x/README.md") -eq 2 ]] || { echo "FAIL: the snippet is not shown twice"; failures=$((failures + 1)); }
grep -q "^old$" "$tmp/step01_x/README.md" && { echo "FAIL: a stale body was kept"; failures=$((failures + 1)); }
python3 "$render" --check "$tmp" >/dev/null || { echo "FAIL: --check after rendering"; failures=$((failures + 1)); }
if [[ $failures -gt 0 ]]; then
  cat "$tmp/step01_x/README.md"
  exit 1
fi
echo "render-pages: one-line blocks fill in and keep what follows them; run blocks keep their indentation"
