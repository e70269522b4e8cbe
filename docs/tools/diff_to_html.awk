# diff_to_html.awk — a unified diff as an HTML fragment in Doxygen's code style,
# with added, removed, hunk and file-header lines coloured by docs/site.css.
#
#   awk -f diff_to_html.awk step02.diff > step02.diff.html
#
# Reads what scripts/diff-steps prints: git's file headers (including a rename's
# "similarity index", "rename from", "rename to"), hunks, and the one-line
# "only in <step>: ..." list of files found in one step only (and the one-line
# "same but for the step's name: ..." list, which comes first). Every line outside
# a hunk is a header; inside a hunk the first character says what a line is, so
# a removed line that reads "-- x" is not mistaken for a "--- a/file" header.
function escape(s) {
  gsub(/&/, "\\&amp;", s)
  gsub(/</, "\\&lt;", s)
  gsub(/>/, "\\&gt;", s)
  return s
}
BEGIN { print "<div class=\"fragment diff\">"; in_hunk = 0 }
{
  if ($0 ~ /^diff --git / || $0 ~ /^only in / || $0 ~ /^same but for the step's name: /) in_hunk = 0
  else if ($0 ~ /^@@/) in_hunk = 1
  cls = "file"
  if ($0 ~ /^@@/) cls = "hunk"
  else if (in_hunk && $0 ~ /^\+/) cls = "add"
  else if (in_hunk && $0 ~ /^-/) cls = "del"
  else if (in_hunk) cls = "ctx"
  line = escape($0)
  if (line == "") line = " "
  printf "<div class=\"line diff-%s\">%s</div>\n", cls, line
}
END {
  if (NR == 0) print "<div class=\"line diff-ctx\">(no differences)</div>"
  print "</div>"
}
