# compose.awk — a page template with generated parts.
#
#   awk -v dir=GENERATED_DIR -f compose.awk docs/results.md > pages/results.md
#
# Copies the template and replaces each line `<!-- insert: NAME -->` by the
# contents of GENERATED_DIR/NAME.md (the comment is invisible where the template
# is read as plain Markdown, e.g. on GitHub). A missing part is an error.
/^<!-- insert: [A-Za-z0-9_]+ -->[ \t]*$/ {
  name = $3
  file = dir "/" name ".md"
  found = 0
  while ((getline line < file) > 0) {
    print line
    found = 1
  }
  close(file)
  if (!found) {
    print "compose.awk: " FILENAME ":" FNR ": nothing to insert from " file > "/dev/stderr"
    exit 1
  }
  next
}
{ print }
