#!/usr/bin/env bash
# test-site-reader.sh — scripts/docs/site_reader.py against two made-up pages: one with each
# defect its rules are for (planted), one with the same content done right. Each rule
# must fire on the first and none on the second. Exits 77 (skipped) without Chromium.
set -euo pipefail
here=$(cd "$(dirname "$0")/../docs" && pwd)
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [[ -z "$browser" ]]; then
  echo "test-site-reader: no Chromium (apt-get install chromium): skipped"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20"><rect width="40" height="20"/></svg>' > "$tmp/fig.svg"

page() {  # page NAME BODY: a page shaped as Doxygen writes one
  cat > "$tmp/$1.html" <<PAGE
<!DOCTYPE html><html><head><meta charset="utf-8"><title>$1</title>
<style>div.contents { width: 600px; } div.narrow { width: 600px; overflow: hidden; }</style></head>
<body><div class="header"><div class="title">$1</div></div><div class="contents"><div class="textblock">
$2
</div></div></body></html>
PAGE
}

page broken '
<h2>Answers</h2>
<ol><li>The first answer, with a run:</li></ol>
<div class="fragment"><div class="line">$ build/bin/step11 --repeat 10</div></div>
<p>Run on a GPU.</p>
<ol><li>The second answer, numbered 1 again.</li></ol>
<h2>Who owns what</h2>
<p>At d = 128 warps 0 to 7 own S_ij exactly as in steps 14 to</p>
<ol start="16"><li>Consumer warpgroup wg owns rows 64 wg to 64 wg + 63.</li></ol>
<div class="narrow"><table class="markdownTable"><tr><th>step</th><th style="white-space:nowrap">a very wide column header that does not fit in six hundred pixels at all, not even nearly, FlashAttention-2 against cuDNN against the step</th><th>cuDNN ratio</th></tr>
<tr><td>step21</td><td>650</td><td>0.99</td></tr></table></div>
<p>Run: build/bin/step11 &#8211;batch 4 &#8211;repeat 20 build/bin/step11 &#8211;seq-q 1000 &#8211;check</p>
<p><img src="missing.png" width="10" height="10"></p>
<p><a href="fig.svg">Figure source: docs/figures/hopper.sh</a></p>
'
page clean '
<h2>Answers</h2>
<ol><li>The first answer, with a run:<div class="fragment"><div class="line">$ build/bin/step11 --repeat 10</div></div>
<p>Run on a GPU.</p></li><li>The second answer.</li></ol>
<h2>Who owns what</h2>
<p>At d = 128 warps 0 to 7 own S_ij exactly as in steps 14 to 16. Consumer warpgroup wg owns rows 64 wg to 64 wg + 63.</p>
<p>A list after a complete sentence:</p>
<ol><li>one item</li></ol>
<table class="markdownTable"><tr><th>step</th><th>FlashAttention-2</th><th>cuDNN ratio</th></tr>
<tr><td>step21</td><td>650</td><td>0.99</td></tr></table>
<p>Run:</p><div class="fragment"><div class="line">build/bin/step11 --batch 4 --repeat 20</div><div class="line">build/bin/step11 --seq-q 1000 --check</div></div>
<p><img src="fig.svg" width="40" height="20"></p>
'
status=0
python3 "$here/site_reader.py" "$browser" "$tmp/shots" "$tmp/broken.html" "$tmp/clean.html" > "$tmp/report" || status=$?
failures=0
for rule in lists numbered tables merged dashes images figures; do
  grep -q "^broken.html: \[$rule\]" "$tmp/report" || { echo "FAIL: [$rule] did not fire on its planted defect"; failures=$((failures + 1)); }
done
if grep "^clean.html:" "$tmp/report"; then
  echo "FAIL: problems reported on the clean page (above)"
  failures=$((failures + 1))
fi
[[ $status -eq 1 ]] || { echo "FAIL: site_reader.py exited $status, not 1"; failures=$((failures + 1)); }
if [[ $failures -gt 0 ]]; then
  echo "--- site_reader.py said:"; cat "$tmp/report"
  exit 1
fi
echo "site_reader: each rule fires on its planted defect and none on the clean page"
