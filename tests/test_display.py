"A result shows itself in Jupyter as before, while the result type keeps no drawing code and `audit` never imports `plots`."
import html
import re
import subprocess
import sys

import pytest


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def _unstyled_ids(markup: str) -> str:
    "pandas gives every Styler a random id (`T_1a2b3`); the rest of the markup is what is compared."
    return re.sub(r"T_[0-9a-f]{5}", "T_id", markup)


@pytest.fixture(scope="module")
def res():
    import reward_auditor as ra
    return ra.audit(ra.load_preferences("sample"), [ra.load_scorer("noise"), ra.load_scorer("overlap")],
                    ["EF", "CN"], seed=0, permutations=100, progress=False)


def test_the_view_is_the_one_drawn_before(res):
    "The header, the findings and the shaded risk table, byte for byte as `audit` drew them when it imported `plots`."
    from reward_auditor.audit import findings_html
    from reward_auditor.plots import risk_styler
    # the old recipe (audit.py's `_audit_repr_html`, before the view moved to the plots floor)
    head = html.escape(repr(res).splitlines()[0])
    table = risk_styler(res.table, rows=("model", "subset")).to_html()
    old = (f"<div><p><b>{head}</b></p><p><b>Findings</b></p>{findings_html(res.table)}"
           f"<p><b>Risk table</b> (effect size; stars: adjusted p)</p>{table}</div>")
    new = res._repr_html_()
    assert new.count("<table") == 2 and "T_" in new
    assert _unstyled_ids(new) == _unstyled_ids(old)


def test_jupyter_shows_the_view(res):
    "IPython's HTML formatter (what a notebook calls) finds the view on the result."
    IPython = pytest.importorskip("IPython")
    from IPython.core.formatters import HTMLFormatter
    shown = HTMLFormatter()(res)
    assert shown is not None and _unstyled_ids(shown) == _unstyled_ids(res._repr_html_())


def test_plots_loads_only_when_a_result_is_shown():
    out = _run("import sys, reward_auditor as ra\n"
               "import reward_auditor.audit as A\n"
               "before = 'reward_auditor.plots' in sys.modules\n"
               "res = ra.audit(ra.load_preferences('sample'), [ra.load_scorer('noise')], ['EF'], seed=0, "
               "permutations=100, progress=False)\n"
               "after_run = 'reward_auditor.plots' in sys.modules\n"
               "view = res._repr_html_()\n"
               "print(before, after_run, 'reward_auditor.plots' in sys.modules, A.AuditResult._repr_html_ is ra._audit_view)")
    assert out == "False False True True"
