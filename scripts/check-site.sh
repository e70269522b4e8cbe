#!/usr/bin/env bash
# check-site.sh [BUILD_DIR] — build the docs site and check it as a person sees it.
#
#   scripts/check-site.sh              # uses build/ (configured with the default preset if new)
#   scripts/check-site.sh build-docs   # any other build tree (configured CPU-only if new)
#
# 1. builds the `docs` target (Doxygen fails on a stale \snippet marker or an
#    undocumented function);
# 2. checks that the front page, every step page (one per step directory with a
#    README.md) and the cross-cutting pages exist;
# 3. checks every href and src in the generated HTML that points to a local file
#    (pages, images, plots, diffs, CSVs) resolves to a file that exists;
# 4. opens each of those pages in headless Chromium and saves a screenshot to
#    BUILD_DIR/docs/screenshots/ (look at them).
# Exit status 0 when all is well, 1 with a list of what is wrong.
# Needs: doxygen graphviz doxygen-awesome-css gnuplot-nox chromium (Debian packages).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
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
pages=(index.html worked_example.html io_complexity.html fa1_vs_fa2.html results.html)
for readme in step[0-9][0-9]_*/README.md; do
  [[ -f "$readme" ]] || continue
  dir=${readme%/README.md}
  pages+=("${dir:0:6}.html")   # step02_tiled_cpu -> step02.html
done
for p in "${pages[@]}"; do
  [[ -s "$html/$p" ]] || problems+=("missing page: $html/$p")
done

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
  find "$html" -name '*.html' -print0 | xargs -0 grep -oE '(href|src)="[^"]*"' /dev/null |
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

# --- 4. what a person sees ------------------------------------------------
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [[ -z "$browser" ]]; then
  problems+=("no Chromium to open the pages with (apt-get install chromium)")
else
  rm -rf "$shots"
  mkdir -p "$shots"
  profile=$(mktemp -d)
  trap 'rm -rf "$profile"' EXIT
  flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run
         --disable-background-networking --disable-component-update --disable-sync
         --user-data-dir="$profile" --hide-scrollbars --window-size=1280,2000
         --virtual-time-budget=5000)
  for p in "${pages[@]}"; do
    [[ -s "$html/$p" ]] || continue
    url="file://$(cd "$html" && pwd)/$p"
    # The DOM after the scripts ran: a page that failed to render has no title.
    dom=$(timeout 60 "$browser" "${flags[@]}" --dump-dom "$url" 2>/dev/null || true)
    if ! grep -q 'class="title"' <<<"$dom"; then
      problems+=("Chromium shows no page title in $p")
    fi
    timeout 60 "$browser" "${flags[@]}" --screenshot="$shots/${p%.html}.png" "$url" >/dev/null 2>&1 || true
    [[ -s "$shots/${p%.html}.png" ]] || problems+=("Chromium made no screenshot of $p")
  done
  echo "check-site: screenshots of ${#pages[@]} pages in $shots"
fi

if [[ ${#problems[@]} -gt 0 ]]; then
  printf 'check-site: %s\n' "${problems[@]}" >&2
  echo "check-site: FAILED (${#problems[@]} problems)" >&2
  exit 1
fi
echo "check-site: OK — $html/index.html"
