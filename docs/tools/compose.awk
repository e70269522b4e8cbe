# compose.awk — a page as Doxygen reads it, from a page as GitHub reads it.
#
#   awk -v dir=GENERATED_DIR -f compose.awk docs/results.md > pages/results.md
#
# 1. Generated parts: each line `<!-- insert: NAME -->` is replaced by the
#    contents of GENERATED_DIR/NAME.md (the comment is invisible where the page
#    is read as plain Markdown, e.g. on GitHub). A missing part is an error.
# 2. Figures: each line `<!-- figure: NAME "caption" -->` becomes
#    `\image html NAME.svg "caption"` (GENERATED_DIR holds NAME.svg, drawn in the
#    build from docs/figures/); on GitHub the comment is invisible and the line
#    after it links to the figure's source.
# 3. Math, written once in GitHub's form and turned into Doxygen's (MathJax then
#    renders both): `$$` on a line of its own opens and closes a displayed
#    formula (-> \f[ ... \f]); `$$ x $$` on one line is one too; `$x$` and
#    $`x`$ are inline (-> \f$x\f$). Code is left alone: fenced blocks, indented
#    blocks and `code spans`.
# 4. Headings lose their backticks (see below).
BEGIN { in_fence = 0; in_display = 0; in_indented = 0; prev_blank = 1 }

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
  prev_blank = 0
  next
}

/^<!-- figure: [A-Za-z0-9_]+ "[^"]*" -->[ \t]*$/ {
  name = $3
  caption = $0
  sub(/^<!-- figure: [A-Za-z0-9_]+ /, "", caption)
  sub(/ -->[ \t]*$/, "", caption)
  if ((getline probe < (dir "/" name ".svg")) <= 0) {
    print "compose.awk: " FILENAME ":" FNR ": no figure " dir "/" name ".svg" > "/dev/stderr"
    exit 1
  }
  close(dir "/" name ".svg")
  print "\\image html " name ".svg " caption
  skip_source_link = 1   # the GitHub reader's link to the source: not on the site
  prev_blank = 0
  next
}

skip_source_link && /^\[[^]]*\]\([^)]*\)[ \t]*$/ { skip_source_link = 0; next }
{ skip_source_link = 0 }

# Fenced code: ``` or ~~~ (```math is a displayed formula, as on GitHub).
!in_display && /^[ \t]*(```|~~~)/ {
  if (!in_fence && $0 ~ /^[ \t]*```math[ \t]*$/) { print "\\f["; in_display = 2; next }
  in_fence = !in_fence
  print
  next
}
in_display == 2 && /^[ \t]*```[ \t]*$/ { print "\\f]"; in_display = 0; next }
in_fence || in_display == 2 { print; next }

# Displayed formulas between two `$$` lines.
/^[ \t]*\$\$[ \t]*$/ {
  print (in_display ? "\\f]" : "\\f[")
  in_display = !in_display
  next
}
in_display { print; next }

# Indented code: four spaces or a tab after a blank line, and what follows it.
{
  blank = ($0 ~ /^[ \t]*$/)
  if (!blank && $0 ~ /^(    |\t)/ && (prev_blank || in_indented)) in_indented = 1
  else if (!blank) in_indented = 0
  prev_blank = blank
  if (in_indented || blank) { print; next }
}

# A heading shows code as plain text: Doxygen 1.9 prints a code span in a heading
# as a literal <tt> in the page's table of contents.
/^#+ / { gsub(/`/, "") }

# `$$ x $$` on one line.
/^[ \t]*\$\$.*\$\$[ \t]*$/ {
  line = $0
  sub(/^[ \t]*\$\$/, "\\f[", line)
  sub(/\$\$[ \t]*$/, "\\f]", line)
  print line
  next
}

# Inline math, outside code spans.
{
  out = ""
  rest = $0
  while (rest != "") {
    if (!match(rest, /`+/)) { out = out inline(rest); break }
    t = RSTART
    ticks = substr(rest, RSTART, RLENGTH)
    # $`x`$: GitHub's form for a formula that Markdown would otherwise touch.
    if (t > 1 && substr(rest, t - 1, 1) == "$" && match(substr(rest, t), /^`[^`]+`\$/)) {
      len = RLENGTH
      out = out inline(substr(rest, 1, t - 2)) "\\f$" substr(rest, t + 1, len - 3) "\\f$"
      rest = substr(rest, t + len)
      continue
    }
    # A code span: copied as it is, up to the same run of backticks.
    out = out inline(substr(rest, 1, t - 1))
    rest = substr(rest, t + length(ticks))
    end = index(rest, ticks)
    if (end == 0) { out = out ticks rest; break }
    out = out ticks substr(rest, 1, end - 1 + length(ticks))
    rest = substr(rest, end + length(ticks))
  }
  print out
}

# $x$ -> \f$x\f$ in text without code spans: the formula neither starts nor ends
# with a space, as GitHub requires.
function inline(s,   r) {
  r = ""
  while (match(s, /\$[^$ \t]([^$]*[^$ \t])?\$/)) {
    r = r substr(s, 1, RSTART - 1) "\\f$" substr(s, RSTART + 1, RLENGTH - 2) "\\f$"
    s = substr(s, RSTART + RLENGTH)
  }
  return r s
}
