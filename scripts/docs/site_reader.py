#!/usr/bin/env python3
"""site_reader.py [--shots REGEX] CHROMIUM SHOTS_DIR PAGE.html... — read pages as a reader sees them.

Opens each page in headless Chromium (driven over the DevTools protocol on a pipe,
Python's standard library only), waits for MathJax to finish, and checks the
rendered page: what its text shows, its code, its math, its links, its lists,
tables and images. Saves a full-page screenshot of each page (of those whose
name matches REGEX, with --shots) to SHOTS_DIR/NAME.png. Prints one line per
problem and exits 1 if there is any; scripts/docs/check-site.sh runs it and lists the
rules (with the bug each one catches).
"""
import base64
import fcntl
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse

# The page, as a reader sees it. Prose is the text outside code, math and
# scripts, line by line as the page's source broke it; code blocks and inline
# code are kept apart.
EXTRACT = r"""
(() => {
  const root = document.querySelector('div.contents') || document.body;
  const skip = 'script, style, .MathJax_Preview, .MathJax, .MathJax_Display, .MathJax_CHTML, pre, code, tt, kbd, div.fragment, object';
  const clone = root.cloneNode(true);
  clone.querySelectorAll(skip).forEach(e => e.remove());
  const blocks = [...root.querySelectorAll('div.fragment, pre')].filter(e => !e.parentElement.closest('div.fragment, pre'));
  // The diffs between steps show the source files as they are, markers included.
  const shown = blocks.filter(e => !e.classList.contains('diff'));
  const inline = [...root.querySelectorAll('code, tt, kbd')].filter(e => !e.closest('div.fragment, pre'));
  const titles = [...document.querySelectorAll('div.title, div.contents h1, div.contents h2, div.contents h3, div.contents h4')];
  const links = [...root.querySelectorAll('a[href]')].map(a => ({text: a.textContent, href: a.href}));
  const objects = [...root.querySelectorAll('object[data], img[src]')].map(o => {
    const r = o.getBoundingClientRect();
    return {src: o.data || o.src, width: r.width, height: r.height};
  });
  // What each block shows as one line (innerText: a paragraph's source line breaks are
  // gone, as on the screen), outside code blocks, and each line of every code block.
  const outside = e => !e.closest('div.fragment, pre');
  const shown_lines = [...root.querySelectorAll('p, li, td, th, dd, dt')].filter(outside)
    .filter(e => !e.querySelector('p, li, ul, ol, table, div.fragment, pre'))
    .map(e => e.innerText.replace(/\s+/g, ' ').trim())
    .concat(blocks.flatMap(e => e.innerText.split('\n')));
  // Ordered lists: where each stands among its siblings (for lists that restart after a
  // code block, and lines that became list items by starting with a number).
  const lists = [...root.querySelectorAll('ol')].filter(outside).map(ol => {
    const before = [];
    for (let e = ol.previousElementSibling; e; e = e.previousElementSibling) {
      const tag = e.tagName.toLowerCase();
      const kind = /^h[1-6]$/.test(tag) || e.classList.contains('memitem') ? 'heading'
                 : tag === 'ol' ? 'ol'
                 : (e.matches('div.fragment, pre') || e.querySelector('div.fragment, pre')) ? 'code'
                 : tag === 'p' ? 'p' : 'other';
      before.push({kind: kind, text: (e.innerText || '').trim().slice(-120)});
      if (kind === 'heading' || before.length > 12) break;
    }
    return {items: ol.children.length, start: ol.getAttribute('start'),
            first: (ol.firstElementChild ? ol.firstElementChild.innerText : '').trim().slice(0, 90), before: before};
  });
  // Tables: their box against the text column's, and content beyond their own box.
  const column = (document.querySelector('div.contents') || document.body).getBoundingClientRect();
  const tables = [...root.querySelectorAll('table')].filter(t => !t.parentElement.closest('div.fragment, pre, table')).map(t => {
    const r = t.getBoundingClientRect();
    let clipped = false;
    for (let a = t; a && a !== document.body; a = a.parentElement) {
      const st = getComputedStyle(a);
      const scrolls = st.overflowX === 'auto' || st.overflowX === 'scroll';
      if (a.scrollWidth > a.clientWidth + 1 && !scrolls && st.display !== 'inline') { clipped = true; break; }
      if (scrolls) break;
    }
    return {right: r.right, width: r.width, scroll: t.scrollWidth, client: t.clientWidth, clipped: clipped,
            head: (t.rows.length ? t.rows[0].innerText : '').replace(/\s+/g, ' ').trim().slice(0, 60)};
  });
  const images = [...root.querySelectorAll('img')].map(i => ({src: i.src, ok: i.complete && i.naturalWidth > 0}));
  return {
    shown_lines: shown_lines,
    lists: lists,
    tables: tables,
    column_right: column.right,
    images: images,
    prose: clone.textContent,
    code_blocks: shown.map(e => e.innerText),
    inline_code: inline.map(e => e.textContent),
    headings: titles.map(e => e.textContent.trim()),
    links: links,
    objects: objects,
    math_sources: document.querySelectorAll('script[type^="math/tex"]').length,
    math_rendered: document.querySelectorAll('.MathJax, .MathJax_Display, .MathJax_CHTML').length,
    math_errors: document.querySelectorAll('.MathJax_Error, .math-error, .merror, [data-mjx-error]').length,
    height: Math.max(document.documentElement.scrollHeight,
                     (document.querySelector('#doc-content') || document.body).scrollHeight + 120),
  };
})()
"""

WAIT_FOR_MATHJAX = r"""
new Promise(resolve => {
  if (window.MathJax && MathJax.Hub && MathJax.Hub.Queue) MathJax.Hub.Queue(() => resolve(true));
  else resolve(false);
})
"""


class Browser:
    """Headless Chromium on --remote-debugging-pipe: commands on fd 3, replies on fd 4."""

    def __init__(self, chromium, profile):
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()
        # The child's fds 3 and 4 must be the pipe ends: moved out of the way first
        # (they may be 3 or 4 already), then into place. subprocess closes every
        # fd not in pass_fds after preexec_fn, so 3 and 4 are in it.
        def child():
            a = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)
        self.proc = subprocess.Popen(
            [chromium, '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
             '--disable-background-networking', '--disable-component-update', '--disable-sync',
             '--hide-scrollbars', '--user-data-dir=' + profile, '--remote-debugging-pipe', 'about:blank'],
            pass_fds=(3, 4, to_browser_r, from_browser_w), preexec_fn=child,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.buffer = b''
        self.next_id = 0
        self.events = []
        target = self.call('Target.createTarget', url='about:blank')['targetId']
        self.session = self.call('Target.attachToTarget', targetId=target, flatten=True)['sessionId']
        self.call('Page.enable', session=True)

    def _read_message(self, deadline):
        while b'\0' not in self.buffer:
            if time.time() > deadline:
                raise TimeoutError('Chromium did not answer')
            chunk = os.read(self.from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError('Chromium closed the pipe')
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b'\0', 1)
        return json.loads(message)

    def call(self, method, session=False, timeout=60, **params):
        self.next_id += 1
        message = {'id': self.next_id, 'method': method, 'params': params}
        if session:
            message['sessionId'] = self.session
        os.write(self.to_browser, json.dumps(message).encode() + b'\0')
        deadline = time.time() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get('id') == self.next_id:
                if 'error' in reply:
                    raise RuntimeError(f"{method}: {reply['error'].get('message')}")
                return reply.get('result', {})
            self.events.append(reply)

    def wait_event(self, method, timeout=30):
        deadline = time.time() + timeout
        while True:
            for i, e in enumerate(self.events):
                if e.get('method') == method:
                    del self.events[i]
                    return e
            self.events.append(self._read_message(deadline))

    def evaluate(self, expression, timeout=30):
        result = self.call('Runtime.evaluate', session=True, timeout=timeout, expression=expression,
                           returnByValue=True, awaitPromise=True)
        if 'exceptionDetails' in result:
            raise RuntimeError(result['exceptionDetails'].get('text', 'script error'))
        return result['result'].get('value')

    def open(self, url, width=1280, height=1000):
        self.call('Emulation.setDeviceMetricsOverride', session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        self.events.clear()
        self.call('Page.navigate', session=True, url=url)
        self.wait_event('Page.loadEventFired')

    def close(self):
        try:
            self.call('Browser.close', timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


TAGS = r'</?(?:tt|b|i|em|strong|code|br|p|div|span|a|sub|sup|table|td|tr|th|img|pre|ul|ol|li|kbd|h[1-6])(?:\s[^<>]*)?/?>'
ENTITY = r'&(?:lt|gt|amp|quot|nbsp|#\d+);'
LOG = re.compile(r'\b[\w.+-]*(?:ncu|sanitizer|resources|profile)[\w.+-]*\.(?:txt|log|ncu-rep)\b|\b[\w.+-]+\.log\b')


# The pages written as pages (not generated from the sources' comments).
NARRATIVE = re.compile(r'(index|step\d\d|worked_example|io_complexity|fa1_vs_fa2|results|python|whats_next)\.html')


def local_path(href):
    url = urllib.parse.urlsplit(href)
    return urllib.parse.unquote(url.path) if url.scheme == 'file' else None


def check_page(name, page, step_page, narrative):
    problems = []
    say = lambda rule, what: problems.append(f'{name}: [{rule}] {what}')
    prose_lines = [l.strip() for l in page['prose'].split('\n')]
    code = page['code_blocks'] + page['inline_code']
    everything = '\n'.join(prose_lines + code)

    # pipes: a Markdown table that did not become a table.
    for l in prose_lines:
        if l.startswith('|') and ' | ' in l:
            say('pipes', f'raw Markdown table row in the text: {l[:90]!r}')
            break
    # markers: snippet commands and markers shown to the reader.
    # (A source page shows the file as it is, markers included.)
    for marker in ('\\snippet', '//! [') if not name.endswith('_source.html') else ():
        if marker in everything:
            line = next(l for l in everything.split('\n') if marker in l)
            say('markers', f'{marker!r} shown on the page: {line.strip()[:90]!r}')
    # tags: HTML shown as text (escaped once too often).
    for l in prose_lines:
        m = re.search(TAGS, l) or re.search(ENTITY, l)
        if m:
            say('tags', f'HTML shown as text: {m.group(0)!r} in {l[:90]!r}')
            break
    for c in code:
        m = re.search(ENTITY, c)
        if m:
            say('tags', f'HTML entity shown in code: {m.group(0)!r}')
            break
    # dashes: an en or em dash where an option's "--" was meant.
    for l in everything.split('\n'):
        m = re.search(r'(?:^|[\s`(])([\u2013\u2014][A-Za-z-]+)', l)
        if m:
            say('dashes', f'{m.group(1)!r} (an en/em dash, not "--") in {l.strip()[:90]!r}')
            break
    # backticks: a code span that Markdown did not turn into code.
    for l in prose_lines:
        if '`' in l:
            say('backticks', f'stray backtick in the text: {l[:90]!r}')
            break
    # twice: the same code shown twice (a snippet nested in another one), on the pages
    # that embed snippets (an API page may show two macros, one the other's prefix).
    blocks = [b.strip() for b in page['code_blocks'] if narrative and b.strip().count('\n') >= 2]
    for i, a in enumerate(blocks):
        if any(i != j and a in b for j, b in enumerate(blocks)):
            say('twice', f'a code block is shown twice (inside another one): {a.splitlines()[0][:80]!r}')
            break
    # crlf: carriage returns shown, or served in a CSV the page links to.
    if '\r' in everything:
        say('crlf', 'a carriage return (CRLF line ending) in the rendered text')
    for link in page['links']:
        path = local_path(link['href'])
        if path and path.endswith('.csv') and os.path.isfile(path):
            with open(path, 'rb') as f:
                if b'\r' in f.read():
                    say('crlf', f'{os.path.basename(path)} has CRLF line endings')
    # math: every formula rendered by MathJax, none left as TeX.
    if page['math_errors']:
        say('math', f"{page['math_errors']} formulas MathJax could not render")
    if page['math_sources'] > page['math_rendered']:
        say('math', f"{page['math_sources'] - page['math_rendered']} of {page['math_sources']} formulas not rendered")
    for raw in ('$$', '\\f[', '\\f$', '\\[', '\\('):
        hit = next((l for l in prose_lines if raw in l), None)
        if hit is not None:
            say('math', f'unrendered math {raw!r} in {hit[:90]!r}')
            break
    # logs: every log or profile the page cites is a link to a file that is there.
    linked = {os.path.basename(local_path(l['href']) or '') for l in page['links']
              if local_path(l['href']) and os.path.isfile(local_path(l['href']))}
    cited = set(LOG.findall('\n'.join(prose_lines + page['inline_code'])))
    for name_cited in sorted(cited - linked):
        say('logs', f'cites {name_cited} but links to no such file on the site')
    # figures: every image and SVG object shows with a size.
    for o in page['objects']:
        if o['width'] < 2 or o['height'] < 2:
            say('figures', f"{o['src']} is not shown (rendered {o['width']:.0f} × {o['height']:.0f})")
    # images: every <img> loaded (a broken file, a wrong format).
    for i in page['images']:
        if not i['ok']:
            say('images', f"{i['src']} did not load")
    # figures: a figure left as its GitHub form (the source link instead of the drawing).
    for link in page['links']:
        if link['text'].strip().startswith('Figure source'):
            say('figures', f"a figure is missing: the page shows its source link {link['text'].strip()[:60]!r}")
    # lists: an ordered list that starts again at 1 after a code block, in the same section
    # as the list before it (the run block of an answer ended the list: Markdown needs the
    # block indented like the item's text).
    for ol in page['lists']:
        kinds = [b['kind'] for b in ol['before']]
        if (ol['start'] in (None, '1') and 'ol' in kinds and 'code' in kinds[:kinds.index('ol')]
                and 'heading' not in kinds[:kinds.index('ol')]):
            say('lists', f"a numbered list starts again at 1 after a code block: {ol['first'][:70]!r}")
    # numbered: a line of a paragraph that starts with a number and a dot ("... steps 14 to
    # / 16. Consumer ...") became a one-item list cut out of its sentence.
    for ol in page['lists']:
        prev = ol['before'][0] if ol['before'] else None
        if (ol['items'] == 1 and prev and prev['kind'] == 'p' and prev['text']
                and not re.search(r'[.:!?)\]"”’*]$', prev['text'])):
            say('numbered', f"a paragraph line starting with a number became a list item: "
                            f"{prev['text'][-40:]!r} / {ol['first'][:50]!r}")
    # tables: a table wider than the text column, or with columns cut off.
    for t in page['tables']:
        if t['clipped'] or t['right'] > page['column_right'] + 2:
            say('tables', f"a table is cut off or wider than the page ({t['width']:.0f} px, "
                          f"content {t['scroll']:.0f} px): {t['head']!r}")
    # merged: two command lines shown as one (a comment's "Run:" lines read as prose).
    command = r'(?:build(?:-[\w-]+)?/bin/|scripts/)[\w./-]+'
    for l in page['shown_lines']:
        # A command, its options (each with at most one value), then the next command: a
        # sentence that names two commands ("written by scripts/gpu/round.sh (gpu_bench
        # --sections steps) and put here by scripts/docs/render-pages") is not one.
        m = re.search(command + r'(?:\s+[-\u2013\u2014]{1,2}[A-Za-z][\w-]*(?:\s+[^\s\-\u2013\u2014][^\s]*)?)+\s+'
                      + command, l)
        if m:
            say('merged', f'two commands on one line: {l.strip()[:100]!r}')
            break
    # dashes, in what the screen shows (a paragraph's lines joined).
    for l in page['shown_lines']:
        m = re.search(r'(?:^|[\s`(])([\u2013\u2014][A-Za-z-]+)', l)
        if m and not any(m.group(1) in p for p in problems):
            say('dashes', f'{m.group(1)!r} (an en/em dash, not "--") in {l.strip()[:90]!r}')
            break
    # exercises: every step page has a section of exercises.
    if step_page and not any('Exercises' in h for h in page['headings']):
        say('exercises', 'no section whose heading contains "Exercises"')
    # standard: every step page has a figure, rendered math and a real run's output.
    if step_page:
        if not any(o['src'].split('?')[0].endswith('.svg') for o in page['objects']):
            say('standard', 'no figure (a <!-- figure: NAME "caption" --> line)')
        if page['math_rendered'] == 0:
            say('standard', 'no rendered formula')
        if not any(re.search(r'/runs/[A-Za-z0-9_]+\.txt$', l['href']) for l in page['links']):
            say('standard', 'no sample run (a <!-- run: NAME --> block)')
    return problems


def main():
    args = sys.argv[1:]
    shots_for = None  # --shots REGEX: screenshots only of the pages whose name matches
    if '--shots' in args:
        i = args.index('--shots')
        shots_for = re.compile(args[i + 1])
        del args[i:i + 2]
    chromium, shots, pages = args[0], args[1], args[2:]
    os.makedirs(shots, exist_ok=True)
    problems = []
    with tempfile.TemporaryDirectory() as profile:
        browser = Browser(chromium, profile)
        try:
            for path in pages:
                name = os.path.basename(path)
                url = 'file://' + os.path.abspath(path)
                try:
                    browser.open(url)
                    browser.evaluate(WAIT_FOR_MATHJAX, timeout=60)
                    page = browser.evaluate(EXTRACT)
                except Exception as e:  # one page failing is a problem, not the end of the check
                    problems.append(f'{name}: [open] Chromium could not read the page: {e}')
                    continue
                # Doxygen's index pages of one kind (functions_enum.html, ...) have no title
                # but their list; a page with neither shows nothing.
                if not page['headings'] and not page['prose'].strip():
                    problems.append(f'{name}: [open] no page title rendered')
                narrative = NARRATIVE.fullmatch(name) is not None
                problems += check_page(name, page, re.fullmatch(r'step\d\d\.html', name) is not None, narrative)
                if shots_for and not shots_for.search(name):
                    continue
                # Full page: the viewport as tall as the content (capped), then one capture.
                height = min(int(page['height']), 30000)
                browser.call('Emulation.setDeviceMetricsOverride', session=True, width=1280, height=height,
                             deviceScaleFactor=1, mobile=False)
                browser.evaluate('new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))')
                shot = browser.call('Page.captureScreenshot', session=True, timeout=120, format='png',
                                    captureBeyondViewport=True)
                with open(os.path.join(shots, name[:-5] + '.png'), 'wb') as f:
                    f.write(base64.b64decode(shot['data']))
        finally:
            browser.close()
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
