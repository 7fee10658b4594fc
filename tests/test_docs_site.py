"""The documentation site (`python scripts/docs.py`): built from the notebooks and guide pages, opened in headless
Chromium page by page, every internal link and anchor followed, and every module's `Docs:` line on a real page."""
import ast
import importlib.util
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed "
                                    "(Debian: apt-get install chromium)")


def _docs_module():
    spec = importlib.util.spec_from_file_location("site_docs", REPO / "scripts" / "docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


docs = _docs_module()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    docs.build(out)
    return out


def _docs_lines() -> dict[str, str]:
    "module → the URL its docstring's `Docs:` line names (every exported module has one)."
    out = {}
    for py in sorted((REPO / "reward_auditor").glob("*.py")):
        if py.name in ("__init__.py", "_modidx.py"):
            continue
        doc = ast.get_docstring(ast.parse(py.read_text(encoding="utf-8"))) or ""
        last = doc.strip().splitlines()[-1] if doc.strip() else ""
        out[py.stem] = last.removeprefix("Docs:").strip() if last.startswith("Docs:") else ""
    return out


def test_every_module_docs_line_names_a_page_of_the_site(site):
    base = docs.documentation_root()
    lines = _docs_lines()
    assert len(lines) > 30
    for module, url in lines.items():
        assert url, f"reward_auditor/{module}.py has no `Docs:` line"
        twin = site / docs.docs_url_to_page(url, base)
        assert twin.is_file(), f"{module}: {url} → {twin} does not exist"
        page = twin.with_suffix("")  # audit.html.md → audit.html, the rendered page
        assert page.suffix == ".html" and page.is_file(), page
        assert f"#| default_exp {module}" not in page.read_text(encoding="utf-8")  # directives are not shown
        assert "def " in twin.read_text(encoding="utf-8") or "class " in twin.read_text(encoding="utf-8"), twin


def test_every_notebook_and_guide_page_has_a_page(site):
    for src in docs.sources():
        assert (site / docs.page_name(src)).is_file(), src
    assert (site / "index.html").is_file() and (site / "tutorials" / "walkthrough.html").is_file()
    assert docs.page_name(REPO / "nbs" / "08b_audit.ipynb") == "audit.html"  # nbdev's rule: prefix dropped
    assert docs.page_name(REPO / "nbs" / "02da_calibration_inputs.ipynb") == "calibration_inputs.html"


def test_a_chapter_page_describes_every_parameter_of_its_functions(site):
    "Like nbdev's show_doc: the audit page's card for `audit` has a row for each parameter, from its docments."
    import inspect

    from reward_auditor.audit import audit
    page = (site / "audit.html").read_text(encoding="utf-8")
    card = page[page.index('<div class="api" id="audit">'):]
    card = card[:card.index("</table>")]
    missing = [p for p in inspect.signature(audit).parameters if f"<tr><td><code>{p}</code></td>" not in card]
    assert not missing, missing


def test_no_two_sources_share_a_page():
    "A guide page named like a module (`docs/guide/03_data.md` → data.html) would hide the module's chapter."
    pages = {}
    for src in docs.sources():
        other = pages.setdefault(docs.page_name(src), src)
        assert other == src, f"{src} and {other} both become {docs.page_name(src)}"


def test_links_between_sources_become_links_between_pages():
    readme = REPO / "README.md"
    assert docs.rewrite_link("nbs/tutorials/walkthrough.ipynb#3-score", readme) == "tutorials/walkthrough.html#3-score"
    assert docs.rewrite_link("CONTRIBUTING.md", readme) == "contributing.html"
    assert docs.rewrite_link("no/such/file.md", readme) == "no/such/file.md"  # left for the browser check to name
    assert docs.rewrite_link("../08b_audit.ipynb", REPO / "nbs" / "tutorials" / "walkthrough.ipynb") == \
        "../audit.html"
    assert docs.rewrite_link("LICENSE", readme) == docs.GITHUB + "LICENSE"  # not a page: the file on GitHub
    assert docs.rewrite_link("https://example.org/x", readme) == "https://example.org/x"


@needs_chromium
def test_every_page_renders_in_chromium_and_every_internal_link_resolves(site):
    problems = docs.check(site, CHROMIUM)
    assert problems == [], "\n".join(problems)


@needs_chromium
def test_the_browser_check_sees_a_broken_page(site, tmp_path):
    "The check is not vacuous: a broken link, a missing anchor, a missing image and a script error are each named."
    small = tmp_path / "site"
    small.mkdir()
    shutil.copy(site / "site.css", small / "site.css")
    nav, text = '<nav class="side"></nav>', "<p>" + "words " * 60 + "</p>"
    good = docs.page_html("good", f'<h1 id="good">Good</h1>{text}', nav, "good.html", [])
    bad = docs.page_html("bad", f'<h1>Bad</h1>{text}<a href="nowhere.html">a</a> <a href="good.html#no-such-anchor">'
                         'b</a> <a href="good.html#good">c</a><img src="missing.png">'
                         '<script>throw new Error("boom")</script>', nav, "bad.html", [])
    for name, html in [("good.html", good), ("bad.html", bad)]:
        (small / name).write_text(html, encoding="utf-8")
        (small / (name + ".md")).write_text("x", encoding="utf-8")
    problems = docs.check(small, CHROMIUM)
    text = "\n".join(problems)
    assert all(p.startswith("bad.html:") for p in problems) and len(problems) >= 4, text
    assert "broken link" in text and "nowhere.html" in text, text
    assert "missing anchor" in text and "no-such-anchor" in text, text
    assert "missing.png" in text and "boom" in text, text
