"""Build the documentation site from the notebooks and the guide pages, offline and without Quarto.

    python scripts/docs.py [--out _docs]

Pages and where they come from (the same names as nbdev's, so every module's `Docs:` line finds its page):

- `index.html`                 README.md, the front page
- `<guide>.html`               docs/guide/NN_<guide>.md (the reference, moved out of the README)
- `<module>.html`              nbs/NN<letter>_<module>.ipynb, the chapter whose `#| default_exp` is the module
- `tutorials/<name>.html`      nbs/tutorials/<name>.ipynb
- `chapters.html`              nbs/index.ipynb, the table of chapters
- `contributing.html`          CONTRIBUTING.md

Every page has a Markdown twin at `<page>.html.md`: the address a module's docstring names
(`Docs: https://reward-auditor.github.io/reward_auditor/<module>.html.md`, written by `nbdev-export` from
`[project.urls] Documentation` in pyproject.toml). The site root is that URL's folder, so the twin of
`<site>/<module>.html` is `<site>/<module>.html.md`. Notebooks are rendered as saved (no cell is executed):
Markdown through mistune, code through pygments (both installed with nbconvert), the saved outputs as they are.
Links between the sources (`docs/guide/x.md`, `nbs/08b_audit.ipynb`, `CONTRIBUTING.md`, images under `docs/`)
become links between the pages; a link to another file of the repository goes to the repository on GitHub.
`nbdev-docs` (Quarto) renders the same notebooks where Quarto is installed; this builder is the one the tests run.
"""
from __future__ import annotations

import argparse
import functools
import html
import json
import re
import shutil
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import mistune
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

REPO = Path(__file__).resolve().parents[1]
GITHUB = "https://github.com/reward-auditor/reward_auditor/blob/main/"
PREFIX = re.compile(r"^\d+[a-zA-Z0-9]*_")  # nbdev's page names: `08b_audit.ipynb` → `audit.html`
FLOORS = {"00": "Ground", "01": "Data", "02": "Statistics", "03": "Plots", "04": "Perturbations",
          "05": "Scorer kinds", "06": "Scorer families", "07": "Scorers", "08": "Runs", "09": "Reports",
          "10": "Command line"}


def page_name(path: Path) -> str:
    "The page a source becomes, relative to the site root (nbdev's rule: numeric prefix dropped, lower case)."
    rel = path.relative_to(REPO)
    if rel == Path("README.md"):
        return "index.html"
    if rel == Path("nbs/index.ipynb"):
        return "chapters.html"
    if rel == Path("CONTRIBUTING.md"):
        return "contributing.html"
    if rel.parts[:2] == ("docs", "guide"):
        return PREFIX.sub("", path.stem.lower()) + ".html"
    if rel.parts[0] == "nbs":
        sub = Path(*rel.parts[1:])
        return sub.with_name(PREFIX.sub("", sub.name.lower())).with_suffix(".html").as_posix()
    raise ValueError(f"{rel}: not a documentation source")


def docs_url_to_page(url: str, base: str) -> str:
    "A module's `Docs:` URL → the file it names under the site root (`<base>audit.html.md` → `audit.html.md`)."
    if not url.startswith(base):
        raise ValueError(f"{url} is not under the documentation root {base}")
    return url[len(base):]


def documentation_root() -> str:
    "`[project.urls] Documentation` of pyproject.toml, the root every `Docs:` URL starts with."
    import tomllib
    urls = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]
    return urls["Documentation"].rstrip("/") + "/"


def sources() -> list[Path]:
    "Every documentation source, in the order of the sidebar."
    out = [REPO / "README.md"]
    out += sorted((REPO / "docs" / "guide").glob("*.md"))
    out += sorted((REPO / "nbs" / "tutorials").glob("*.ipynb"))
    out += [REPO / "nbs" / "index.ipynb"]
    out += sorted(p for p in (REPO / "nbs").glob("*.ipynb") if p.name != "index.ipynb")
    out += [REPO / "CONTRIBUTING.md"]
    return [p for p in out if p.exists()]


# ---------------------------------------------------------------- Markdown and code

def slug(text: str) -> str:
    "GitHub's heading anchors: lower case, punctuation dropped, spaces → hyphens (`## Data formats` → `data-formats`)."
    text = re.sub(r"<[^>]+>", "", html.unescape(text)).strip().lower()
    return re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", text))


def code_html(code: str, lang: str | None) -> str:
    try:
        lexer = get_lexer_by_name((lang or "text").split()[0])
    except ClassNotFound:
        lexer = get_lexer_by_name("text")
    return highlight(code, lexer, HtmlFormatter(nowrap=False, cssclass="highlight"))


class _Renderer(mistune.HTMLRenderer):
    "Anchored headings, highlighted code, and links from one source to another rewritten into links between pages."

    def __init__(self, src: Path, titles: list):
        super().__init__(escape=False)
        self.src, self.titles, self.seen = src, titles, {}

    def heading(self, text, level, **attrs):
        base = slug(text)
        n = self.seen.get(base, 0)
        self.seen[base] = n + 1
        anchor = base if n == 0 else f"{base}-{n}"
        self.titles.append((level, re.sub(r"<[^>]+>", "", text), anchor))
        return f'<h{level} id="{anchor}">{text}<a class="anchor" href="#{anchor}">#</a></h{level}>\n'

    def link(self, text, url, title=None):
        return super().link(text, rewrite_link(url, self.src), title)

    def image(self, text, url, title=None):
        return super().image(text, rewrite_link(url, self.src, image=True), title)

    def block_code(self, code, info=None):
        return code_html(code, info)

    def codespan(self, text):
        "`08b_audit` (a chapter's notebook) links to its page."
        page = _chapter_pages().get(html.unescape(text))
        code = super().codespan(text)
        return f'<a href="{_relative(page, Path(page_name(self.src)).parent)}">{code}</a>' if page else code


@functools.lru_cache(maxsize=1)
def _chapter_pages() -> dict:
    "Chapter notebook stems → their pages (`08b_audit` → `audit.html`)."
    return {p.stem: page_name(p) for p in (REPO / "nbs").glob("*.ipynb") if p.name != "index.ipynb"}


_IMAGES: set = set()


def rewrite_link(url: str, src: Path, image: bool = False) -> str:
    "A link written between source files → the link between their pages (relative to the page of `src`)."
    parts = urlsplit(url)
    if parts.scheme or url.startswith(("#", "mailto:")) or not parts.path:
        return url
    target = (src.parent / parts.path).resolve()
    frag = f"#{parts.fragment}" if parts.fragment else ""
    here = Path(page_name(src)).parent
    try:
        rel = target.relative_to(REPO)
    except ValueError:
        return url
    if not target.exists():
        return url  # left as written: the browser check names it
    if image:
        _IMAGES.add(target)  # copied into the site's img/ by `build`
        return _relative(f"img/{rel.name}", here)
    try:
        return _relative(page_name(target), here) + frag
    except ValueError:
        return GITHUB + rel.as_posix() + frag


def _relative(page: str, here: Path) -> str:
    up = "../" * len(here.parts)
    return up + page


def markdown(text: str, src: Path, titles: list) -> str:
    md = mistune.create_markdown(renderer=_Renderer(src, titles), plugins=["table", "strikethrough"])
    return md(text)


# ---------------------------------------------------------------- notebooks

DIRECTIVE = re.compile(r"^\s*#\s*\|\s*(\w+)(.*)$")


def _cell_source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def shown_cells(nb: dict) -> list[tuple[str, str, list]]:
    "(kind, source, outputs) of each cell a reader sees: `#| hide` cells and nbdev's directive lines left out."
    out = []
    for cell in nb["cells"]:
        src = _cell_source(cell)
        if cell["cell_type"] == "code":
            lines = src.splitlines()
            flags = [m.group(1) for m in map(DIRECTIVE.match, lines) if m]
            if "hide" in flags or "exporti" in flags and not any("def " in ln for ln in lines):
                continue
            src = "\n".join(ln for ln in lines if not DIRECTIVE.match(ln)).strip("\n")
            if not src.strip() and not cell.get("outputs"):
                continue
            out.append(("code" if "export" not in flags else "export", src, cell.get("outputs", [])))
        elif cell["cell_type"] == "markdown" and src.strip():
            out.append(("markdown", src, []))
    return out


_INLINE = mistune.create_markdown(escape=True)


def _inline(text: str) -> str:
    "One paragraph of Markdown (code spans, emphasis) as inline HTML, any HTML in it escaped."
    out = _INLINE(text).strip()
    return out[3:-4] if out.startswith("<p>") and out.endswith("</p>") else out


def api_cards(src: str) -> str:
    """What nbdev's `show_doc` shows for an exported cell, from its source alone (nothing is imported): each public
    function's and class's signature, docstring and a table of the parameters described by a comment (docments)."""
    import ast
    sys.path.insert(0, str(REPO))
    try:
        from reward_auditor import _docments
    finally:
        sys.path.remove(str(REPO))
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return ""
    cards = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node) or ""
        if isinstance(node, ast.ClassDef):
            head = f"class {node.name}"
            params = {}
        else:
            head = f"{node.name}({ast.unparse(node.args)})" + (f" → {ast.unparse(node.returns)}" if node.returns else "")
            params = _docments(ast.get_source_segment(src, node) or "")
        rows = ""
        if params:
            args = {a.arg: a for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}
            rows = "<table><tr><th>parameter</th><th>type</th><th>what it is</th></tr>" + "".join(
                f"<tr><td><code>{html.escape(k)}</code></td><td>"
                f"{html.escape(ast.unparse(args[k].annotation)) if k in args and args[k].annotation else ''}</td>"
                f"<td>{_inline(v)}</td></tr>" for k, v in params.items()) + "</table>"
        cards.append(f'<div class="api" id="{node.name}"><code class="sig">{html.escape(head)}</code>'
                     f'<p>{_inline(doc.split(chr(10) + chr(10))[0])}</p>{rows}</div>')
    return "".join(cards)


def _joined(v) -> str:
    return "".join(v) if isinstance(v, list) else str(v)


def output_html(o: dict) -> str:
    kind = o.get("output_type")
    if kind == "stream":
        return f'<pre class="output">{html.escape(_joined(o.get("text", "")))}</pre>'
    if kind == "error":
        tb = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(o.get("traceback", [])))
        return f'<pre class="output error">{html.escape(tb)}</pre>'
    data = o.get("data", {})
    if "image/png" in data:
        return f'<img class="output" alt="output" src="data:image/png;base64,{_joined(data["image/png"]).strip()}">'
    if "image/svg+xml" in data:
        return f'<div class="output">{_joined(data["image/svg+xml"])}</div>'
    if "text/html" in data:
        return f'<div class="output">{_joined(data["text/html"])}</div>'
    if "text/markdown" in data:
        return f'<div class="output">{mistune.html(_joined(data["text/markdown"]))}</div>'
    if "text/plain" in data:
        return f'<pre class="output">{html.escape(_joined(data["text/plain"]))}</pre>'
    return ""


def notebook_body(path: Path, titles: list) -> tuple[str, str]:
    "(HTML body, Markdown twin) of a notebook as saved."
    nb = json.loads(path.read_text(encoding="utf-8"))
    parts, md = [], []
    for kind, src, outputs in shown_cells(nb):
        if kind == "markdown":
            parts.append(f'<div class="md">{markdown(src, path, titles)}</div>')
            md.append(src)
        else:
            parts.append(f'<div class="code">{code_html(src, "python")}'
                         + "".join(output_html(o) for o in outputs) + "</div>"
                         + (api_cards(src) if kind == "export" else ""))
            md.append(f"```python\n{src}\n```")
            for o in outputs:
                text = _joined(o.get("text", "")) or _joined(o.get("data", {}).get("text/plain", ""))
                if text.strip():
                    md.append(f"```\n{text.rstrip()}\n```")
    return "\n".join(parts), "\n\n".join(md) + "\n"


# ---------------------------------------------------------------- pages

CSS = """
body{margin:0;font:15px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2330;background:#fff}
a{color:#1f5fbf;text-decoration:none} a:hover{text-decoration:underline}
nav.side{position:fixed;top:0;left:0;bottom:0;width:260px;overflow-y:auto;background:#f5f7fa;
 border-right:1px solid #dde3ea;padding:18px 14px;box-sizing:border-box;font-size:13.5px}
nav.side .brand{font-weight:700;font-size:17px;display:block;margin-bottom:12px;color:#1d2330}
nav.side h4{margin:16px 0 4px;font-size:11.5px;text-transform:uppercase;letter-spacing:.05em;color:#6a7585}
nav.side ul{list-style:none;margin:0;padding:0} nav.side li{margin:1px 0}
nav.side li a{display:block;padding:2px 6px;border-radius:4px;color:#2a3340}
nav.side li a.here{background:#dbe7fb;font-weight:600}
main{margin-left:260px;padding:28px 48px 80px;max-width:980px}
h1,h2,h3,h4{line-height:1.25;margin-top:1.6em} h1{margin-top:.2em}
h1 a.anchor,h2 a.anchor,h3 a.anchor,h4 a.anchor{visibility:hidden;margin-left:.35em;color:#9aa6b5;font-weight:400}
h1:hover a.anchor,h2:hover a.anchor,h3:hover a.anchor,h4:hover a.anchor{visibility:visible}
code{font:13px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f2f4f7;padding:1px 4px;border-radius:3px}
.highlight{background:#f6f8fa;border:1px solid #e3e8ee;border-radius:6px;overflow-x:auto;margin:.8em 0}
.highlight pre{margin:0;padding:10px 12px;font:13px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre.output{margin:.2em 0 .8em;padding:8px 12px;border-left:3px solid #c9d3df;background:#fbfcfd;overflow-x:auto;
 font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre.error{border-left-color:#d33}
div.output{overflow-x:auto;margin:.2em 0 .8em} img{max-width:100%}
table{border-collapse:collapse;margin:.8em 0;font-size:13.5px;display:block;overflow-x:auto}
th,td{border:1px solid #dde3ea;padding:4px 8px;text-align:left;vertical-align:top} th{background:#f5f7fa}
blockquote{margin:.8em 0;padding:.2em 1em;border-left:4px solid #c9d3df;color:#46505e}
.toc{font-size:13px;border:1px solid #e3e8ee;border-radius:6px;padding:8px 14px;margin:1em 0;background:#fbfcfd}
.toc ul{margin:.2em 0;padding-left:1.2em} .twin{font-size:12.5px;color:#6a7585}
.api{border-left:4px solid #1f5fbf;background:#f7faff;padding:8px 14px;margin:.4em 0 1.2em;border-radius:0 6px 6px 0}
.api code.sig{background:none;font-weight:600;display:block;white-space:pre-wrap;padding:0}
.api p{margin:.4em 0} .api table{font-size:12.5px;margin:.4em 0}
"""


def sidebar(entries: list[tuple[str, str, str]], here: str) -> str:
    "The table of contents on every page; `entries` are (group, page, title)."
    up = Path(here).parent
    out, group = ['<nav class="side">', f'<a class="brand" href="{_relative("index.html", up)}">reward_auditor</a>'], None
    for g, page, title in entries:
        if g != group:
            out.append(("</ul>" if group else "") + f"<h4>{html.escape(g)}</h4><ul>")
            group = g
        cls = ' class="here"' if page == here else ""
        out.append(f'<li><a{cls} href="{_relative(page, up)}">{html.escape(title)}</a></li>')
    out.append("</ul></nav>")
    return "\n".join(out)


def page_html(title: str, body: str, nav: str, here: str, toc: list) -> str:
    up = Path(here).parent
    heads = [t for t in toc if t[0] == 2]
    toc_html = ""
    if len(heads) > 2:
        toc_html = ('<div class="toc"><b>On this page</b><ul>'
                    + "".join(f'<li><a href="#{a}">{html.escape(html.unescape(t))}</a></li>' for _, t, a in heads)
                    + "</ul></div>")
    body = re.sub(r"(</h1>\n?(?:<blockquote>.*?</blockquote>)?)", lambda m: m.group(1) + toc_html, body, count=1,
                  flags=re.S) if toc_html and "</h1>" in body else toc_html + body
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)} – reward_auditor</title>"
            f'<link rel="stylesheet" href="{_relative("site.css", up)}"></head>\n<body>\n{nav}\n<main>\n{body}\n'
            f'<p class="twin">This page as Markdown: <a href="{Path(here).name}.md">{Path(here).name}.md</a></p>'
            f"\n</main>\n</body></html>\n")


def _title(src: Path, text: str) -> str:
    m = re.search(r"^#\s+(.+)$", text, re.M)
    return re.sub(r"[`*]", "", m.group(1)).strip() if m else src.stem


def _group(src: Path) -> str:
    rel = src.relative_to(REPO)
    if rel.parts[:2] == ("docs", "guide") or rel.name in ("README.md",):
        return "Guide"
    if rel.parts[:2] == ("nbs", "tutorials"):
        return "Tutorials"
    if rel.name in ("index.ipynb", "CONTRIBUTING.md"):
        return "The book"
    return f"Chapters · {rel.name[:2]} {FLOORS.get(rel.name[:2], '')}".rstrip()


def build(out: Path = REPO / "_docs", clean: bool = True) -> list[str]:
    "Write the site into `out`; returns the pages written (relative to `out`)."
    out = Path(out)
    if clean and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    items = []
    for src in sources():
        text = src.read_text(encoding="utf-8")
        if src.suffix == ".ipynb":
            first = next((_cell_source(c) for c in json.loads(text)["cells"] if c["cell_type"] == "markdown"), "")
            title = _title(src, first)
        else:
            title = _title(src, text)
        if src.name == "README.md":
            title = "Home"
        elif _group(src).startswith("Chapters"):
            title = PREFIX.sub("", src.stem)
        items.append((src, page_name(src), title))
    nav_entries = [(_group(s), p, t) for s, p, t in items]
    written = []
    for src, page, title in items:
        titles: list = []
        if src.suffix == ".ipynb":
            body, twin = notebook_body(src, titles)
        else:
            twin = src.read_text(encoding="utf-8")
            body = markdown(twin, src, titles)
        dest = out / page
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(page_html(title, body, sidebar(nav_entries, page), page, titles), encoding="utf-8")
        (out / (page + ".md")).write_text(twin, encoding="utf-8")
        written.append(page)
    (out / "site.css").write_text(CSS + HtmlFormatter(style="default").get_style_defs(".highlight"), encoding="utf-8")
    img = out / "img"
    img.mkdir(exist_ok=True)
    for p in sorted(_IMAGES):
        shutil.copyfile(p, img / p.name)
    return written


# ---------------------------------------------------------------- the check in a browser

PAGE_PROBE = """(() => {
  const main = document.querySelector('main'), nav = document.querySelector('nav.side');
  return {title: document.title, h1: !!document.querySelector('main h1'),
          text: main ? main.innerText.length : 0,
          styled: !!nav && getComputedStyle(nav).position === 'fixed',
          links: [...document.querySelectorAll('a[href]')].map(a => a.href),
          ids: [...document.querySelectorAll('[id]')].map(e => e.id),
          images: [...document.images].map(i => ({src: i.src.slice(0, 120), ok: i.complete && i.naturalWidth > 0}))};
})()"""


class Chromium:
    "Headless Chromium driven over its DevTools pipe (no websocket, no driver): navigate, evaluate, collect errors."

    def __init__(self, binary: str, profile: Path):
        import os
        import subprocess
        r_in, self._w = os.pipe()   # we write commands; Chromium reads them on fd 3
        self._r, w_out = os.pipe()  # Chromium writes answers on fd 4

        def fds():
            os.dup2(r_in, 3)
            os.dup2(w_out, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--allow-file-access-from-files", "--no-first-run", "--no-default-browser-check",
             f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4), preexec_fn=fds)
        os.close(r_in)
        os.close(w_out)
        self._buf, self._id, self.events = b"", 0, []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)

    def _read(self, timeout: float) -> dict:
        import os
        import select
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, session: bool = False, timeout: float = 30, **params) -> dict:
        import os
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        while True:
            m = self._read(timeout)
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def open(self, url: str, timeout: float = 30) -> dict:
        "Load `url`, wait for its load event, and return the page probe plus the errors it logged."
        self.events = []
        self.call("Page.navigate", session=True, url=url)
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._read(deadline - time.monotonic()))
        res = self.call("Runtime.evaluate", session=True, expression=PAGE_PROBE, returnByValue=True)
        probe = res["result"]["value"]
        probe["errors"] = [" ".join(filter(None, [d.get("text"), d.get("exception", {}).get("description")]))
                           for d in (e["params"]["exceptionDetails"] for e in self.events
                                     if e.get("method") == "Runtime.exceptionThrown")]
        probe["errors"] += [f'{e["params"]["entry"].get("text")} {e["params"]["entry"].get("url", "")}'
                            for e in self.events if e.get("method") == "Log.entryAdded"
                            and e["params"]["entry"].get("level") == "error"]
        return probe

    def screenshot(self, url: str, path: Path, width: int = 1400, height: int = 1000):
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        self.open(url)
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        import base64
        Path(path).write_bytes(base64.b64decode(data))

    def close(self):
        import os
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        for fd in (self._w, self._r):
            os.close(fd)
        try:
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()
            self.proc.wait()


def check(site: Path, binary: str = "chromium", profile: Path | None = None) -> list[str]:
    """Open every page of `site` in headless Chromium; the problems found, one line each (none: `[]`).

    A page must load without a script error or a failed resource, have a heading and text in its main column and
    its stylesheet applied; every link to a file of the site must name a file that exists, and a link's `#anchor`
    an element of the page it points to. Links to other sites are not followed."""
    import tempfile
    from urllib.parse import unquote
    site = Path(site).resolve()
    pages = sorted(p for p in site.rglob("*.html"))
    problems, probes = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        browser = Chromium(binary, Path(profile or tmp))
        try:
            for p in pages:
                probe = probes[p] = browser.open(p.as_uri())
                name = p.relative_to(site).as_posix()
                if not probe["h1"] or probe["text"] < 200:
                    problems.append(f"{name}: no heading or almost no text ({probe['text']} characters)")
                if not probe["styled"]:
                    problems.append(f"{name}: the stylesheet is not applied")
                problems += [f"{name}: {e}" for e in probe["errors"]]
                problems += [f"{name}: image not shown: {i['src']}" for i in probe["images"] if not i["ok"]]
        finally:
            browser.close()
    base = documentation_root()
    for p, probe in probes.items():
        name = p.relative_to(site).as_posix()
        for href in probe["links"]:
            if href.startswith(base):
                href = (site / docs_url_to_page(href, base)).as_uri()
            parts = urlsplit(href)
            if parts.scheme != "file":
                continue
            target = Path(unquote(parts.path))
            if not target.is_file():
                problems.append(f"{name}: broken link {href}")
            elif parts.fragment and target in probes and unquote(parts.fragment) not in probes[target]["ids"]:
                problems.append(f"{name}: link to a missing anchor {href}")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "_docs"), help="the site's folder (default: _docs)")
    ap.add_argument("--check", action="store_true", help="then open every page in headless Chromium and report "
                    "pages that fail to render, broken links and missing anchors")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium", help="the browser for --check")
    ap.add_argument("--screenshot", metavar="PNG", help="save the front page at 1400 x 1000 pixels")
    args = ap.parse_args(argv)
    t = time.perf_counter()
    pages = build(Path(args.out))
    print(f"{len(pages)} pages in {args.out} ({time.perf_counter() - t:.1f} s); open {Path(args.out) / 'index.html'}")
    if args.screenshot:
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            b = Chromium(args.chromium, Path(tmp))
            try:
                b.screenshot((Path(args.out).resolve() / "index.html").as_uri(), Path(args.screenshot))
            finally:
                b.close()
    if args.check:
        problems = check(Path(args.out), args.chromium)
        for line in problems:
            print(line, file=sys.stderr)
        print(f"checked in Chromium: {len(problems)} problem(s)")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
