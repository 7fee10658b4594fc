"""Papermill rendering of the three report templates to self-contained HTML, with hostile dataset text."""
import html
import re

import pytest

from reward_auditor.audit import audit
from reward_auditor.data import load_sample
from reward_auditor.report import ReportError, render

PAYLOAD = '<script>alert("xss")</script><img src=x onerror=alert(1)>'


def hostile_sample():
    "The sample data with markup in every prompt and chosen answer and in one subset's name."
    d = load_sample()
    d["prompt"] = d["prompt"] + " " + PAYLOAD
    d["chosen"] = d["chosen"] + " <b>bold?</b>"
    d["subset"] = d["subset"].replace({"chat": "<i>chat</i>"})
    return d


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    "A small run whose prompts, answers, a subset name and an id all carry markup."
    d = hostile_sample()
    d.loc[0, "id"] = "<u>id-0</u>"
    out = tmp_path_factory.mktemp("runs") / "hostile"
    audit(d, ["overlap", "length", "noise"], ["EF", "IU", "LE"], permutations=500, out=out, progress=False)
    return out


def distinct_words(prompt, response):
    "A toy reward model: the number of distinct words of the answer."
    return float(len(set(str(response).split())))


def answer_length(prompt, response):
    "Another toy reward model: the answer's length in characters, scaled."
    return len(str(response)) / 50


@pytest.fixture(scope="module")
def mixed_dir(tmp_path_factory):
    "Two toy reward models beside two control scorers, on the same hostile data."
    d = hostile_sample()
    out = tmp_path_factory.mktemp("runs") / "mixed"
    audit(d, [distinct_words, answer_length, "overlap", "noise"], ["EF", "LE"], permutations=300, out=out,
          progress=False)
    return out


def _assert_safe(page: str, texts_shown: bool = True):
    assert "<script>alert" not in page and "<img src=x" not in page and "<i>chat</i>" not in page
    assert "<u>id-0</u>" not in page and "<b>bold?</b>" not in page
    assert "&lt;i&gt;chat&lt;/i&gt;" in page
    if texts_shown:
        assert "&lt;script&gt;alert" in page and "&lt;b&gt;bold?&lt;/b&gt;" in page
    # self-contained: images embedded, no script or stylesheet fetched from elsewhere
    assert not re.search(r"<script[^>]+src=", page)
    assert not re.search(r"<link[^>]+href=\"http", page)


def test_model_report(run_dir):
    rep = render(run_dir)
    page = rep.html.read_text()
    _assert_safe(page)
    assert rep.notebook.exists()
    assert page.count("data:image/png;base64") >= 7  # radar, 3 distributions, accuracy vs suitability, 3 subset plots
    assert "Cramér" in page and "Wilson" in page
    for heading in ["Findings", "Risk table", "Radar charts", "largest degradation",
                    "Accuracy change versus suitability", "What the control scorers show", "Subset heterogeneity",
                    "Calibration and length confounds", "Length confounds", "Manifest"]:
        assert heading in page, heading
    assert "&lt;u&gt;id-0&lt;/u&gt;" in page or "id-0" not in page  # ids shown only escaped
    assert "(length control" in page and "(lexical-overlap control)" in page and "(hash-noise control)" in page
    assert "def " not in page and "import reward_auditor" not in page  # code cells are excluded
    _assert_one_subset_order(_risk_rows(page), 5)  # the sample's five subsets, one order for every model
    # the accuracy column with the comparison's significance letters beside it (three scorers: compare ran)
    risk = page[page.index("<table", page.index("Risk table")):]
    risk = risk[:risk.index("</table>")]
    assert ">accuracy<" in risk and len(re.findall(r">\d\.\d{3} [a-z]+<", risk)) == 15, risk[:2000]
    assert "overflow-x: auto" in page  # a wide risk table scrolls inside the page instead of being cut


def test_subset_and_compare_reports(run_dir, mixed_dir, tmp_path):
    sub = render(mixed_dir, by="subset")
    page = sub.html.read_text()
    _assert_safe(page, texts_shown=False)
    assert "share of models significant" in page or "share_significant" in page
    # the controls are kept apart: the summary counts the two reward models, each subset has a table of its own for them
    assert "Counted over 2 reward models (distinct_words, answer_length); the control scorers (overlap, noise)" in page
    assert page.count("control scorers (reference points)") == 5 and page.count(">reward models<") == 5
    for table in re.findall(r"<table.*?</table>", page, flags=re.S):
        if "reward models</caption>" in table:
            assert "overlap" not in table and "noise" not in table and re.search(r">\d\.\d{3} [a-z]+<", table)
    cmp = render(run_dir, compare=[run_dir], out=tmp_path / "cmp")
    page = cmp.html.read_text()
    _assert_safe(page, texts_shown=False)
    assert "Meta-evaluation" in page and "data:image/png;base64" in page
    assert len(re.findall(r"<h1[ >]", page)) == 1, re.findall(r"<h1[^>]*>[^<]*", page)  # one title
    assert cmp.html.parent == tmp_path / "cmp"


def test_report_errors(tmp_path):
    with pytest.raises(ReportError, match="results.parquet"):
        render(tmp_path)
    with pytest.raises(ReportError, match="grouping"):
        (tmp_path / "results.parquet").write_text("")
        render(tmp_path, by="model-and-more")


def test_findings_show_proportions_with_three_decimals(run_dir):
    from reward_auditor.audit import AuditResult
    from reward_auditor.report import findings, findings_html
    t = AuditResult.load(run_dir).table
    markup = findings_html(t)
    accs = findings(t)["accuracy"]
    assert all(f">{a:.3f}</td>" in markup for a in accs)
    assert not re.search(r">0\.\d{6}<", markup)


def test_diagnostics_round_trip_without_pickle(tmp_path):
    "save_diagnostic/load_diagnostic for the frame-based diagnostics; folders that hold none get a clear error."
    import numpy as np
    import pandas as pd
    from reward_auditor import calibration, heterogeneity as het, meta, protocol
    from reward_auditor.report import load_diagnostic, save_diagnostic
    rng = np.random.default_rng(1)
    sim = protocol.simulate_policy_samples(20, 4, seed=0)
    results = {
        "heterogeneity": het.heterogeneity_many(pd.DataFrame({
            "model": np.repeat(["a", "b"], 100), "subset": np.tile(np.repeat(["x", "y"], 50), 2),
            "correct": rng.random(200) < 0.7})),
        "protocol": protocol.protocol_report(sim.samples, sim.rewards, n_boot=100),
        "meta": meta.meta_report(meta.simulate_audit_tables(n_models=5, seed=0)[0]),
        "calibration": calibration.calibration(pd.DataFrame({
            "model": "a", "subset": np.repeat(["x", "y"], 50), "margin": rng.normal(0.5, 2, 100),
            "len_chosen": rng.integers(10, 99, 100), "len_rejected": rng.integers(10, 99, 100)}), n_boot=50),
    }
    for kind, res in results.items():
        out = save_diagnostic(res, tmp_path / kind)
        assert not list(out.rglob("*.pkl")) and (out / "table.csv").exists()
        back = load_diagnostic(out)
        assert type(back) is type(res)
        pd.testing.assert_frame_equal(back.to_frame(), res.to_frame())
        assert back.summary() == res.summary()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="diagnostic.json is missing"):
        load_diagnostic(tmp_path / "empty")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "diagnostic.json").write_text('{"kind": "meta"}')
    with pytest.raises(ReportError, match="report.json"):
        load_diagnostic(tmp_path / "bad")


def _risk_rows(page: str) -> list[str]:
    "The risk table's row labels (the innermost index level) in the order the rendered HTML shows them."
    start = page.index("Risk table")
    table = page[page.index("<table", start):page.index("</table>", start)]
    return [html.unescape(x) for x in re.findall(r'<th[^>]*class="row_heading level1[^"]*"[^>]*>([^<]*)</th>', table)]


def _assert_one_subset_order(labels: list[str], n_subsets: int):
    base = [lab.removesuffix(" (below chance)") for lab in labels]
    orders = [base[i:i + n_subsets] for i in range(0, len(base), n_subsets)]
    assert len(orders) > 1 and all(o == orders[0] for o in orders), orders


def test_risk_table_keeps_one_subset_order_with_below_chance_markers():
    "A below-chance label must not move a subset's row: every model's rows come in the data's subset order."
    import pandas as pd
    from reward_auditor import plots
    from reward_auditor.report import risk_display
    subs, rows = ["chat", "math", "code", "safety"], []
    for m, low in [("A", "math"), ("B", None), ("C", "chat")]:
        for s in subs:
            rows.append(dict(model=m, subset=s, perturbation="EF", group="style", effect_size=0.1, significant=False,
                             stars="ns", accuracy_before=0.4 if s == low else 0.8))
    page = "<h2>Risk table</h2>" + plots.risk_styler(risk_display(pd.DataFrame(rows)), rows=("model", "subset")).to_html()
    labels = _risk_rows(page)
    assert "math (below chance)" in labels and "chat (below chance)" in labels
    _assert_one_subset_order(labels, len(subs))


def test_delta_strip_tells_unchanged_and_zero_change_apart():
    "Unchanged items get a colour of their own (not the zero line's grey), and a changed item with ΔM = 0 a third one."
    import matplotlib.colors as mc
    import pandas as pd
    from reward_auditor import plots
    items = pd.DataFrame({"model": "A", "subset": "s", "perturbation": "EF", "changed": [True] * 4 + [False] * 2,
                          "delta": [0.1, -0.2, 0.0, 0.0, 0.0, 0.0]})
    ax = plots.delta_distributions(items, "A").axes[0]
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["changed", "changed, ΔM = 0", "unchanged"]
    colours = [mc.to_rgb(h.get_markerfacecolor()) for h in legend.legend_handles]
    assert len(set(colours)) == 3
    zero = [ln for ln in ax.lines if ln.get_linestyle() == "--"][0]
    unchanged = colours[2]
    assert max(unchanged) - min(unchanged) > 0.3 and unchanged != mc.to_rgb(zero.get_color())  # a colour, not grey
    assert zero.get_zorder() < min(c.get_zorder() for c in ax.collections)  # the points sit on top of the line


def test_comparison_charts_each_carry_a_legend():
    import numpy as np
    import pandas as pd
    from reward_auditor import plots
    sums = {run: pd.DataFrame({"share_significant": [0.5, 0.2], "sum_effect": [1.0, 0.3]}, index=["EF", "LC"])
            for run in ("run-1", "run-2")}
    fig = plots.meta_evaluation(sums)
    assert [[t.get_text() for t in ax.get_legend().get_texts()] for ax in fig.axes] == [["run-1", "run-2"]] * 2
    fig = plots.rank_intervals(pd.DataFrame({"model": ["a", "b"], "accuracy": [0.9, 0.7], "rank": [1, 2],
                                             "rank_low": [1, 1], "rank_high": [2, 2], "group": ["a", "a"]}))
    assert fig.axes[0].get_legend() is not None
    assert np.isfinite(fig.axes[0].get_xlim()).all()


def test_compare_report_sums_effect_sizes_over_like_rows_only(run_dir, mixed_dir, tmp_path):
    # run_dir: overlap, length, noise; mixed_dir: two toy reward models, overlap and noise, on the same data
    cmp = render(run_dir, compare=[mixed_dir], out=tmp_path / "cmp")
    page = cmp.html.read_text()
    assert "Caution" in page and "are left out of the sums" in page
    assert "hostile: " in page and "mixed: " in page       # each run's rows outside the shared ones are named
    import pandas as pd
    from reward_auditor.meta import like_with_like
    a, b = (pd.read_parquet(d / "results.parquet") for d in (run_dir, mixed_dir))
    cut, notes = like_with_like({"a": a, "b": b})
    assert set(cut["a"]["model"]) == set(cut["b"]["model"]) == {"overlap", "noise"}
    assert len(cut["a"][cut["a"]["perturbation"].isin(["EF", "LE"])]) == len(cut["b"])   # per perturbation: alike
    assert len(notes) == 2
    cut, notes = like_with_like({"a": a[a["model"] == "length"], "b": b[b["model"] == "overlap"]})
    assert all(len(t) == 0 for t in cut.values()) and "share no scorer" in notes[0]


def test_demo_picture_keeps_the_star_of_a_significant_improvement():
    "docs/demo_report.png draws a blue IMPROVES cell with the stars of its own adjusted p, as the report's risk table."
    import sys
    from pathlib import Path
    import pandas as pd
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs"))
    import demo_report
    table = pd.DataFrame({"model": "rm", "subset": ["s", "s"], "perturbation": ["EF", "LE"],
                          "group": ["controlled", "stylized"], "effect_size": [0.9, -0.8],
                          "significant": [True, False], "stars": ["**", "ns"], "verdict": ["UNSUITABLE", "IMPROVES"],
                          "p_adjusted": [0.004, 0.9], "p_less_adjusted": [0.9, 0.03], "accuracy_before": 0.8})
    eff, sig, text = demo_report.risk_cells(type("Result", (), {"table": table})())
    cols = [p for _, p in eff.columns]
    assert text[0][cols.index("LE")] == "-0.80*" and bool(sig.iat[0, cols.index("LE")])
    assert text[0][cols.index("EF")] == "+0.90**"


def _template_with(last: str, tmp_path, monkeypatch):
    "A template of three cells (parameters, a print, then `last`) in place of the shipped ones; its name."
    import json
    from reward_auditor import report
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"name": "python3", "language": "python",
                                                                          "display_name": "Python 3"}},
          "cells": [{"cell_type": "code", "id": "p1", "metadata": {"tags": ["parameters"]}, "execution_count": None,
                     "outputs": [], "source": "x = 0"},
                    {"cell_type": "code", "id": "c1", "metadata": {}, "execution_count": None, "outputs": [],
                     "source": "print('before', x + 1)"},
                    {"cell_type": "code", "id": "c2", "metadata": {}, "execution_count": None, "outputs": [],
                     "source": last}]}
    tpl = tmp_path / "tpl.ipynb"
    tpl.write_text(json.dumps(nb))
    monkeypatch.setattr(report, "template_path", lambda name: tpl)
    return "tpl"


def test_failed_cell_keeps_the_executed_notebook(tmp_path, monkeypatch):
    """The notebook is written once, at the end, not after every cell: a cell that fails must still leave it, with
    the cells before it executed and the error in place, where the message says."""
    import json
    from reward_auditor import report
    name = _template_with("raise ValueError('boom in the template')", tmp_path, monkeypatch)
    out = tmp_path / "out"
    with pytest.raises(ReportError, match=r"ValueError: boom in the template \(executed notebook kept at .*report\.ipynb\)"):
        report.execute_template(name, {"x": 41}, out, "report")
    kept = json.loads((out / "report.ipynb").read_text())
    text = json.dumps(kept)
    assert "before 42" in text and "boom in the template" in text
    assert not (out / "report.html").exists()


def test_a_template_past_its_timeout_keeps_what_it_executed(tmp_path, monkeypatch):
    """A cell past the render's timeout (or a kernel that dies) is not a failing cell: papermill writes nothing for
    it, so the report's own engine keeps the cells executed so far, and the error says where."""
    from reward_auditor import report
    name = _template_with("import time; time.sleep(60)", tmp_path, monkeypatch)
    out = tmp_path / "out"
    with pytest.raises(ReportError, match=r"(?s)stopped on .*TimeoutError.*kept at .*report\.ipynb"):
        report.execute_template(name, {"x": 41}, out, "report", timeout=3)
    assert "before 42" in (out / "report.ipynb").read_text()
    assert not (out / "report.html").exists()