"""Meta-analyses: AUROC and permutation p-values against brute force, table loading, the CLI entry point."""
import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from reward_auditor.meta import (
    GROUPS, MetaError, MetaReport, accuracy_vs_suitability, auroc, benchmark_meta, combine_tables,
    correlation_clustering, downstream_correlation, group_risk_correlation, meta_cli, meta_report,
    simulate_audit_tables)


@pytest.fixture(scope="module")
def sim():
    return simulate_audit_tables(n_models=8, seed=3)


def test_auroc_equals_pairwise_count():
    rng = np.random.default_rng(0)
    for _ in range(30):
        s = rng.integers(0, 5, 15).astype(float)              # many ties
        y = rng.random(15) < 0.4
        if y.all() or not y.any():
            continue
        brute = np.mean([1.0 if a > b else 0.5 if a == b else 0.0 for a in s[y] for b in s[~y]])
        assert auroc(s, y) == pytest.approx(brute, abs=1e-12)
    assert np.isnan(auroc([0.1, 0.2], [False, False]))


def test_permutation_p_exact_small_n(sim):
    tables, win = sim
    t = combine_tables(tables)
    keep = list(win.index[:5])
    res = downstream_correlation(t[t["model"].isin(keep)], win, method="pearson")
    x, y = res.frame["risk"].to_numpy(), res.frame["metric"].to_numpy()
    obs = abs(np.corrcoef(x, y)[0, 1])
    brute = np.mean([abs(np.corrcoef(x, y[list(p)])[0, 1]) >= obs - 1e-12 for p in itertools.permutations(range(5))])
    assert res.pvalue_permutation == pytest.approx(brute, abs=1e-12)
    assert res.statistic == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)
    assert res.settings["permutations"] == "exact"


def test_downstream_monte_carlo_seeded():
    tables, win = simulate_audit_tables(n_models=10, seed=4)
    a = downstream_correlation(tables["RM-Bench"], win, n_perm=999, seed=1)
    b = downstream_correlation(tables["RM-Bench"], win, n_perm=999, seed=1)
    assert a.pvalue_permutation == b.pvalue_permutation
    assert a.statistic < 0 and a.n == 10 and a.settings["permutations"].startswith("999 permutations")
    assert 1 / 1000 <= a.pvalue_permutation <= 1


def test_downstream_inputs_and_errors(sim, tmp_path):
    tables, win = sim
    frame = win.rename_axis("model").reset_index()
    r1 = downstream_correlation(tables["RM-Bench"], frame)
    r2 = downstream_correlation(tables["RM-Bench"], win.to_dict())
    assert r1.statistic == r2.statistic
    with pytest.raises(MetaError, match="need ≥ 3"):
        downstream_correlation(tables["RM-Bench"], {"other": 1.0})
    with pytest.raises(MetaError, match="metric="):
        downstream_correlation(tables["RM-Bench"], frame.assign(extra=1.0))


def test_benchmark_meta_by_subset(sim):
    tables, _ = sim
    bm = benchmark_meta(tables, by=("benchmark", "subset"))
    t = combine_tables(tables)
    g = t[(t.benchmark == "RewardBench") & (t.subset == "math") & (t.perturbation == "CN")]
    row = bm[(bm.benchmark == "RewardBench") & (bm.subset == "math") & (bm.perturbation == "CN")].iloc[0]
    assert row["models"] == 8 and row["share_significant"] == pytest.approx(g["significant"].mean())
    assert row["sum_effect"] == pytest.approx(g["effect_size"].sum())


def test_clustering_matches_scipy(sim):
    from scipy.cluster.hierarchy import leaves_list, linkage
    from scipy.spatial.distance import squareform
    tables, _ = sim
    cc = correlation_clustering(tables, method="pearson")
    wide = combine_tables(tables).pivot_table(index=["benchmark", "model", "subset"], columns="perturbation",
                                              values="effect_size")
    np.testing.assert_allclose(cc.matrix.to_numpy(), wide.corr().to_numpy(), atol=1e-12)
    d = 1 - wide.corr().to_numpy()
    np.fill_diagonal(d, 0)
    Z = linkage(squareform(d, checks=False), method="average")
    assert cc.order == [wide.columns[i] for i in leaves_list(Z)]
    assert cc.clusters.groupby(pd.Series(GROUPS)).nunique().tolist() == [1, 1]
    with pytest.raises(MetaError, match="≥ 3 units"):
        correlation_clustering(combine_tables(tables).query("model == 'rm00' and subset == 'chat' and benchmark != 'RM-Bench'"))


def test_group_and_accuracy_analyses(sim):
    tables, _ = sim
    gr = group_risk_correlation(tables, value="effect_size")
    assert len(gr) == 3 * 4 and gr["models"].eq(8).all()
    acc = accuracy_vs_suitability(tables)
    assert set(acc["perturbation"]) == set(GROUPS) | {"all"}
    t = combine_tables(tables)
    d = t[t.subset == "safety"]
    row = acc[(acc.subset == "safety") & (acc.perturbation == "all")].iloc[0]
    assert row["auroc"] == pytest.approx(auroc(-d["accuracy_change"], d["significant"]))
    with pytest.raises(MetaError, match="no group"):
        group_risk_correlation(t.assign(perturbation="XX", group=None).drop_duplicates(
            ["benchmark", "model", "subset"]))


def test_audit_folder_and_cli(sim, tmp_path):
    tables, win = sim
    for name, tb in tables.items():
        folder = tmp_path / name.replace(" ", "_")
        folder.mkdir()
        tb.to_parquet(folder / "results.parquet")
    win.rename_axis("model").reset_index().to_json(tmp_path / "win.jsonl", orient="records", lines=True)
    rep = meta_cli(sorted(p for p in tmp_path.iterdir() if p.is_dir()), downstream=tmp_path / "win.jsonl")
    assert isinstance(rep, MetaReport)
    assert set(rep.data["benchmark"]) == {"RM-Bench", "RewardBench", "RewardBench_2"}
    assert rep.downstream is not None and rep.downstream.n == 8
    assert "share of models significant" in rep.summary() and "<table" in rep._repr_html_()
    assert rep.to_frame().shape[0] == 3 * 10
    (tmp_path / "empty").mkdir()
    with pytest.raises(MetaError, match="no results.parquet"):
        meta_cli([tmp_path / "empty"])
    with pytest.raises(MetaError, match="no audit tables"):
        meta_cli([])


def test_tables_without_accuracy_or_rs_still_report():
    rows = [{"model": f"m{i}", "subset": "chat", "perturbation": p, "effect": 0.1 * i + (p == "ST") * 0.05,
             "significant": i > 1} for i in range(5) for p in ["EF", "ST", "CN"]]
    rep = meta_report(pd.DataFrame(rows))
    assert rep.accuracy is None and any("accuracy analysis skipped" in n for n in rep.notes)
    t = rep.data.set_index(["model", "perturbation"])
    assert t.loc[("m4", "ST"), "r_S"] == pytest.approx(0.45) and t.loc[("m1", "ST"), "r_S"] == 0.0   # effect × significant
    assert rep.correlation is not None


def test_on_a_real_audit_of_the_shipped_sample(tmp_path):
    "Cross-module: an audit of the shipped sample with control scorers feeds the meta-analyses and heterogeneity."
    from reward_auditor.audit import audit
    from reward_auditor.data import load_sample
    from reward_auditor.heterogeneity import heterogeneity_cli
    res = audit(load_sample(), ["length", "overlap", "noise"], perturbations=["EF", "CN", "LE"], permutations=199,
                seed=0, progress=False)
    res.save(tmp_path / "run")
    rep = meta_cli([tmp_path / "run"])
    assert set(rep.data["model"]) == {m for m in res.table["model"]}
    assert rep.table["tests"].sum() == len(res.table)
    het = heterogeneity_cli([tmp_path / "run"])
    assert set(het.results) == set(res.table["model"])
    n_items = res.items.drop_duplicates(["model", "id"]).groupby("model").size()
    assert all(het.results[m].n == n_items[m] for m in het.results)


def test_report_save_load_round_trip(sim, tmp_path):
    "Every frame, the clustering and the downstream result survive save/load; optional parts stay None."
    tables, win = sim
    rep = meta_report(tables, win)
    out = rep.save(tmp_path / "meta")
    assert not list(out.rglob("*.pkl"))
    back = MetaReport.load(out)
    for name in ("data", "table", "group_risk", "accuracy"):
        pd.testing.assert_frame_equal(getattr(back, name), getattr(rep, name))
    c, bc = rep.correlation, back.correlation
    pd.testing.assert_frame_equal(bc.matrix, c.matrix)
    pd.testing.assert_series_equal(bc.clusters, c.clusters)
    np.testing.assert_array_equal(bc.linkage, c.linkage)
    assert (bc.order, bc.n_units, bc.method, bc.value) == (c.order, c.n_units, c.method, c.value)
    pd.testing.assert_frame_equal(back.downstream.frame, rep.downstream.frame)
    assert back.downstream.summary() == rep.downstream.summary() and back.downstream.settings == rep.downstream.settings
    assert back.summary() == rep.summary() and back.to_markdown() == rep.to_markdown() and back.notes == rep.notes
    rows = [{"model": f"m{i}", "subset": "chat", "perturbation": p, "effect": 0.1 * i, "significant": i > 1}
            for i in range(3) for p in ["EF", "ST"]]
    sparse = meta_report(pd.DataFrame(rows))
    back = MetaReport.load(sparse.save(tmp_path / "sparse"))
    assert back.accuracy is None and back.downstream is None and back.notes == sparse.notes
    assert back.summary() == sparse.summary()
    with pytest.raises(MetaError, match="report.json is missing"):
        MetaReport.load(tmp_path)
