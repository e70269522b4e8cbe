#!/usr/bin/env bash
# check-site.sh [BUILD_DIR] — build the docs site and check it as a person sees it.
#
#   scripts/docs/check-site.sh              # uses build/ (configured with the default preset if new)
#   scripts/docs/check-site.sh build-docs   # any other build tree (configured CPU-only if new)
#
# 1. builds the `docs` target (Doxygen fails on a stale \snippet marker or an
#    undocumented function);
# 2. checks that the front page, every step page (one per step directory with a
#    README.md) and the cross-cutting pages exist, and that every figure a page
#    places (`<!-- figure: NAME ... -->`) was drawn into the site;
# 3. checks every href, src and data in the generated HTML that points to a
#    local file (pages, images, figures, plots, diffs, CSVs, logs) resolves to a
#    file that exists;
# 4. checks the sources a reader also sees elsewhere: a step's README.md read on
#    GitHub, and every gnuplot legend;
# 5. opens every page of the site in headless Chromium (scripts/docs/site_reader.py):
#    the pages above, the API pages (files, namespaces, classes, sources) and every
#    other page Doxygen wrote; waits for MathJax, checks what each page shows, and
#    saves a full-page screenshot of the pages a reader walks (the front page, the
#    steps, the cross-cutting pages, the steps' attention files) to
#    BUILD_DIR/docs/screenshots/ (look at them).
#
# The rules, by the name they print, and the rendering bug each one was checked
# against (each bug planted on purpose, caught, and taken out again):
#   [pipes]      a text line that starts with "|" and holds " | ": a Markdown table
#                shown raw (the PyTorch table of Results, from a CSV with CRLF)
#   [crlf]       a carriage return in the rendered text, or a linked CSV with CRLF
#                line endings (the same CSV)
#   [dashes]     an en or em dash directly before a letter or "-" in code or text:
#                "–repeat" where "--repeat" was meant (Results' program lines; the
#                sanitizer and ncu command lines of step 6; the "Run:" lines of the
#                API pages)
#   [backticks]  a backtick left in the text: a code span Doxygen did not render
#                (the stray backticks on Results)
#   [tags]       HTML shown as text, "<tt>" or "&lt;" (the "<tt>" in the headings
#                of steps 4 and 5)
#   [markers]    "\snippet" or "//! [" shown on a page outside the step diffs (the
#                snippet markers in the code of steps 3 and 5)
#   [twice]      a code block shown again inside another (step 5's load_Qi_async,
#                a snippet nested in another)
#   [logs]       a page that names an ncu, sanitizer or resource log (or any *.log)
#                without a link to that file on the site (the evidence logs)
#   [math]       a formula MathJax did not render, or "$$", "\f[", "\(" left in the
#                text after MathJax ran
#   [figures]    an image or SVG figure with no size on the page, or a figure left
#                as its source link (the drawing missing)
#   [images]     an <img> that did not load
#   [lists]      a numbered list that starts again at 1 after a code block (the
#                Answers of steps 11 and 12, whose run blocks were not indented)
#   [numbered]   a paragraph line that starts with a number and a dot and became a
#                one-item list ("16. Consumer warpgroup ..." on step 21)
#   [tables]     a table wider than the text column, or with columns cut off (the
#                cuDNN ratio column of the comparison tables)
#   [merged]     two command lines shown as one line (the "Run:" lines of every
#                step's file comment on its API page)
#   [exercises]  a step page without a heading containing "Exercises"
#   [standard]   a step page without a figure, without rendered math, or without a
#                sample run (the run blocks' links to docs/results/runs/NAME.txt)
#   [open]       a page Chromium cannot read, or that shows no title
#   [readme]     a step's README.md with a raw "\snippet" line (what GitHub shows
#                instead of the code)
#   [legend]     a gnuplot "set key" in docs/ that does not put the legend outside
#                the plot area (the IO page's legend over the N = 4096 point)
#   broken link  a link, image or figure to a file that is not there
# Exit status 0 when all is well, 1 with a list of what is wrong.
# Needs: doxygen graphviz doxygen-awesome-css gnuplot-nox libjs-mathjax chromium
# python3 (Debian packages).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
build=${1:-build}
build=${build%/}

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  if [[ "$build" == build ]]; then
    cmake --preset default
  else
    cmake -S . -B "$build" -G Ninja -DFLASH_ENABLE_CUDA=OFF
  fi
fi
targets=$(cmake --build "$build" --target help)
if ! grep -qE '^docs(:|$| )' <<<"$targets"; then
  echo "check-site: $build has no docs target: Doxygen was not found (apt-get install doxygen graphviz)" >&2
  exit 1
fi
cmake --build "$build" --target docs

html="$build/docs/html"
shots="$build/docs/screenshots"
problems=()

# --- 2. the pages a reader expects ------------------------------------------
pages=(index.html worked_example.html io_complexity.html fa1_vs_fa2.html results.html python.html measuring_speed.html whats_next.html)
for readme in step[0-9][0-9]_*/README.md; do
  [[ -f "$readme" ]] || continue
  dir=${readme%/README.md}
  pages+=("${dir:0:6}.html")   # step02_tiled_cpu -> step02.html
done
for p in "${pages[@]}"; do
  [[ -s "$html/$p" ]] || problems+=("missing page: $html/$p")
done
# Every figure a page places, drawn into the site.
while IFS=: read -r file name; do
  [[ -s "$html/$name.svg" ]] || problems+=("$file: [figures] places figure $name, but $html/$name.svg is not there")
done < <(grep -oE '^<!-- figure: [A-Za-z0-9_]+' step[0-9][0-9]_*/README.md docs/*.md 2>/dev/null |
           sed -E 's/<!-- figure: //' | sort -u)

# --- 3. local links and images --------------------------------------------
# Every href="..." and src="..." in every page, resolved against the page's folder.
checked=0
while IFS=$'\t' read -r page target; do
  checked=$((checked + 1))
  if [[ ! -e "$target" ]]; then
    problems+=("broken link or image in ${page#"$html"/}: ${target#"$html"/}")
  elif [[ "$target" == *.png || "$target" == *.svg ]] && [[ ! -s "$target" ]]; then
    problems+=("empty image in ${page#"$html"/}: ${target#"$html"/}")
  fi
done < <(
  find "$html" -name '*.html' -print0 | xargs -0 grep -oE '(href|src|data)="[^"]*"' /dev/null |
    awk -F'"' '
      { split($0, a, ":"); page = a[1]; url = $2
        if (url == "" || url ~ /^#/ || url ~ /^[a-zA-Z][a-zA-Z0-9+.-]*:/) next   # anchors, http:, javascript:, mailto:
        sub(/[?#].*$/, "", url)
        if (url == "") next
        dir = page; sub(/\/[^\/]*$/, "", dir)
        print page "\t" dir "/" url }' |
    sort -u
)
echo "check-site: $checked local links and images checked in $(find "$html" -name '*.html' | wc -l) pages"

# --- 4. what readers see outside the site --------------------------------
for readme in step[0-9][0-9]_*/README.md; do
  [[ -f "$readme" ]] || continue
  # Outside fenced code, a line starting with \snippet is what GitHub shows raw.
  if awk '/^[ \t]*```/ { fence = !fence } !fence && /^[ \t]*[\\@]snippet/ { found = 1 } END { exit !found }' "$readme"; then
    problems+=("$readme: [readme] a raw \\snippet line: GitHub shows it instead of the code (scripts/docs/render-pages expands snippets)")
  fi
done
while IFS= read -r hit; do
  problems+=("$hit: [legend] a gnuplot legend inside the plot area (use 'set key outside', 'below' or 'above')")
done < <(grep -nE '^[[:space:]]*set key' docs/tools/*.sh docs/figures/* 2>/dev/null |
           grep -vE 'set key[^#]*\b(outside|below|above|[btlr]margin|off)\b' || true)

# --- 5. what a person sees ------------------------------------------------
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [[ -z "$browser" ]]; then
  problems+=("no Chromium to open the pages with (apt-get install chromium)")
elif ! command -v python3 >/dev/null 2>&1; then
  problems+=("no python3 to drive Chromium with (apt-get install python3)")
else
  rm -rf "$shots"
  mkdir -p "$shots"
  # Every page of the site: the pages a reader walks first, then all the others.
  page_paths=()
  for p in "${pages[@]}"; do
    [[ -s "$html/$p" ]] && page_paths+=("$html/$p")
  done
  while IFS= read -r p; do
    [[ " ${pages[*]} " == *" $(basename "$p") "* ]] || page_paths+=("$p")
  done < <(find "$html" -maxdepth 1 -name '*.html' | sort)
  shots_for='^(index|step[0-9][0-9]|worked_example|io_complexity|fa1_vs_fa2|results|python|whats_next|step[0-9][0-9]__[a-z0-9_]+_2attention_8(cu|cpp))\.html$'
  report=$(mktemp)
  status=0
  timeout 1800 python3 scripts/docs/site_reader.py --shots "$shots_for" "$browser" "$shots" "${page_paths[@]}" > "$report" || status=$?
  while IFS= read -r line; do
    problems+=("$line")
  done < "$report"
  rm -f "$report"
  if [[ $status -ne 0 && $status -ne 1 ]]; then
    problems+=("scripts/docs/site_reader.py failed (exit status $status)")
  fi
  echo "check-site: ${#page_paths[@]} pages read in Chromium; full-page screenshots of $(ls "$shots" | wc -l) in $shots"
fi

if [[ ${#problems[@]} -gt 0 ]]; then
  printf 'check-site: %s\n' "${problems[@]}" >&2
  echo "check-site: FAILED (${#problems[@]} problems)" >&2
  exit 1
fi
echo "check-site: OK — $html/index.html"
