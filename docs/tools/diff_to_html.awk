# diff_to_html.awk — a unified diff as an HTML fragment in Doxygen's code style,
# with added, removed, hunk and file-header lines coloured by docs/site.css.
#
#   awk -f diff_to_html.awk step02.diff > step02.diff.html
function escape(s) {
  gsub(/&/, "\\&amp;", s)
  gsub(/</, "\\&lt;", s)
  gsub(/>/, "\\&gt;", s)
  return s
}
BEGIN { print "<div class=\"fragment diff\">" }
{
  cls = "ctx"
  if ($0 ~ /^diff --git / || $0 ~ /^index / || $0 ~ /^(new|deleted) file mode/ || \
      $0 ~ /^(---|\+\+\+) /) cls = "file"
  else if ($0 ~ /^@@/) cls = "hunk"
  else if ($0 ~ /^\+/) cls = "add"
  else if ($0 ~ /^-/) cls = "del"
  line = escape($0)
  if (line == "") line = " "
  printf "<div class=\"line diff-%s\">%s</div>\n", cls, line
}
END {
  if (NR == 0) print "<div class=\"line diff-ctx\">(no differences)</div>"
  print "</div>"
}
