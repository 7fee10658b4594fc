"Paired comparisons between reward models: validity (identical, McNemar, planted, null rate), determinism, CLI."
import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from reward_auditor import compare as C
from reward_auditor import multiplicity as M
from reward_auditor import stats as S
from reward_auditor.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_hand_worked_example_is_the_engine():
    d_a = np.array([.12, .08, -.02, .15, .05, .09, .11, -.01])
    d_b = np.array([.03, .02, .01, .04, -.03, .02, .05, .00])
    r = C.pair_signflip(np.column_stack([d_a, d_b]), [(0, 1)], B=1000)
    assert (r["p_greater"][0, 0], r["p_less"][0, 0]) == (4 / 256, 253 / 256)
    eng = S.signflip_test(d_a - d_b, alternative="greater")
    assert eng.pvalue == r["p_greater"][0, 0]


@pytest.mark.parametrize("integer", [False, True])
def test_shared_stream_equals_the_engine_per_test(integer):
    g = np.random.default_rng(11)
    Dm = g.normal(0.01, 0.2, (150, 4, 3))
    if integer:
        Dm = np.clip(np.round(Dm * 4), -1, 1)
    Dm[:5] = 0.0                                          # items no model moved
    pairs = C.model_pairs(range(4))
    mine = C.pair_signflip(Dm, pairs, B=1500, seed=3)
    for k, (a, b) in enumerate(pairs):
        for l in range(3):
            col = Dm[:, a, l] - Dm[:, b, l]
            up = S.signflip_tests(np.column_stack([col, -col, col]), B=1500, seed=3).pvalue
            assert mine["p_greater"][k, l] == up[0] and mine["p_less"][k, l] == up[1]


def test_identical_models_give_p_one_everywhere():
    run = C.simulate_run(("A", "B"), n=60, perturbations=("EF", "LC", "LE"), subsets=("chat", "code"), seed=4)
    twin = run.items[run.items["model"] == "A"].assign(model="A2")
    run.items = pd.concat([run.items, twin], ignore_index=True)
    cmp = C.compare(run, models=["A", "A2"])
    for col in ("p", "p_adjusted", "decision_p"):
        assert (cmp.robustness[col] == 1.0).all(), col
    assert (cmp.robustness["verdict"] == "NO_DIFFERENCE").all()
    assert (cmp.accuracy["p"] == 1.0).all() and (cmp.accuracy["diff"] == 0).all()
    assert (cmp.ranks["group"] == "a").all()


def test_mcnemar_is_scipy_binomtest():
    g = np.random.default_rng(0)
    b, c = g.integers(0, 60, 200), g.integers(0, 60, 200)
    got = C.mcnemar(b, c)
    for x, y, p in zip(b, c, got):
        want = sps.binomtest(int(x), int(x + y)).pvalue if x + y else 1.0
        assert math.isclose(p, want, rel_tol=1e-12, abs_tol=1e-15)
    assert math.isclose(C.mcnemar(30, 23), 0.410103, abs_tol=1e-6)


def test_planted_difference_found_in_the_right_direction_only():
    run = C.simulate_run(("A", "B", "C", "D"), n=150, perturbations=("EF", "LE", "LC"), subsets=("chat", "math"),
                         planted={("B", "LC", "math"): 1.5}, seed=5, B=2000)
    cmp = C.compare(run)
    r = cmp.robustness
    hit = r["verdict"] != "NO_DIFFERENCE"
    found = r[hit]
    assert len(found) > 0
    assert (found["perturbation"] == "LC").all() and (found["subset"] == "math").all()
    assert set(map(tuple, found[["model_a", "model_b"]].to_numpy())) <= {("A", "B"), ("B", "C"), ("B", "D")}
    for row in found.itertuples():                          # B degrades more: the other model is more robust
        assert row.verdict == ("A_MORE_ROBUST" if row.model_b == "B" else "B_MORE_ROBUST")
    assert any("more robust than B to LC on math" in f for f in cmp.findings())
    rr = cmp.robustness_ranks().set_index(["subset", "perturbation", "model"]).sort_index()
    assert rr.loc[("math", "LC", "B"), "rank"] == 4 and rr.loc[("math", "LC", "B"), "rank_high"] == 4
    assert (rr.loc[("chat", "LC"), "group"] == "a").all()


def test_null_any_verdict_rate_at_most_alpha():
    "500 families of three identical-in-distribution models (3 pairs x 2 perturbations, both tails, BH)."
    g = np.random.default_rng(7)
    pairs = C.model_pairs(range(3))
    reps, hits = 500, 0
    for rep in range(reps):
        d = g.normal(0, 1, (30, 1, 2)) + g.normal(0, 1, (30, 3, 2))
        r = C.pair_signflip(d, pairs, B=500, seed=rep)
        up, down = M.adjust_tails(r["p_greater"].ravel(), r["p_less"].ravel(), "bh", alpha=0.05)
        hits += bool(up.rejected.any() or down.rejected.any())
    se = math.sqrt(0.05 * 0.95 / reps)
    assert hits / reps <= 0.05 + 3 * se


def test_clusters_of_one_are_todays_test_and_clusters_flip_together():
    g = np.random.default_rng(2)
    Dm = g.normal(0, 0.3, (120, 3, 2))
    pairs = C.model_pairs(range(3))
    plain = C.pair_signflip(Dm, pairs, B=800, seed=1)
    ones = C.pair_signflip(Dm, pairs, B=800, seed=1, cluster_ids=np.arange(120))
    for k in ("p_greater", "p_less"):
        assert np.array_equal(plain[k], ones[k])
    ids = np.repeat(np.arange(40), 3)
    cl = C.pair_signflip(Dm, pairs, B=800, seed=1, cluster_ids=ids)
    sums = np.add.reduceat(Dm, np.arange(0, 120, 3), axis=0)
    for k, (a, b) in enumerate(pairs):
        col = sums[:, a, 0] - sums[:, b, 0]
        up = S.signflip_tests(np.column_stack([col, -col, col]), B=800, seed=1).pvalue
        assert cl["p_greater"][k, 0] == up[0] and cl["p_less"][k, 0] == up[1]
    assert (cl["n_units"] == 40).all()


def test_compact_letters_property():
    g = np.random.default_rng(3)
    for _ in range(100):
        k = int(g.integers(2, 8))
        up = np.triu(g.random((k, k)) < 0.5, 1)
        dif = up | up.T
        let = C.compact_letters(range(k), g.random(k), dif)
        for i in range(k):
            for j in range(i + 1, k):
                assert bool(set(let[i]) & set(let[j])) == (not dif[i, j])


_SCRIPT = """
import sys, hashlib
from reward_auditor import compare as C
run = C.simulate_run(("A", "B", "C"), n=80, perturbations=("EF", "LC"), subsets=("chat", "code"), seed=9,
                     planted={("C", "LC"): 1.0}, B=1500)
cmp = C.compare(run)
cmp.save(sys.argv[1])
print(hashlib.sha256(open(sys.argv[1] + "/comparison.parquet", "rb").read()).hexdigest())
print(hashlib.sha256(open(sys.argv[1] + "/comparison.json", "rb").read()).hexdigest())
print(sorted(m for m in ("torch", "reward_auditor.scorers", "reward_auditor.audit", "reward_auditor.families",
                         "reward_auditor.engines", "reward_auditor.report") if m in sys.modules))
"""


def test_bitwise_same_comparison_across_processes(tmp_path):
    outs = []
    for k, hashseed in enumerate(("0", "123")):
        env = {**os.environ, "PYTHONHASHSEED": hashseed, "PYTHONPATH": str(ROOT)}
        r = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path / f"c{k}")], env=env, capture_output=True,
                           text=True, check=True)
        outs.append(r.stdout)
    assert outs[0] == outs[1] and len(outs[0].splitlines()) == 3
    assert outs[0].splitlines()[2] == "[]"        # the statistics side: no scorer, audit, report or torch


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    "Two control scorers audited through the CLI (with the comparison in results.json); one more run per case."
    from reward_auditor.audit import audit
    from reward_auditor.data import load_sample
    tmp = tmp_path_factory.mktemp("compare")
    code = main(["audit", "--data", "sample", "--scorer", "length", "--scorer", "noise", "--perturbations", "EF,LE",
                 "--permutations", "300", "--out", str(tmp / "both"), "--no-report", "-q"])
    assert code == 0
    data = load_sample()
    audit(data, ["overlap"], ["EF", "LE"], permutations=300, out=tmp / "overlap", progress=False)
    audit(data, ["overlap"], ["EF", "LE"], permutations=300, seed=1, out=tmp / "seed1", progress=False)
    return tmp


def test_audit_with_two_models_adds_the_comparison(runs):
    summary = json.loads((runs / "both" / "results.json").read_text())
    comp = summary["comparison"]
    assert comp["settings"]["models"] == ["length", "noise"] and comp["settings"]["B"] == 300
    assert {r["model_a"] for r in comp["robustness"]} == {"length"}
    assert len(comp["ranks"]) == 2 * len(summary["models"]["length"])
    # the accuracy on the original pairs, recounted from items.parquet and tested with scipy's exact binomial test
    items = pd.read_parquet(runs / "both" / "items.parquet")
    orig = items[items["perturbation"] == "EF"].pivot_table(index=["subset", "id"], columns="model",
                                                              values="margin_before")
    acc = {r["subset"]: r for r in comp["accuracy"] if r["condition"] == "orig"}
    assert sorted(acc) == sorted(orig.index.unique("subset"))
    for subset, g in orig.groupby(level="subset"):
        right_a, right_b = g["length"] > 0, g["noise"] > 0
        a_only, b_only = int((right_a & ~right_b).sum()), int((right_b & ~right_a).sum())
        row = acc[subset]
        assert (row["n"], row["n_a_only"], row["n_b_only"]) == (len(g), a_only, b_only)
        assert math.isclose(row["acc_a"], right_a.mean()) and math.isclose(row["acc_b"], right_b.mean())
        want = sps.binomtest(a_only, a_only + b_only).pvalue if a_only + b_only else 1.0
        assert math.isclose(row["p"], want, rel_tol=1e-12)


def test_python_audit_writes_the_comparison_the_cli_writes(runs, tmp_path):
    "`audit(out=...)` from Python writes the same results.json as the command line, its comparison included."
    from reward_auditor.audit import audit
    from reward_auditor.data import load_sample
    audit(load_sample(), ["length", "noise"], ["EF", "LE"], permutations=300, out=tmp_path / "py", progress=False)
    py, cli = (json.loads((d / "results.json").read_text()) for d in (tmp_path / "py", runs / "both"))
    assert py["comparison"] == cli["comparison"] and py["calibration"] == cli["calibration"]


def test_a_comparison_that_fails_leaves_a_complete_run(runs, tmp_path, monkeypatch):
    """A comparison that cannot be made is recorded with its reason, as calibration's is; one interrupted (Ctrl-C
    while it runs) leaves the folder as it was: a complete run that loads."""
    import shutil
    from reward_auditor.audit_result import AuditResult
    folder = tmp_path / "both"
    shutil.copytree(runs / "both", folder)
    res = AuditResult.load(folder)

    def refuse(*a, **kw):
        raise C.CompareError("no item scored by every one of length, noise")
    monkeypatch.setattr(C, "compare", refuse)
    res.save(folder)
    assert json.loads((folder / "results.json").read_text())["comparison"] == {
        "error": "no item scored by every one of length, noise"}
    AuditResult.load(folder)

    def interrupt(*a, **kw):
        raise KeyboardInterrupt
    monkeypatch.setattr(C, "compare", interrupt)
    with pytest.raises(KeyboardInterrupt):
        res.save(folder)
    assert AuditResult.load(folder).table.equals(res.table)   # still the complete run saved before


def test_cli_compare_writes_three_files(runs, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", str(runs / "both"), str(runs / "overlap"), "--out", str(out), "-q"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["comparison.html", "comparison.json", "comparison.parquet"]
    cmp = C.Comparison.load(out)
    assert cmp.models == ["length", "noise", "overlap"]
    assert len(cmp.robustness) == 3 * 2 * len(cmp.settings["subsets"])
    assert "data:image/png;base64" in (out / "comparison.html").read_text()


def test_cli_compare_refuses_runs_that_differ(runs, tmp_path, capsys):
    code = main(["compare", str(runs / "both"), str(runs / "seed1"), "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "differ at item" in err and "of condition EF" in err
    code = main(["compare", str(runs / "overlap"), str(runs / "seed1"), "--out", str(tmp_path / "y")])
    err = capsys.readouterr().err
    assert code == 2 and ("model overlap is in both" in err or "differ at item" in err)


def test_cli_compare_refuses_a_model_in_two_runs(runs, tmp_path, capsys):
    code = main(["compare", str(runs / "both"), str(runs / "both"), "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and "model length is in both" in err


def test_compare_follows_the_runs_clusters():
    run = C.simulate_run(("A", "B"), n=60, perturbations=("EF",), seed=6, B=500)
    plain = C.compare(run)
    assert "n_clusters" not in plain.robustness
    orig = run.texts["perturbation"] == "orig"
    run.texts.loc[orig, "prompt"] = [f"p{i // 3}" for i in range(int(orig.sum()))]   # three pairs per prompt
    run.manifest["data"] = {"clusters": {"by": "prompt"}}      # where the audit records it
    clustered = C.compare(run)
    assert (clustered.robustness["n_clusters"] == 20).all() and (clustered.robustness["n"] == 60).all()
    run.manifest["data"] = {"clusters": {"by": "group_id"}}
    assert any("clustered its items by group_id" in w for w in C.compare(run).warnings)
    assert C.compare(run, clusters=None).warnings == []


@pytest.fixture(scope="module")
def clustered_run(tmp_path_factory):
    "Two control scorers audited with pairs four to a topic (group_by='topic'), saved; the data it was made from."
    from reward_auditor.audit import audit
    from reward_auditor.data import load_sample
    data = load_sample()
    data["topic"] = data["subset"] + "-" + (data.groupby("subset").cumcount() // 4).astype(str)
    out = tmp_path_factory.mktemp("clustered") / "run"
    res = audit(data, ["length", "noise"], ["EF", "LE"], permutations=300, group_by="topic", out=out, progress=False)
    return res, dict(zip(data["id"].astype(str), data["topic"])), out


def test_a_clustered_run_is_compared_and_calibrated_by_its_clusters_from_its_folder(clustered_run, tmp_path):
    from reward_auditor import calibration as ca
    res, topics, run = clustered_run
    saved = pd.read_parquet(run / "items.parquet")       # each pair's cluster code, the same on every row of an id
    assert saved.groupby("id")["cluster"].nunique().eq(1).all() and saved["cluster"].nunique() == 20
    assert res.manifest["data"]["clusters"]["by"] == "topic"
    # compare through the CLI on the folder = in memory with the topics given; pair by pair it differs
    assert main(["compare", str(run), "--out", str(tmp_path / "cmp"), "-q"]) == 0
    folder = C.Comparison.load(tmp_path / "cmp")
    given = C.compare(res, clusters=topics)
    pairs = C.compare(res, clusters=None)
    assert (given.robustness["n_clusters"] == 4).all()
    assert not any("clustered its items" in w for w in folder.warnings)   # the folder holds the clusters
    pd.testing.assert_frame_equal(folder.robustness, given.robustness, check_dtype=False)
    assert "n_clusters" not in pairs.robustness
    assert not np.allclose(pairs.robustness["p"], given.robustness["p"])
    # calibration through the CLI on the folder = in memory with the topics given; pair by pair it differs
    assert main(["calibration", str(run), "--n-boot", "100", "--out", str(tmp_path / "cal"), "--no-report", "-q"]) == 0
    cal = ca.CalibrationResult.load(tmp_path / "cal")
    cal_given = ca.calibration(res, clusters=topics, n_boot=100)
    cal_pairs = ca.calibration(res, clusters={}, n_boot=100)
    assert cal.settings["n_clusters"] == 20 and cal_pairs.settings["n_clusters"] == 80
    pd.testing.assert_frame_equal(cal.table, cal_given.table, check_dtype=False)
    assert not np.allclose(cal.table["ece_high"], cal_pairs.table["ece_high"], equal_nan=True)


def _newcombe10(a, b, c, d, z=1.959963984540054):
    "Newcombe (1998) method 10 for paired proportions, written from the paper's description, one table at a time."
    n = a + b + c + d

    def wilson(x):
        p = x / n
        root = math.sqrt(z * z + 4 * n * p * (1 - p))
        return (2 * n * p + z * z - z * root) / (2 * (n + z * z)), (2 * n * p + z * z + z * root) / (2 * (n + z * z))

    p1, p2 = (a + b) / n, (a + c) / n
    (l1, u1), (l2, u2) = wilson(a + b), wilson(a + c)
    e, f, g, h = a + b, c + d, a + c, b + d
    if 0 in (e, f, g, h):
        psi = 0.0
    else:
        A = a * d - b * c
        C = A - n / 2 if A > n / 2 else (0.0 if A >= 0 else A)
        psi = C / math.sqrt(e * f * g * h)
    dl, du = p1 - l1, u2 - p2
    el, eu = u1 - p1, p2 - l2
    delta = math.sqrt(max(dl * dl - 2 * psi * dl * du + du * du, 0.0))
    eps = math.sqrt(max(el * el - 2 * psi * el * eu + eu * eu, 0.0))
    return max(p1 - p2 - delta, -1.0), min(p1 - p2 + eps, 1.0)


@pytest.mark.parametrize("table, want", [((1, 0, 0, 1), (-0.573, 0.573)), ((59, 6, 16, 80), (-0.1186, -0.0046)),
                                         ((50, 12, 4, 34), (0.0009, 0.1570))])
def test_newcombe_is_the_published_method_10(table, want):
    # the published values (Newcombe's book code, biostatUZH): the plain phi gave (0, 0), (-0.1174, -0.0059) and
    # (0.0034, 0.1546) on these tables
    lo, hi = C.newcombe_ci(*table)
    assert math.isclose(float(lo), want[0], abs_tol=5e-4) and math.isclose(float(hi), want[1], abs_tol=5e-4)
    assert (float(lo), float(hi)) == pytest.approx(_newcombe10(*table), abs=1e-12)


def test_newcombe_matches_an_independent_transcription_on_many_tables():
    g = np.random.default_rng(11)
    tabs = np.vstack([g.multinomial(int(n), g.dirichlet(np.ones(4)), size=1) for n in g.integers(1, 200, 300)]
                     + [np.array(t) for t in [(0, 0, 0, 5), (5, 0, 0, 0), (0, 3, 0, 0), (2, 0, 3, 0), (0, 1, 1, 0)]])
    lo, hi = C.newcombe_ci(*tabs.T)
    want = np.array([_newcombe10(*map(int, t)) for t in tabs])
    np.testing.assert_allclose(np.c_[lo, hi], want, atol=1e-12)


def test_newcombe_exact_coverage_is_near_nominal():
    from reward_auditor.paired import exact_coverage
    cov = [exact_coverage(n, p) for n, p in [(30, (0.45, 0.2, 0.05, 0.3)), (40, (0.25, 0.25, 0.25, 0.25))]]
    assert all(0.94 <= c <= 0.97 for c in cov), cov


@pytest.mark.parametrize("b, c, want", [(3, 3, 0.84375), (1, 1, 0.75)])
def test_mcnemar_mid_p_at_equal_counts(b, c, want):
    assert C.mcnemar(b, c, mid_p=True) == pytest.approx(want, abs=1e-12)


def test_mcnemar_mid_p_is_the_enumerated_mid_p():
    for n in range(1, 25):
        pmf = sps.binom.pmf(np.arange(n + 1), n, 0.5)
        for b in range(n + 1):
            less = pmf < pmf[b] * (1 - 1e-9)
            same = np.abs(pmf - pmf[b]) <= pmf[b] * 1e-9
            assert C.mcnemar(b, n - b, mid_p=True) == pytest.approx(pmf[less].sum() + 0.5 * pmf[same].sum(), abs=1e-12)


def _edited_run(src, dst, **settings):
    "A copy of a saved run folder whose manifest records other settings (the frames are untouched)."
    import shutil
    shutil.copytree(src, dst)
    m = json.loads((dst / "manifest.json").read_text())
    m["settings"].update(settings)
    (dst / "manifest.json").write_text(json.dumps(m))
    return dst


@pytest.mark.parametrize("field, value", [("permutations", 1e9), ("seed", "abc"), ("alpha", 3), ("scale", "log")])
def test_cli_compare_and_calibration_refuse_a_run_folders_bad_settings(runs, tmp_path, capsys, field, value):
    run = _edited_run(runs / "both", tmp_path / "run", **{field: value})
    for argv in (["compare", str(run), "--out", str(tmp_path / "cmp")], ["calibration", str(run), "--n-boot", "10"]):
        if argv[0] == "calibration" and field in ("alpha", "scale"):
            continue                          # calibration reads the run's permutations and seed only
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2, (argv[0], err)
        assert err.count("\n") == 1 and f"settings.{field}" in err and "manifest.json" in err, err


def test_report_refuses_a_run_folders_bad_settings_before_rendering(runs, tmp_path, capsys):
    run = _edited_run(runs / "both", tmp_path / "run", seed="abc")
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "settings.seed" in err and not (tmp_path / "rep" / "report.html").exists()


def test_cli_compare_refuses_runs_whose_subsets_differ(runs, tmp_path, capsys):
    # the same items and texts, audited once per subset and once split by turns: every test would have n = 0
    assert main(["audit", "--data", "sample", "--scorer", "overlap", "--perturbations", "EF,LE", "--permutations",
                 "300", "--by", "turns", "--out", str(tmp_path / "turns"), "--no-report", "-q"]) == 0
    capsys.readouterr()
    code = main(["compare", str(runs / "both"), str(tmp_path / "turns"), "--out", str(tmp_path / "cmp")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "subset" in err and "--by turns" in err, err
    assert not (tmp_path / "cmp" / "comparison.json").exists()


def test_a_comparison_with_no_tested_item_is_refused_and_an_empty_subset_left_out():
    run = C.simulate_run(("A", "B"), n=40, perturbations=("EF",), subsets=("chat", "math"), seed=2, B=200)
    gone = (run.items["model"] == "B") & (run.items["subset"] == "math")
    partial = C.SimulatedRun(run.items[~gone].reset_index(drop=True), run.table, run.manifest, run.texts)
    cmp = C.compare(partial)
    assert set(cmp.robustness["subset"]) == set(cmp.accuracy["subset"]) == {"chat"} and (cmp.accuracy["n"] > 0).all()
    assert any("subset math: no item was scored by every compared model" in w for w in cmp.warnings)
    items = run.items.copy()
    items.loc[items["model"] == "B", "subset"] = items.loc[items["model"] == "B", "subset"] + " · multi-turn"
    with pytest.raises(C.CompareError, match="nothing to compare"):
        C.compare(C.SimulatedRun(items, run.table, run.manifest, run.texts))



def test_a_subset_with_one_common_item_is_left_out_and_one_perturbation_below_two_is_no_test():
    """Two items are the least a test needs: a subset where model B scored one item is left out with its own
    warning, and in a kept subset a perturbation with one usable item has NaN p-values outside the BH family."""
    run = C.simulate_run(("A", "B"), n=40, perturbations=("EF", "LE"), subsets=("chat", "math"), seed=2, B=200)
    it = run.items
    math_b = (it["model"] == "B") & (it["subset"] == "math")
    one_math = math_b & (it["id"] != "math-0")                     # B keeps one math item
    le_chat = (it["model"] == "B") & (it["subset"] == "chat") & (it["perturbation"] == "LE") & (it["id"] != "chat-0")
    items = it.copy()
    items.loc[le_chat, "margin_after"] = np.nan                    # B's LE scores lost but one
    cmp = C.compare(C.SimulatedRun(items[~one_math].reset_index(drop=True), run.table, run.manifest, run.texts))
    assert set(cmp.robustness["subset"]) == {"chat"}
    assert any("subset math: only one item was scored by every compared model" in w for w in cmp.warnings)
    le = cmp.robustness[cmp.robustness["perturbation"] == "LE"]
    assert (le["n"] == 1).all() and le["p"].isna().all() and le["p_adjusted"].isna().all()
    ef = cmp.robustness[cmp.robustness["perturbation"] == "EF"]
    assert np.array_equal(ef["p_adjusted"], ef["p"])   # LE out of the family: EF alone, left as it is

def test_comparison_carries_truncation_counts_and_warns():
    run = C.simulate_run(("A", "B"), n=30, perturbations=("EF",), seed=4, B=200)
    def cells(cut, answer):                # what the audit records: subset (and 'all') -> condition -> counts
        return {s: {c: {"truncated": cut, "answer_cut": answer, "history_cut": 0, "n": 30} for c in ("orig", "EF")}
                for s in ("chat", "all")}
    run.manifest["truncation"] = {"A": {"max_length": 16, "texts_over_limit": 60, "texts": 60, "cells": cells(30, 5)},
                                  "B": {"max_length": 512, "texts_over_limit": 0, "texts": 60, "cells": cells(0, 0)}}
    cmp = C.compare(run)
    assert cmp.settings["truncation"]["A"]["cells"]["chat"]["orig"]["truncated"] == 30
    warn = [w for w in cmp.warnings if w.startswith("A: ")]
    assert len(warn) == 1 and "30 of 30 original pairs truncated" in warn[0] and "every original pair was cut" in warn[0]
    assert not any(w.startswith("B: ") for w in cmp.warnings)
    assert (cmp.robustness["n_truncated_a"] == 30).all() and (cmp.robustness["n_truncated_b"] == 0).all()
    acc = cmp.accuracy.set_index("condition")
    assert acc.loc["orig", "n_truncated_a"] == 30 and acc.loc["orig", "n_truncated_b"] == 0
    assert json.loads(json.dumps(cmp.to_json(), allow_nan=False))["settings"]["truncation"]["B"]["texts"] == 60


def test_names_moved_to_their_own_chapters_keep_their_old_import_paths():
    for module, names in (("compare", {"mcnemar", "newcombe_ci", "rank_intervals", "compact_letters", "compare"}),
                          ("calibration", {"CalibrationError", "score_file_pairs", "read_run", "calibration_inputs",
                                           "SCORE_FIELDS", "calibration"})):
        ns: dict = {}
        exec(f"from reward_auditor.{module} import *", ns)
        assert names <= set(ns), (module, names - set(ns))
    from reward_auditor import calibration, calibration_inputs, paired
    assert C.newcombe_ci is paired.newcombe_ci and calibration.CalibrationError is calibration_inputs.CalibrationError
