"""Every kind of page the package writes, opened in headless Chromium at 1,400 px: nothing wider than the page (a wide
table scrolls in a box of its own), no broken image, the findings on the first screen. One audit feeds every page."""
import numpy as np
import pandas as pd
import pytest

from browser import WIDTH, chromium, probe

pytestmark = pytest.mark.skipif(chromium() is None, reason="no Chromium here (Debian: apt-get install chromium), so "
                                                           "no page can be looked at in a browser")
FIRST_SCREEN = 1000  # px: the findings must start above this


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    "One small audit of the sample, rendered as every report kind; the diagnostics' pages from simulated inputs."
    from reward_auditor import calibration, heterogeneity as het, meta, protocol
    from reward_auditor.audit import AuditResult, audit
    from reward_auditor.data import load_sample
    from reward_auditor.report import (comparison_of, comparison_page, render, render_diagnostic, report_session,
                                       save_diagnostic)
    root = tmp_path_factory.mktemp("pages")
    run = root / "run"
    audit(load_sample(), ["overlap", "length", "noise"], ["EF", "LE", "SP"], permutations=200, out=run,
          progress=False)
    cmp = comparison_of(AuditResult.load(run))
    cmp.save(root / "compare", html=comparison_page(cmp))  # as `reward-auditor compare` writes it
    rng = np.random.default_rng(1)
    sim = protocol.simulate_policy_samples(20, 4, seed=0)
    diagnostics = {
        "heterogeneity": het.heterogeneity_many(AuditResult.load(run)),
        "protocol": protocol.protocol_report(sim.samples, sim.rewards, n_boot=100),
        "meta": meta.meta_report(meta.simulate_audit_tables(n_models=5, seed=0)[0]),
        "calibration": calibration.calibration(pd.DataFrame({
            "model": "a", "subset": np.repeat(["x", "y"], 50), "margin": rng.normal(0.5, 2, 100),
            "len_chosen": rng.integers(10, 99, 100), "len_rejected": rng.integers(10, 99, 100)}), n_boot=50),
    }
    out = {"compare.html": root / "compare" / "comparison.html"}
    with report_session():
        out["model report"] = render(run).html
        out["subset report"] = render(run, by="subset").html
        out["runs compared"] = render(run, compare=[run], out=root / "runs").html
        for kind, res in diagnostics.items():
            out[f"{kind} page"] = render_diagnostic(save_diagnostic(res, root / kind)).html
    out["PRM step report"] = prm_step_run(root / "prm") / "report.html"  # written by `audit` itself
    out["verifier page"] = verifier_page(root / "verifier")
    seq = root / "seq"   # a sequential run's report: its header carries the rounds, the stops and the calls saved
    audit(load_sample(), ["length", "noise"], ["EF", "LE", "SP"], sequential=True, out=seq, progress=False)
    out["sequential report"] = render(seq).html
    return out


def verifier_page(root):
    "A certified metamorphic audit of two answer verifiers on a few golds, saved and rendered as the CLI does."
    from reward_auditor.report import render_diagnostic, save_diagnostic
    from reward_auditor.verifiers import verifier_audit
    res = verifier_audit(["string", "numeric-sympy"], golds=["42", r"\frac{3}{5}", "2.5"], workers=1)
    return render_diagnostic(save_diagnostic(res, root)).html


def prm_step_run(root):
    "A step-only PRM audit (ProcessBench layout: no problem with both a correct and a wrong solution), as the CLI runs it."
    import contextlib
    import io
    import json
    from tiny_models import tiny_prm
    from reward_auditor.cli import main
    rows = [{"id": f"p{k}", "problem": f"What is {k} + {k}?", "steps": [f"{k} + {k} = {2 * k + (k % 2)}.", "Done."],
             "label": 0 if k % 2 else -1} for k in range(8)]
    root.mkdir(parents=True, exist_ok=True)
    (root / "pb.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["audit", "--data", str(root / "pb.jsonl"), "--model", str(tiny_prm(root / "prm-model")),
                   "--kind", "prm", "--perturbations", "SN", "--out", str(root / "run"), "-q"])
    assert rc == 0, err.getvalue()
    return root / "run"


KINDS = ["model report", "subset report", "runs compared", "compare.html", "heterogeneity page", "protocol page", "meta page",
         "calibration page", "PRM step report", "verifier page", "sequential report"]


@pytest.mark.parametrize("kind", KINDS)
def test_page_fits_shows_its_images_and_opens_on_the_findings(pages, kind):
    assert pages[kind].exists(), f"{kind}: no page written"
    seen = probe(pages[kind])
    assert seen["width"] == WIDTH
    assert seen["overflow"] == [] and seen["scroll_width"] <= WIDTH, f"{kind}: wider than the page: {seen['overflow']}"
    assert seen["broken"] == [], f"{kind}: broken images {seen['broken']}"
    assert seen["findings_top"] is not None, f"{kind}: no findings block (id='findings')"
    assert seen["findings_top"] < FIRST_SCREEN, f"{kind}: the findings start at {seen['findings_top']:.0f} px"
    assert seen["anchors"] == [], f"{kind}: links to no section: {seen['anchors']}"


def test_the_probe_sees_a_page_too_wide_a_broken_image_and_late_findings(tmp_path):
    "The checks can fail: a 2,000 px table outside any scroll box, an image that does not decode, findings at 1,500 px."
    page = tmp_path / "bad.html"
    page.write_text("<html><body><table><tr><td style='min-width:2000px'>wide</td></tr></table>"
                    "<img src='data:image/png;base64,AAAA'><div style='height:1500px'></div><h2 id='findings'>F</h2>"
                    "<a href='#nowhere'>x</a></body></html>")
    seen = probe(page)
    assert seen["scroll_width"] > WIDTH and any(o.startswith("TABLE") for o in seen["overflow"])
    assert len(seen["broken"]) == 1 and seen["findings_top"] > FIRST_SCREEN and seen["anchors"] == ["nowhere"]


def test_report_renders_a_step_only_prm_run_again(pages, tmp_path):
    "`reward-auditor report` on a step-only PRM run renders its step report (it said 'run audit first')."
    import contextlib
    import io
    from reward_auditor.cli import main
    run = pages["PRM step report"].parent
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        assert main(["report", str(run), "--out", str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text()
    assert "First-error F1" in page and "Process reward models: step judgements" in page and "SN" in page


def test_model_report_leaves_out_what_it_does_not_have(pages):
    "No PRM section (not even its heading) in a run without a PRM, and no Python `None` in a table cell."
    page = pages["model report"].read_text()
    assert "Process reward models" not in page and "No process reward model" not in page
    assert ">None<" not in page
    assert "Process reward models: step judgements" in pages["PRM step report"].read_text()
