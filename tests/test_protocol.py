"""Pre-RL protocol: exact best-of-n against enumeration, McNemar/Wilson against statsmodels, files and CLI entry."""
import json
from itertools import combinations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from conftest import shared_file
from reward_auditor.protocol import (
    ProtocolError, ProtocolReport, best_of_n, best_of_n_curve, domain_accuracy, long_rewards, mcnemar_test,
    pair_counts, protocol_cli, protocol_report, reward_variance, score_samples, simulate_policy_samples, style_flips)
from reward_auditor.data import rmbench_style_matrix


def brute_best_of_n(gold, score, n):
    "Average over every n-subset of the gold of its top-scored member (ties: mean gold of the tied top)."
    vals = []
    for sub in combinations(range(len(gold)), n):
        top = max(score[i] for i in sub)
        vals.append(np.mean([gold[i] for i in sub if score[i] == top]))
    return float(np.mean(vals))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), min_size=4, max_size=9), st.data())
def test_best_of_n_equals_enumeration(pairs, data):
    gold = np.array([p[0] for p in pairs], float)
    score = np.array([p[1] for p in pairs], float)
    n = data.draw(st.integers(1, len(pairs)))
    assert best_of_n(gold, score, n) == pytest.approx(brute_best_of_n(gold, score, n), abs=1e-12)


def test_best_of_n_edges():
    g = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    assert best_of_n(g, g, 5) == 4.0 and best_of_n(g, -g, 5) == 0.0 and best_of_n(g, g, 1) == 2.0
    assert best_of_n(g, np.zeros(5), 3) == pytest.approx(2.0)        # all tied: random pick
    with pytest.raises(ProtocolError, match="1 ≤ n ≤ K"):
        best_of_n(g, g, 6)


def test_curve_flags_and_baselines():
    frame = pd.DataFrame({"prompt_id": "p", "gold": [1.0, 4, 2, 3], "reward": [0.1, 0.2, 0.9, 0.4]})
    c = best_of_n_curve(frame)
    assert c["n"].tolist() == [1, 2, 4]
    assert c["random"].iloc[0] == pytest.approx(2.5) and c["oracle"].iloc[-1] == 4.0
    assert (np.diff(c["rm"]) < 0).any()
    with pytest.raises(ProtocolError, match="outside"):
        best_of_n_curve(frame, ns=[8])


@pytest.mark.parametrize("b,c", [(0, 0), (0, 1), (3, 9), (12, 12), (24, 0), (13, 12), (40, 22), (7, 30), (100, 80)])
def test_mcnemar_matches_statsmodels(b, c):
    from statsmodels.stats.contingency_tables import mcnemar
    mine = mcnemar_test(b, c)
    if b + c == 0:
        assert mine.pvalue == 1.0
        return
    ref = mcnemar([[10, b], [c, 10]], exact=b + c < 25, correction=True)
    assert mine.pvalue == pytest.approx(ref.pvalue, abs=1e-12)
    assert mine.statistic == pytest.approx(ref.statistic, abs=1e-12)
    assert mine.method == ("exact" if b + c < 25 else "chi2")


def test_pair_counts_against_brute_force():
    rng = np.random.default_rng(3)
    rows = []
    for p in range(15):
        K = int(rng.integers(2, 7))
        rows.append(pd.DataFrame({"model": "rm", "prompt_id": f"p{p}", "domain": "d", "k": range(K),
                                  "gold": rng.integers(0, 3, K).astype(float),
                                  "reward": rng.integers(0, 4, K).astype(float)}))
    frame = pd.concat(rows, ignore_index=True)
    pc = pair_counts(frame).set_index("prompt_id")
    for p, g in frame.groupby("prompt_id"):
        gold, rew = g["gold"].to_numpy(), g["reward"].to_numpy()
        strict = correct = ties = 0
        for i, j in combinations(range(len(g)), 2):
            if gold[i] == gold[j]:
                ties += 1
                continue
            strict += 1
            correct += 1.0 if (gold[i] - gold[j]) * (rew[i] - rew[j]) > 0 else 0.5 if rew[i] == rew[j] else 0.0
        assert (pc.loc[p, "pairs"], pc.loc[p, "correct"], pc.loc[p, "gold_ties"]) == (strict, correct, ties)


def test_domain_wilson_matches_statsmodels():
    from statsmodels.stats.proportion import proportion_confint
    counts = pd.DataFrame({"prompt_id": list("abcd"), "domain": ["x", "x", "y", "y"], "pairs": [10, 6, 5, 3],
                           "correct": [9.0, 5, 1, 0]})
    d = domain_accuracy(counts).set_index("domain")
    np.testing.assert_allclose([d.loc["x", "lo"], d.loc["x", "hi"]], proportion_confint(14, 16, method="wilson"), atol=1e-12)
    np.testing.assert_allclose([d.loc["y", "lo"], d.loc["y", "hi"]], proportion_confint(1, 8, method="wilson"), atol=1e-12)


def test_variance_is_scale_free_and_counts_zero_prompts():
    sim = simulate_policy_samples(30, 5, seed=2)
    lr = long_rewards(sim.samples, sim.rewards)
    f = lr[lr["model"] == "spread"]
    a = reward_variance(f)
    b = reward_variance(f.assign(reward=7.0 * f["reward"] - 3.0))
    assert a == pytest.approx(b)
    flat = f.assign(reward=np.where(f["prompt_id"] == f["prompt_id"].iloc[0], 1.0, f["reward"]))
    assert reward_variance(flat)["zero_var_share"] == pytest.approx(1 / 30)


def test_report_is_deterministic_and_ranks_rms():
    sim = simulate_policy_samples(60, 6, seed=4)
    r1 = protocol_report(sim.samples, sim.rewards, styled=sim.styled, n_boot=300, seed=1)
    r2 = protocol_report(sim.samples, sim.rewards, styled=sim.styled, n_boot=300, seed=1)
    pd.testing.assert_frame_equal(r1.table, r2.table)
    t = r1.table.set_index("model")
    assert t.loc["sharp-but-flat", "low_var_share"] > 0.9 and t.loc["spread", "low_var_share"] < 0.2
    assert t.loc["stylish", "flip_rate"] > t.loc["sharp-but-flat", "flip_rate"]
    assert "combined" in r1.summary() and r1.to_markdown().startswith("**Pre-RL protocol") and "<table" in r1._repr_html_()


def test_cli_from_files(tmp_path):
    sim = simulate_policy_samples(40, 4, seed=5)
    sim.samples.merge(sim.rewards[["prompt_id", "k", "spread"]]).to_csv(tmp_path / "samples.csv", index=False)
    sim.rewards[["prompt_id", "k", "stylish"]].rename(columns={"stylish": "reward"}).to_parquet(tmp_path / "rm-x.parquet")
    sim.styled[["prompt_id", "k", "stylish"]].rename(columns={"stylish": "rm-x"}).to_json(
        tmp_path / "styled.jsonl", orient="records", lines=True)
    rep = protocol_cli(tmp_path / "samples.csv", [tmp_path / "rm-x.parquet"], styled_paths=[tmp_path / "styled.jsonl"],
                       n_boot=100)
    assert isinstance(rep, ProtocolReport)
    assert set(rep.results) == {"rm-x"}            # the samples' own reward column is ignored when files are given
    assert rep.results["rm-x"].flips is not None
    only_samples = protocol_cli(tmp_path / "samples.csv", n_boot=100)
    assert set(only_samples.results) == {"spread"}
    with pytest.raises(ProtocolError, match="no such file"):
        protocol_cli(tmp_path / "nope.csv")


def test_input_errors():
    sim = simulate_policy_samples(10, 4)
    with pytest.raises(ProtocolError, match="prompt_id"):
        long_rewards(sim.samples.drop(columns="prompt_id"), sim.rewards)
    with pytest.raises(ProtocolError, match="repeat"):
        long_rewards(pd.concat([sim.samples, sim.samples.iloc[:1]]), None)
    with pytest.raises(ProtocolError, match="values for"):
        long_rewards(sim.samples, {"rm": [1.0, 2.0]})
    single = sim.samples.groupby("prompt_id").head(1)
    with pytest.raises(ProtocolError, match="single response"):
        protocol_report(single, {"rm": np.arange(len(single), dtype=float)})


def test_style_flips_counts():
    before = pd.DataFrame({"prompt_id": "p", "k": [0, 1, 2], "gold": [0.0, 1, 2], "reward": [0.0, 1, 2]})
    after = before.assign(reward=[0.0, 2, 1])      # the (1, 2) pair flips; the others stay right
    f = style_flips(before, after)
    assert (f["flips"], f["unflips"]) == (1, 0) and f["flip_rate"] == pytest.approx(1 / 3)


def test_rmbench_style_matrix_length_rule_all_domains_and_in_report():
    expected = {"chat": (0.026, 0.284, 0.811), "code": (0.254, 0.519, 0.775),
                "safety-refuse": (0.023, 0.158, 0.890), "safety-response": (0.238, 0.777, 0.987)}
    arrays = {}
    for dom, (hard, normal, easy) in expected.items():
        items = json.loads(shared_file("rm-bench", f"{dom}_filtered.json").read_text())
        arrays[dom] = ([[len(t) for t in x["chosen"]] for x in items], [[len(t) for t in x["rejected"]] for x in items])
        sm = rmbench_style_matrix(*arrays[dom])
        assert (sm.hard, sm.normal, sm.easy) == pytest.approx((hard, normal, easy), abs=5e-4)
    sim = simulate_policy_samples(20, 4)
    rep = protocol_report(sim.samples, sim.rewards, style_scores={"spread": arrays["code"]}, n_boot=50)
    t = rep.table.set_index("model")
    assert t.loc["spread", ["hard", "normal", "easy"]].tolist() == pytest.approx([0.254, 0.519, 0.775], abs=5e-4)
    assert np.isnan(t.loc["stylish", "hard"])


def test_scorers_feed_the_protocol_and_chance_rms_rank_last(tmp_path):
    sim = simulate_policy_samples(40, 4, seed=6)
    scored = score_samples(sim.samples, ["noise", "length"])
    assert list(scored.columns) == ["prompt_id", "k", "noise", "length"]
    assert scored["noise"].equals(score_samples(sim.samples, "noise")["noise"])      # deterministic
    rep = protocol_report(sim.samples, sim.rewards.merge(scored), n_boot=200)
    t = rep.table
    assert not t.set_index("model").loc["noise", "above_chance"]
    assert t["above_chance"].tolist() == sorted(t["above_chance"].tolist(), reverse=True)
    sim.samples.to_json(tmp_path / "s.jsonl", orient="records", lines=True)
    cli = protocol_cli(tmp_path / "s.jsonl", scorers=["noise"], n_boot=50)
    assert list(cli.results) == ["noise"]
    with pytest.raises(ProtocolError, match="prompt"):
        score_samples(sim.samples.drop(columns="prompt"), ["noise"])


def test_rmbench_as_samples_matches_the_style_matrix():
    rows = []
    for dom in ["chat", "safety-response"]:
        for x in json.loads(shared_file("rm-bench", f"{dom}_filtered.json").read_text()):
            for k, (resp, g) in enumerate([(c, 1.0) for c in x["chosen"]] + [(r, 0.0) for r in x["rejected"]]):
                rows.append({"prompt_id": f"{dom}-{x['id']}", "k": k, "prompt": x["prompt"], "response": resp,
                             "domain": dom, "gold": g})
    samples = pd.DataFrame(rows)
    rewards = score_samples(samples, ["length"])
    r = rewards["length"].to_numpy().reshape(-1, 6)
    rep = protocol_report(samples, rewards, style_scores={"length": (r[:, :3], r[:, 3:])}, n_boot=100)
    row = rep.table.iloc[0]
    sm = rep.results["length"].style
    assert row["gold_tie_share"] == pytest.approx(0.4)
    assert row["accuracy"] == pytest.approx(sm.matrix.to_numpy().mean() + 0.5 * row["rm_tie_share"], abs=1e-12)
    assert row["hard"] < row["normal"] < row["easy"]


def test_report_save_load_round_trip(tmp_path):
    "Tables, per-RM details (flips, style matrix, curves) and text survive save/load; no pickle is written."
    sim = simulate_policy_samples(30, 5, seed=2)
    rng = np.random.default_rng(0)
    style = {"stylish": (rng.normal(size=(20, 3)), rng.normal(size=(20, 3)))}
    rep = protocol_report(sim.samples, sim.rewards, styled=sim.styled, style_scores=style, n_boot=100, seed=3)
    out = rep.save(tmp_path / "pr")
    assert not list(out.rglob("*.pkl")) and (out / "summary.txt").read_text() == rep.summary() + "\n"
    back = ProtocolReport.load(out)
    pd.testing.assert_frame_equal(back.table, rep.table)
    assert back.summary() == rep.summary() and back.to_markdown() == rep.to_markdown()
    assert back.settings == rep.settings and list(back.results) == list(rep.results)
    for m, r in rep.results.items():
        b = back.results[m]
        pd.testing.assert_frame_equal(b.domains, r.domains)
        pd.testing.assert_frame_equal(b.best_of_n, r.best_of_n)
        assert b.accuracy == r.accuracy and b.variance == r.variance and b.flips == r.flips
        assert (b.style is None) == (r.style is None)
        if r.style is not None:
            pd.testing.assert_frame_equal(b.style.matrix, r.style.matrix)
            assert (b.style.hard, b.style.normal, b.style.easy, b.style.n) == (r.style.hard, r.style.normal, r.style.easy, r.style.n)
    assert back.results["stylish"].style is not None
    with pytest.raises(ProtocolError, match="report.json is missing"):
        ProtocolReport.load(tmp_path)


def _hand_samples():
    "Four prompts of three responses, two domains; the expected numbers are worked out by hand in 08f_protocol."
    return pd.DataFrame({"prompt_id": np.repeat(["p1", "p2", "p3", "p4"], 3), "k": np.tile([0, 1, 2], 4),
                         "domain": np.repeat(["A", "A", "B", "B"], 3),
                         "gold": [3, 2, 1, 1, 1, 0, 0, 1, 2, 2, 1, 0.0],
                         "rm": [1, 1, 0, 0, 1, 2, 0, 2, 4, 0, 1, 0.0]})


@pytest.mark.parametrize("conventions, expect", [
    # accuracy, zvar_mean, worst domain accuracy (A), domain mean, tau
    ("package", (7 / 12, 1.0625, 0.5, 0.625, 0.1)),            # macro (2.5/3+0+1+1.5/3)/4; ddof 1; pooled 2.5/5, 4.5/6
    # macro (2/3+0+1+1/3)/4 with ties wrong; ddof 0 over sd + 1e-8; (2/3+0)/2, (1+1/3)/2
    ("blog", (0.5, (17 / 18) / (np.sqrt(4 / 3) + 1e-8) ** 2, 1 / 3, 0.5, 0.05)),
])
def test_conventions_by_hand(tmp_path, conventions, expect):
    from reward_auditor.protocol import protocol_cli
    _hand_samples().to_csv(tmp_path / "samples.csv", index=False)
    rep = protocol_cli(tmp_path / "samples.csv", n_boot=50, conventions=conventions)
    row = rep.table.iloc[0]
    got = (row["accuracy"], row["zvar_mean"], row["worst_accuracy"], row["domain_mean"], rep.settings["tau"])
    assert got == pytest.approx(expect, abs=1e-12)
    assert row["worst_domain"] == "A" and rep.settings["conventions"] == conventions
    assert ("RM ties count as wrong" in rep.summary()) == (conventions == "blog")
    # tau given explicitly wins over the conventions' default; with tau = 0.2 only blog's ddof-0 variances fall below
    low = protocol_cli(tmp_path / "samples.csv", n_boot=50, conventions=conventions, tau=0.2).table.iloc[0]
    assert low["low_var_share"] == (0.5 if conventions == "blog" else 0.0)


# --- blog conventions: the post's rm_report, transcribed -----------------------------------------------------

def _post_rm_report(rows, tau=0.05):
    """A plain-Python transcription of the pre-RL post's `rm_report`, written from its stated rules.

    Source: the pre-RL reward-model protocol blog post's reference `rm_report` (its described conventions): for each
    prompt, the pairs i < j whose gold scores differ; a pair is right when the RM orders it the same way strictly
    (an RM tie is wrong); the prompt's accuracy is right / pairs, and `on_policy_acc` is the mean over prompts
    that have a pair. Rewards are z-scored over all responses by (r − mean) / (population sd + 1e-8);
    `mean_reward_var` is the mean over prompts of the population variance (ddof 0) of the prompt's z-scores and
    `low_var_frac` the share of prompts below tau; a domain's accuracy is the mean of its prompts' accuracies;
    `worst_domain_acc` is the smallest and `domain_mean` their mean.
    """
    prompts = {}
    for pid, dom, gold, rew in rows:
        prompts.setdefault(pid, (dom, [], []))
        prompts[pid][1].append(gold)
        prompts[pid][2].append(rew)
    accs, by_dom = {}, {}
    for pid, (dom, g, r) in prompts.items():
        right = total = 0
        for i in range(len(g)):
            for j in range(i + 1, len(g)):
                if g[i] == g[j]:
                    continue
                total += 1
                right += (g[i] - g[j]) * (r[i] - r[j]) > 0
        if total:
            accs[pid] = right / total
            by_dom.setdefault(dom, []).append(right / total)
    allr = [x for _, (_, _, r) in prompts.items() for x in r]
    mu = sum(allr) / len(allr)
    sd = (sum((x - mu) ** 2 for x in allr) / len(allr)) ** 0.5
    var = []
    for _, (_, _, r) in prompts.items():
        z = [(x - mu) / (sd + 1e-8) for x in r]
        zm = sum(z) / len(z)
        var.append(sum((v - zm) ** 2 for v in z) / len(z))
    dom_acc = {d: sum(a) / len(a) for d, a in by_dom.items()}
    return {"on_policy_acc": sum(accs.values()) / len(accs), "mean_reward_var": sum(var) / len(var),
            "low_var_frac": sum(v < tau for v in var) / len(var), "worst_domain_acc": min(dom_acc.values()),
            "domain_mean": sum(dom_acc.values()) / len(dom_acc)}


def _tied_samples(ragged: bool, seed: int):
    "Prompts with gold ties and RM ties (rewards on a coarse grid), fixed K = 6 or ragged K in 2..9."
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(40):
        K = int(rng.integers(2, 10)) if ragged else 6
        gold = rng.integers(0, 3, K).astype(float)             # many gold ties
        rm = np.round(gold * 0.3 + rng.normal(0, 1, K), 0)     # many RM ties
        for k in range(K):
            rows.append({"prompt_id": f"q{p}", "k": k, "domain": "abc"[p % 3], "gold": gold[k], "rm": rm[k]})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("ragged", [False, True])
def test_blog_conventions_equal_the_posts_rm_report(ragged):
    from reward_auditor.protocol import protocol_report
    for seed in range(3):
        s = _tied_samples(ragged, seed)
        post = _post_rm_report(zip(s["prompt_id"], s["domain"], s["gold"], s["rm"]))
        row = protocol_report(s, n_boot=0, conventions="blog").table.iloc[0]
        ours = {"on_policy_acc": row["accuracy"], "mean_reward_var": row["zvar_mean"],
                "low_var_frac": row["low_var_share"], "worst_domain_acc": row["worst_accuracy"],
                "domain_mean": row["domain_mean"]}
        for k, v in post.items():
            assert abs(ours[k] - v) <= 1e-12, (ragged, seed, k, ours[k], v)
        # the data really exercise the rules: gold ties, RM ties, and a pooled accuracy that differs from the macro
        pc = protocol_report(s, n_boot=0, conventions="package").results["rm"]
        assert pc.accuracy["gold_tie_share"] > 0 and pc.accuracy["rm_tie_share"] > 0
