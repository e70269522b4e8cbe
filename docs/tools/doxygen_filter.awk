# doxygen_filter.awk — Doxygen's input filter for the sources (FILTER_PATTERNS in
# docs/Doxyfile.in). Comments are written to read well in the source; two things in
# them read wrong once Doxygen's Markdown has them, and this filter hands Doxygen the
# same text with those two fixed, keeping the number of lines (the source pages and
# "Definition at line N" stay right; the source pages show the files unfiltered):
#
# 1. A step's file comment ends with its command lines,
#
#      /// Run: build/bin/step11_feeding_tensor_cores --batch 4 ... --repeat 20
#      ///      build/bin/step11_feeding_tensor_cores --seq-q 1000 ... --check
#
#    which Markdown reads as one paragraph: the lines merge into one and every "--"
#    becomes an en dash. They become a code block:
#
#      /// Run: \code{.sh}build/bin/step11_feeding_tensor_cores --batch 4 ... --repeat 20
#      ///  build/bin/step11_feeding_tensor_cores --seq-q 1000 ... --check \endcode
#
#    (Doxygen drops the indentation the lines of a code block share: the first line's
#    one space after \code{.sh} and the others' one after "///".) A command line is
#    "/// Run: " and a command, and each line after it that is "///", more than one
#    space and text.
# 2. A command-line option named in a comment's text ("Adds --batch, --heads", "when
#    --help was printed") becomes a code span, as `--batch`: in text, Markdown turns
#    its "--" into an en dash. Code spans, "quoted text" (which Doxygen shows as it
#    is), \code blocks and fenced blocks are left as they are.
function flush() {
  if (held != "") print held (in_run ? " \\endcode" : "")
  held = ""
}
# The options in the text of S as code spans: outside its code spans, and outside
# "double quotes" (Doxygen shows quoted text as it is, "--" included).
function options_as_code(s,   n, parts, i, out, m, q, j, quoted) {
  n = split(s, parts, "`")
  out = ""
  quoted = 0
  for (i = 1; i <= n; i++) {
    if (i % 2 == 1) {
      m = split(parts[i], q, "\"")
      parts[i] = ""
      for (j = 1; j <= m; j++) {
        if (j > 1) quoted = !quoted
        parts[i] = parts[i] (j > 1 ? "\"" : "") (quoted ? q[j] : option_spans(q[j]))
      }
    }
    out = out (i > 1 ? "`" : "") parts[i]
  }
  return out
}
function option_spans(rest,   pre, lead) {
  pre = ""
  while (match(rest, /(^|[ (,'])--[a-z][a-z0-9-]*/)) {
    lead = (substr(rest, RSTART, 2) == "--") ? "" : substr(rest, RSTART, 1)
    pre = pre substr(rest, 1, RSTART - 1) lead "`" substr(rest, RSTART + length(lead), RLENGTH - length(lead)) "`"
    rest = substr(rest, RSTART + RLENGTH)
  }
  return pre rest
}
/^\/\/\/ Run: [^ ]/ {
  flush()
  in_run = 1
  held = "/// Run: \\code{.sh}" substr($0, 10)
  next
}
in_run && /^\/\/\/  +[^ ]/ {
  line = $0
  sub(/^\/\/\/ +/, "///  ", line)
  print held
  held = line
  next
}
{
  flush()
  in_run = 0
  line = $0
  at = index(line, "///")
  if (!at) at = index(line, "//!")
  if (at) {
    text = substr(line, at + 3)
    if (text ~ /\\code/ && text !~ /\\endcode/) in_code = 1
    else if (text ~ /\\endcode/) in_code = 0
    else if (text ~ /^[<]? *```/) in_code = !in_code
    else if (!in_code) line = substr(line, 1, at + 2) options_as_code(text)
  }
  print line
}
END { flush() }
