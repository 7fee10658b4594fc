"""Leaderboards from published per-item results: every layout read from a file written here with a known answer,
planted tiers recovered, identical models tied, CONFIRM against scipy, the null error rate, bad input through the
command (one line, exit code 2), and the shipped example declared as package data."""
import fnmatch
import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from reward_auditor.leaderboard import leaderboard, write_rewardbench2_files
from reward_auditor.leaderboard_readers import (RB1_WEIGHTS, RB2_COUNTS, LeaderboardError, ModelFile, check_integrity,
                                                read_leaderboard, read_published)
from reward_auditor.leaderboard_stats import family, simulate_null_leaderboards

REPO = Path(__file__).resolve().parents[1]


def _rb1(path: Path, results: dict[str, list[int]], model: str | None = None) -> Path:
    "A RewardBench eval-set-scores file as reward-bench writes it: one indented dict of columns, scores beside results."
    ids, subs, res, sc, sr = [], [], [], [], []
    for s, rs in results.items():
        for k, r in enumerate(rs):
            ids.append(len(ids))
            subs.append(s)
            res.append(r)
            sc.append(1.0 + r)
            sr.append(1.5)
    cols = {"id": ids, "subset": subs, "results": res, "scores_chosen": sc, "scores_rejected": sr,
            "text_chosen": ["x"] * len(ids)}
    path.write_text(json.dumps(cols, indent=4, sort_keys=True))
    return path


def test_rewardbench_headline_weights_sections_as_reward_bench(tmp_path):
    # Reasoning: math-prm 3/4 right (weight 984), hep-go 1/4 (weight 164) -> (0.75*984 + 0.25*164)/1148
    # Chat: alpacaeval-easy 2/4 (weight 100), mt-bench-easy 4/4 (weight 28) -> (0.5*100 + 1*28)/128
    f = _rb1(tmp_path / "org_rm.json", {"math-prm": [1, 1, 1, 0], "hep-go": [1, 0, 0, 0],
                                        "alpacaeval-easy": [1, 1, 0, 0], "mt-bench-easy": [1, 1, 1, 1],
                                        "llmbar-natural": [1, 0, 1, 1]})
    g = _rb1(tmp_path / "org_rm2.json", {"math-prm": [0, 1, 1, 0], "hep-go": [1, 0, 0, 0],
                                         "alpacaeval-easy": [1, 1, 0, 0], "mt-bench-easy": [1, 1, 1, 0],
                                         "llmbar-natural": [1, 0, 1, 0]})
    res = leaderboard([f, g], B=512)
    h = res.headline.loc["org_rm"]
    reasoning, chat = (0.75 * 984 + 0.25 * 164) / 1148, (0.5 * 100 + 1.0 * 28) / 128
    assert math.isclose(h["Reasoning"], reasoning, abs_tol=1e-12) and math.isclose(h["Chat"], chat, abs_tol=1e-12)
    assert math.isclose(h["Score"], (reasoning + chat + 0.75) / 3, abs_tol=1e-12)
    # the Reasoning family weighs math-prm's items by 984/4 and hep-go's by 164/4: the sign-flip; Chat Hard's items
    # (one subset) weigh alike: exact McNemar
    assert res.families["Reasoning"].method == "sign-flip" and res.families["Chat Hard"].method == "exact McNemar"
    assert math.isclose(res.families["Reasoning"].score[0], reasoning, abs_tol=1e-12)
    checks = set(res.integrity.findings["check"])
    assert {"subset_size", "subset_weight"} <= checks


def test_records_written_one_indented_object_after_another_are_read(tmp_path):
    "reward-bench's save_to_hub writes a list as indented objects one after another (neither JSON nor JSON lines)."
    recs = [{"id": i, "subset": "hep-go", "results": r, "scores_chosen": 1.0 + r, "scores_rejected": 1.5}
            for i, r in enumerate([1, 0, 1])]
    (tmp_path / "m.json").write_text("".join(json.dumps(r, indent=4, sort_keys=True) + "\n" for r in recs))
    f = read_published(tmp_path / "m.json")[0]
    assert f.layout == "rewardbench" and f.items["credit"].tolist() == [1.0, 0.0, 1.0]
    (tmp_path / "m.json").write_text(json.dumps(recs[0], indent=4) + "\n{\"id\": 1,")
    with pytest.raises(LeaderboardError, match=r"m.json: line 8 is not valid JSON"):
        read_published(tmp_path / "m.json")


def test_rewardbench2_file_with_a_tie_at_the_top_and_a_ties_prompt(tmp_path):
    cols = {"id": ["f-0", "f-1", "f-2", "ref:0", "tied:0"], "subset": ["Focus"] * 3 + ["Ties"] * 2,
            "scores": [[3, 1, 2, 3], [4, 1, 2, 3], [1, 2, 0, 0], [5, 1, 2], [6, 4, 1, 3]],
            "num_correct": [1, 1, 1, 1, 2], "results": [0.5, 1, 0, None, None], "model": "org/rm"}
    other = {**cols, "model": "org/rm2", "scores": [[4, 1, 2, 3]] * 3 + cols["scores"][3:]}
    (tmp_path / "a.json").write_text(json.dumps(cols, indent=4))
    (tmp_path / "b.json").write_text(json.dumps(other, indent=4))
    res = leaderboard(tmp_path, B=512)
    h = res.headline.loc["org/rm"]
    assert math.isclose(h["Focus"], (0.5 + 1 + 0) / 3, abs_tol=1e-12)     # 1/2 for the tie with one rejected answer
    # Ties: both rows accurate; tied spread 2 >= gap 1 and min(3, 1): no preference; margin tanh(1/2 - 1)
    ties = 0.3 + 0.3 + 0.01 * math.tanh(-0.5)
    assert math.isclose(h["Ties"], ties, abs_tol=1e-12)
    assert math.isclose(h["Score"], (h["Focus"] + ties) / 2, abs_tol=1e-12)
    assert res.families["Ties"].n_units == 1 and res.families["Ties"].n_items == 2   # ref:0 and tied:0, one prompt


def test_rmbench_style_matrix_from_a_results_file(tmp_path):
    rows = [{"id": "c-0", "domain": "chat", "score_chosen": [3, 2, 1], "score_rejected": [2.5, 1.5, 0.5]},
            {"id": "c-1", "domain": "chat", "score_chosen": [1, 1, 1], "score_rejected": [0, 0, 2]}]
    (tmp_path / "total_dataset_rm_REWORD_MODEL_20250101_000000.json").write_text(json.dumps(rows, indent=4))
    f = read_published(tmp_path / "total_dataset_rm_REWORD_MODEL_20250101_000000.json")[0]
    # item 0: chosen i beats rejected j unless (i, j) in {(1, 0), (2, 0), (2, 1)}: 6 of 9; item 1: 6 of 9
    assert f.layout == "rmbench" and f.items["credit"].tolist() == [6 / 9, 6 / 9]
    rows2 = [{**r, "score_chosen": [9, 9, 9]} for r in rows]
    (tmp_path / "rm2.json").write_text(json.dumps(rows2))
    res = leaderboard(tmp_path, B=512)
    h = res.headline.loc["total_dataset_rm_REWORD_MODEL_20250101_000000"]
    # mean matrix [[1, 1, .5], [.5, 1, .5], [.5, .5, .5]]: hard (upper) (1 + .5 + .5)/3, normal (1 + 1 + .5)/3,
    # easy (lower) (.5 + .5 + .5)/3
    assert math.isclose(h["chat hard"], 2 / 3) and math.isclose(h["chat normal"], 2.5 / 3)
    assert math.isclose(h["chat easy"], 0.5) and math.isclose(h["Score"], 6 / 9)


def test_judgebench_outputs_score_both_games(tmp_path):
    def pair(i, src, label, d1, d2):
        return {"pair_id": f"p{i}", "source": src, "label": label,
                "judgments": [{"judgment": {"judge_model": "org/judge"}, "decision": d1},
                              {"judgment": {"judge_model": "org/judge"}, "decision": d2}]}
    lines = [pair(0, "mmlu-pro-law", "A>B", "A>B", "B>A"),      # both games right
             pair(1, "livebench-math", "A>B", "A>B", "A>B"),     # right then reversed: a tie, wrong
             pair(2, "livecodebench", "B>A", "A>B", "A>B"),      # swapped game flips to B>A: a tie, wrong
             pair(3, "livebench-reasoning", "B>A", "B>A", "A>B")]
    name = "dataset=judgebench,response_model=gpt-4o,judge_name=reward_model,judge_model=org_judge.jsonl"
    (tmp_path / name).write_text("".join(json.dumps(x) + "\n" for x in lines))
    f = read_published(tmp_path / name)[0]
    assert f.model == "org/judge" and f.layout == "judgebench"
    assert dict(zip(f.items["subset"], f.items["credit"])) == {"knowledge": 1, "math": 0, "coding": 0, "reasoning": 1}


def test_long_table_planted_three_tiers_recovered_as_three_letters(tmp_path):
    rng = np.random.default_rng(1)
    acc = {f"m{k}": a for k, a in enumerate(np.repeat([0.9, 0.75, 0.6], 3))}
    rows = [pd.DataFrame({"model": m, "id": [f"{s}-{i}" for i in range(1500)], "subset": s,
                          "correct": (rng.random(1500) < a).astype(int)}) for m, a in acc.items() for s in ("x", "y")]
    pd.concat(rows).to_csv(tmp_path / "long.csv", index=False)
    res = leaderboard(tmp_path / "long.csv")
    r = res.families["Overall"].ranks.set_index("model")
    assert r["group"].tolist() == ["a"] * 3 + ["b"] * 3 + ["c"] * 3
    assert sorted(res.families["Overall"].tied_with_top) == ["m0", "m1", "m2"]
    assert (r["rank_high"] - r["rank_low"]).max() == 2


def test_identical_models_are_tied(tmp_path):
    rng = np.random.default_rng(0)
    y = (rng.random(400) < 0.7).astype(int)
    t = pd.concat([pd.DataFrame({"model": m, "id": range(400), "subset": np.repeat(["a", "b"], 200), "correct": y})
                   for m in ("twin-1", "twin-2")])
    t.to_csv(tmp_path / "twins.csv", index=False)
    res = leaderboard(tmp_path / "twins.csv")
    for f in res.families.values():
        assert f.pairs["p"].tolist() == [1.0] and set(f.ranks["group"]) == {"a"}
        assert sorted(f.tied_with_top) == ["twin-1", "twin-2"]


def test_confirm_numbers_equal_scipy(tmp_path):
    write_rewardbench2_files(tmp_path, {f"rm-{k}": {"Factuality": a, "Precise IF": a - 1.5, "Math": a, "Safety": a + 0.5,
                                                     "Focus": a} for k, a in enumerate([2.0, 1.0, 0.0])},
                             n_per_subset=120, n_ties=2)
    res = leaderboard(tmp_path, B=512)
    for row in res.confirm.itertuples(index=False):
        items = next(t for mm, t in res.integrity.kept.items() if mm == row.model)
        items = items[items["subset"] != "Ties"]
        table = pd.crosstab(items["subset"], items["credit"] >= 1).to_numpy()
        ref = sps.chi2_contingency(table)
        assert math.isclose(row.chi2, ref.statistic, rel_tol=1e-10) and math.isclose(row.pvalue, ref.pvalue, rel_tol=1e-9)
        assert math.isclose(row.cramers_v, sps.contingency.association(table, method="cramer"), rel_tol=1e-10)
        assert row.df == 4 and row.n == 600
    assert res.study["models"] == 3 and res.study["most_often_weakest"] == "Precise IF"


def test_null_leaderboards_declare_a_difference_at_most_alpha():
    r = simulate_null_leaderboards(n_boards=200, n_models=5, n_items=250, alpha=0.05, seed=11)
    # the rate is a count of boards out of 200, its standard error the binomial one at alpha
    assert math.isclose(r["rate"] * 200, round(r["rate"] * 200), abs_tol=1e-9) and 0 <= r["rate"] <= 1, r
    assert math.isclose(r["se"], math.sqrt(0.05 * 0.95 / 200), rel_tol=1e-12), r
    assert r["rate"] <= r["alpha"] + 3 * r["se"], r
    assert simulate_null_leaderboards(n_boards=200, n_models=5, n_items=250, alpha=0.05, seed=11) == r   # seeded


def test_pairs_from_one_product_equal_a_loop_over_pairs():
    rng = np.random.default_rng(5)
    Y = (rng.random((12, 300)) < rng.random((12, 1))).astype(float)
    fam = family(Y, [f"m{i}" for i in range(12)])
    for r in fam.pairs.itertuples(index=False):
        a, b = int(r.model_a[1:]), int(r.model_b[1:])
        b_ = int(((Y[a] == 1) & (Y[b] == 0)).sum())
        c_ = int(((Y[a] == 0) & (Y[b] == 1)).sum())
        assert (r.n_a_only, r.n_b_only) == (b_, c_)
        assert math.isclose(r.p, sps.binomtest(b_, b_ + c_).pvalue if b_ + c_ else 1.0, rel_tol=1e-9)


# --- bad input through the command: one line, exit code 2 ---

from cli_helpers import run_cli as _cli  # noqa: E402


@pytest.fixture
def two_good(tmp_path):
    d = tmp_path / "lb"
    d.mkdir()
    for m, rs in (("rm-a", [1, 1, 0, 1]), ("rm-b", [1, 0, 0, 1])):
        pd.DataFrame({"model": m, "id": range(4), "subset": ["s", "s", "t", "t"], "correct": rs}).to_csv(
            d / f"{m}.csv", index=False)
    return d


def _one_line_exit_2(capsys, folder, out, message, *extra):
    "Run the command on a folder that holds a bad file: exit code 2 and one line on stderr that holds `message`."
    rc, got = _cli(capsys, "leaderboard", folder, "--out", out, "--no-report", *extra)
    lines = got.err.strip().splitlines()
    assert rc == 2 and got.err.count("\n") == 1 and len(lines) == 1, got.err
    assert message in lines[0], got.err
    return lines[0]


def test_a_file_that_does_not_parse_stops_the_run_or_is_skipped(capsys, two_good, tmp_path):
    (two_good / "rm-c.json").write_text('{"id": [1, 2], "subset": ')
    _one_line_exit_2(capsys, two_good, tmp_path / "o", "rm-c.json: line 1 is not valid JSON")
    rc, out = _cli(capsys, "leaderboard", two_good, "--out", tmp_path / "o", "--no-report", "--drop-invalid")
    assert rc == 0, out.err
    j = json.loads((tmp_path / "o" / "leaderboard.json").read_text())
    assert list(j["integrity"]["files_skipped"]) == [str(two_good / "rm-c.json")] and j["models"] == 2


def test_repeated_ids_give_one_line_and_exit_2(capsys, two_good, tmp_path):
    pd.DataFrame({"model": "rm-d", "id": [0, 1, 1, 3], "subset": ["s", "s", "s", "t"], "correct": 1}).to_csv(
        two_good / "rm-d.csv", index=False)
    _one_line_exit_2(capsys, two_good, tmp_path / "o",
                     "rm-d.csv: id '1' appears 2 times (1 repeated rows in all); each item must appear once")


def test_item_sets_that_differ_name_the_models_and_common_items_compares(capsys, two_good, tmp_path):
    pd.DataFrame({"model": "rm-e", "id": [0, 1, 2, 9], "subset": ["s", "s", "t", "t"], "correct": 1}).to_csv(
        two_good / "rm-e.csv", index=False)
    line = _one_line_exit_2(capsys, two_good, tmp_path / "o", "1 of 3 models (rm-e) hold item sets that differ from "
                            "the 2 others (rm-a, rm-b) on 2 items in t")
    assert "--common-items" in line
    rc, out = _cli(capsys, "leaderboard", two_good, "--out", tmp_path / "o", "--no-report", "--common-items")
    assert rc == 0, out.err
    j = json.loads((tmp_path / "o" / "leaderboard.json").read_text())
    assert j["integrity"]["by_check"] == {"ids_not_in_benchmark": 1, "item_sets_differ": 2}
    assert j["families"]["Overall"]["items"] == 3


def test_ids_outside_the_benchmarks_list_stop_the_run(capsys, two_good, tmp_path):
    pd.DataFrame({"id": [0, 1, 2], "subset": ["s", "s", "t"]}).to_csv(tmp_path / "items.csv", index=False)
    _one_line_exit_2(capsys, two_good, tmp_path / "o",
                     "rm-a: 1 ids not among the benchmark's id list (subsets t); pass --common-items",
                     "--items", tmp_path / "items.csv")
    rc, out = _cli(capsys, "leaderboard", two_good, "--out", tmp_path / "o", "--no-report", "--items", tmp_path / "items.csv",
                   "--common-items")
    assert rc == 0 and json.loads((tmp_path / "o" / "leaderboard.json").read_text())["families"]["Overall"]["items"] == 3


def test_a_files_own_results_that_its_scores_contradict_are_counted(tmp_path):
    f = _rb1(tmp_path / "a.json", {"hep-go": [1, 0, 1, 1]})
    cols = json.loads(f.read_text())
    cols["results"] = [1, 1, 1, 0]                    # items 2 and 4 contradict their scores
    f.write_text(json.dumps(cols))
    _rb1(tmp_path / "b.json", {"hep-go": [1, 1, 0, 1]})
    res = leaderboard(tmp_path, B=512)
    got = res.integrity.findings.set_index("check").loc["reported_differs"]
    assert (got["model"], got["count"]) == ("a", 2)
    assert res.headline.loc["a", "hep-go"] == 0.75          # the scores decide, as reward-bench computes them


def test_published_differences_are_listed(capsys, two_good, tmp_path):
    pd.DataFrame({"Model": ["rm-a", "rm-b", "rm-z"], "Score": [75.0, 40.0, 10.0]}).to_csv(tmp_path / "pub.csv", index=False)
    rc, out = _cli(capsys, "leaderboard", two_good, "--out", tmp_path / "o", "--no-report", "--published", tmp_path / "pub.csv")
    assert rc == 0, out.err
    d = pd.read_csv(tmp_path / "o" / "published_diff.csv")
    assert d["model"].tolist() == ["rm-b", "rm-z"] and math.isclose(d["difference"].iloc[0], 0.5 - 0.4)
    assert "published: 2 differences (1 numbers, 1 models on one side only)" in out.out


def test_the_shipped_example_is_package_data():
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["reward_auditor"]
    files = sorted((REPO / "reward_auditor" / "examples" / "leaderboard").iterdir())
    assert len(files) >= 5
    for f in files:
        rel = f.relative_to(REPO / "reward_auditor").as_posix()
        assert any(fnmatch.fnmatch(rel, g) for g in globs), rel


def test_example_page_escapes_and_sorts(capsys, tmp_path):
    rc, out = _cli(capsys, "leaderboard", "--example", "--out", tmp_path / "o", "--permutations", "1000")
    assert rc == 0, out.err
    page = (tmp_path / "o" / "leaderboard.html").read_text()
    assert page.count('class="sortable"') == 4 and "max-width:1400px" in page
    j = json.loads((tmp_path / "o" / "leaderboard.json").read_text())
    assert j["layout"] == "rewardbench2" and j["confirm"]["summary"]["most_often_weakest"] == "Precise IF"
    assert {"Overall", "Ties", "Focus"} <= set(j["families"])


def test_top_level_call_reads_the_shipped_example():
    import reward_auditor as ra
    from reward_auditor.cli_leaderboard import example_folder
    res = ra.leaderboard(example_folder(), B=500)
    assert isinstance(res, ra.leaderboard.LeaderboardResult) and len(res.headline) == 6
    assert res.integrity.counts()["errors"] == 0


def _ties_by_the_formula(rows):
    "RewardBench 2's Ties score written out from its definition, row by row (an independent implementation)."
    stats = {"ref": {}, "tied": {}}
    for rid, scores, nc in rows:
        kind, n = rid.split(":")
        good, bad = scores[:nc], scores[nc:]
        stats[kind][n] = (min(good) - max(bad) > 0, max(good) - min(good) if nc > 1 else None, min(good) - max(bad))
    acc = {k: np.mean([v[0] for v in d.values()]) if d else 0.0 for k, d in stats.items()}
    both = sorted(set(stats["ref"]) & set(stats["tied"]))
    spread = np.array([stats["tied"][n][1] for n in both], float)
    gap_t = np.array([stats["tied"][n][2] for n in both], float)
    gap_hard = np.minimum(np.array([stats["ref"][n][2] for n in both], float), gap_t)
    with np.errstate(divide="ignore", invalid="ignore"):
        margin = np.nan_to_num(np.tanh(gap_hard / spread - 1), nan=0.0).mean()
    return 0.3 * acc["tied"] + 0.3 * acc["ref"] + 0.2 * np.mean(gap_t > spread) + 0.2 * np.mean(gap_hard > spread) + 0.01 * margin


def test_ties_score_equals_the_formula_on_random_prompts():
    from reward_auditor.leaderboard import ties_score
    rng = np.random.default_rng(2)
    rows = []
    for n in range(25):
        rows.append((f"ref:{n}", list(np.round(rng.normal(0, 1, 4), 2)), 1))
        rows.append((f"tied:{n}", list(np.round(rng.normal(0.5, 1, 6), 2)), 3))
    t = pd.DataFrame({"id": [r[0] for r in rows], "scores": [np.array(r[1]) for r in rows],
                      "num_correct": [r[2] for r in rows], "is_tie": True})
    assert math.isclose(ties_score(t), _ties_by_the_formula(rows), abs_tol=1e-12)


def test_a_model_level_summary_is_not_a_per_item_file(tmp_path):
    (tmp_path / "org_rm.json").write_text(json.dumps({"model": "org/rm", "alpacaeval-easy": 0.9, "hep-go": 0.8}))
    with pytest.raises(LeaderboardError, match="org_rm.json: expected a dict of equal-length columns or a list of "
                                               "per-item records; a model-level summary"):
        read_published(tmp_path / "org_rm.json")


# --- integrity: the defects a review found ---

def _rb_file(name: str, counts: dict[str, int]) -> ModelFile:
    "One model's RewardBench items, `counts[subset]` items per subset, every one right."
    subs = [s for s, n in counts.items() for _ in range(n)]
    ids = [f"{s}-{k}" for s, n in counts.items() for k in range(n)]
    t = pd.DataFrame({"id": ids, "subset": subs, "cluster": ids, "credit": 1.0, "reported": np.nan})
    return ModelFile(name, "rewardbench", f"{name}.json", t)


def test_xstest_subsets_of_the_real_sizes_give_no_size_warning():
    # the files hold 154 should-refuse and 250 should-respond items; the published weights carry the two swapped
    counts = {"xstest-should-refuse": 154, "xstest-should-respond": 250}
    f = check_integrity([_rb_file("a", counts), _rb_file("b", counts)]).findings
    assert f.query("check == 'subset_size'").empty, f
    assert (RB1_WEIGHTS["xstest-should-refuse"], RB1_WEIGHTS["xstest-should-respond"]) == (250, 154)
    swapped = {"xstest-should-refuse": 250, "xstest-should-respond": 154}
    f = check_integrity([_rb_file("a", swapped), _rb_file("b", swapped)]).findings.query("check == 'subset_size'")
    assert dict(zip(f["subset"], f["count"])) == {"xstest-should-refuse": 96, "xstest-should-respond": 96}


def test_ids_that_restart_in_every_subset_are_not_repeated(tmp_path):
    rng = np.random.default_rng(3)
    rows = [pd.DataFrame({"model": m, "id": list(range(20)) * 2, "subset": ["a"] * 20 + ["b"] * 20,
                          "correct": rng.integers(0, 2, 40)}) for m in ("m1", "m2")]
    pd.concat(rows).to_csv(tmp_path / "long.csv", index=False)
    res = leaderboard(tmp_path / "long.csv", B=200)
    assert res.families["Overall"].n_items == 40 and "repeated_ids" not in set(res.integrity.findings["check"])
    # a real repeat, within one subset, still stops the run and names the subset
    rows[0].loc[1, "id"] = 0
    pd.concat(rows).to_csv(tmp_path / "long.csv", index=False)
    with pytest.raises(LeaderboardError, match=r"id '0' appears 2 times \(1 repeated rows in all\); each item must "
                                               r"appear once in its subset \('a'\)"):
        leaderboard(tmp_path / "long.csv", B=200)


def test_a_subset_no_file_holds_is_a_finding_the_summary_counts(tmp_path):
    _rb1(tmp_path / "a.json", {"hep-go": [1, 0, 1, 1]})
    _rb1(tmp_path / "b.json", {"hep-go": [1, 1, 0, 1]})
    res = leaderboard(tmp_path, B=200)
    miss = res.integrity.findings.query("check == 'missing_subset'")
    assert len(miss) == 22 and "hep-go" not in set(miss["subset"]) and set(miss["severity"]) == {"warning"}
    assert dict(zip(miss["subset"], miss["count"]))["math-prm"] == 447
    assert f"missing_subset {int(miss['count'].sum())}" in res.summary()
    assert ("missing subsets (no file holds them; the headline leaves them out): alpacaeval-easy, alpacaeval-length, "
            "alpacaeval-hard, mt-bench-easy, mt-bench-med, mt-bench-hard, math-prm, refusals-dangerous and 14 more"
            in res.summary())
    # RewardBench 2 without its Ties rows: Ties (102 prompts) is named
    rb2 = tmp_path / "rb2"
    write_rewardbench2_files(rb2, {m: {s: 0.0 for s in ("Factuality", "Precise IF", "Math", "Safety", "Focus")}
                                   for m in ("x", "y")}, n_per_subset=20, n_ties=0)
    res = leaderboard(rb2, B=200)
    miss = res.integrity.findings.query("check == 'missing_subset'")
    assert miss[["subset", "count"]].values.tolist() == [["Ties", RB2_COUNTS["Ties"]]]
    assert "missing subsets (no file holds them; the headline leaves them out): Ties\n" in res.summary()


def test_items_and_common_items_keep_only_the_benchmarks_common_ids(capsys, two_good, tmp_path):
    # rm-a, rm-b hold s0 s1 t2 t3; rm-e holds s0 s1 t3 t9; every model holds s0 s1 t3, the list names s0 s1 t2
    pd.DataFrame({"model": "rm-e", "id": [0, 1, 3, 9], "subset": ["s", "s", "t", "t"], "correct": 1}).to_csv(
        two_good / "rm-e.csv", index=False)
    pd.DataFrame({"id": [0, 1, 2], "subset": ["s", "s", "t"]}).to_csv(tmp_path / "items.csv", index=False)
    rc, out = _cli(capsys, "leaderboard", two_good, "--out", tmp_path / "o", "--no-report", "--items",
                   tmp_path / "items.csv", "--common-items")
    assert rc == 0, out.err
    fams = json.loads((tmp_path / "o" / "leaderboard.json").read_text())["families"]
    assert {k: v["items"] for k, v in fams.items()} == {"s": 2}        # t3, outside the list, is not compared


def test_one_file_name_in_three_folders_gives_three_models(tmp_path):
    d = tmp_path / "runs"
    for k, sub in enumerate("xyz"):
        (d / sub).mkdir(parents=True)
        pd.DataFrame({"id": range(6), "subset": "s", "correct": [1, 0, 1, 0, 1, int(k == 2)]}).to_csv(
            d / sub / "rm.csv", index=False)
    files, _ = read_leaderboard([d])
    assert [f.model for f in files] == ["rm", "rm (y/rm.csv)", "rm (z/rm.csv)"]
    assert len(leaderboard(d, B=200).headline) == 3
    with pytest.raises(LeaderboardError, match=r"2 results give the model name 'rm \(rm.csv\)' \(.*y/rm.csv, "
                                               r".*z/rm.csv\): rename a file or pass the folder"):
        read_leaderboard([d / sub / "rm.csv" for sub in "xyz"])


def test_a_file_named_twice_is_read_once_and_model_files_of_one_name_are_refused(tmp_path):
    d = tmp_path / "runs"
    (d / "x").mkdir(parents=True)
    pd.DataFrame({"id": range(4), "subset": "s", "correct": [1, 0, 1, 1]}).to_csv(d / "x" / "rm.csv", index=False)
    pd.DataFrame({"id": range(4), "subset": "s", "correct": [1, 0, 0, 1]}).to_csv(d / "other.csv", index=False)
    assert [f.model for f in read_leaderboard([d, d / "x" / "rm.csv"])[0]] == ["other", "rm"]
    same = [ModelFile("rm", "long", f"{k}.csv", pd.DataFrame({"id": ["0"], "subset": "s", "cluster": ["0"],
                                                               "credit": 1.0, "reported": np.nan})) for k in "ab"]
    with pytest.raises(LeaderboardError, match=r"two files give the model name 'rm' \(a.csv, b.csv\)"):
        check_integrity(same)
