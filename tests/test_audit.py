"""The audit across modules: the control scorers' verdicts on the sample, the shared sign stream, presets,
file-based conditions, skipped backends and save/load."""
import json
import zlib

import numpy as np
import pandas as pd
import pytest
import scipy.stats as sst

from conftest import shared_file
from reward_auditor import perturbations as pt
from reward_auditor import stats
from reward_auditor.audit import AuditError, AuditResult, audit, differences, family_seed, file_conditions, make_conditions
from reward_auditor.scorers import CallableScorer
from reward_auditor.data import load_sample

CONTROLS = ["overlap", "length", "noise"]


@pytest.fixture(scope="module")
def controls():
    "The demo's audit: the sample, the three controls, all ten perturbations, B = 10,000, BH at 0.05."
    return audit("sample", CONTROLS, "all", seed=0, permutations=10_000, progress=False)


def test_table_shape_and_columns(controls):
    t = controls.table
    assert len(t) == 3 * 5 * 10
    for col in ["model", "subset", "perturbation", "group", "n", "n_changed", "accuracy_before", "accuracy_after",
                "mean_delta", "effect_size", "d_z", "g_z", "d_av", "d_rm", "t", "p", "p_adjusted", "p_by",
                "significant", "stars", "r_S", "verdict"]:
        assert col in t.columns, col
    assert set(t.loc[t["perturbation"].isin(["EF", "PH", "IU", "IW", "CN"]), "group"]) == {"controlled"}
    assert set(t.loc[t["perturbation"].isin(["ST", "LE", "SP", "LC", "SLC"]), "group"]) == {"stylized"}


def test_overlap_flags_translation(controls):
    t = controls.table
    if controls.manifest["skipped_perturbations"]:
        pytest.skip(f"translation backend missing: {controls.manifest['skipped_perturbations']}")
    ov = t[(t["model"] == "overlap") & t["significant"]]
    assert {"LC", "SLC"} <= set(ov["perturbation"])
    # translated answers share no English words with the prompt: the confidence falls in every flagged subset
    assert (ov.loc[ov["perturbation"].isin(["LC", "SLC"]), "effect_size"] > 0).all()


def test_noise_flags_nothing(controls):
    t = controls.table
    noise = t[t["model"] == "noise"]
    assert not noise["significant"].any()
    assert (noise["verdict"] == "NO_EVIDENCE").all()
    assert noise["p"].min() > 0.001  # nothing even close


def test_length_cannot_move_on_prompt_side(controls):
    t, it = controls.table, controls.items
    prompt_side = t[(t["model"] == "length") & (t["side"] == "prompt")]
    assert (prompt_side["mean_delta"] == 0).all() and not prompt_side["significant"].any()
    le = t[(t["model"] == "length") & (t["perturbation"] == "LE")]
    assert (le["len_change_chosen"] > 0).all() and (le["len_change_rejected"] > 0).all()
    assert (it.loc[~it["changed"], "delta"] == 0).all()


def test_family_matches_independent_tests(controls):
    "Each p equals a single test on the same sign stream; BH equals scipy; d_z equals paired t / sqrt(N)."
    it, t = controls.items, controls.table
    fam = it[(it["model"] == "overlap") & (it["subset"] == "chat")]
    seed = family_seed(0, "chat")
    rows = t[(t["model"] == "overlap") & (t["subset"] == "chat")].set_index("perturbation")
    for name in ["IW", "LC", "LE", "EF"]:
        f = fam[fam["perturbation"] == name].sort_values("id")
        d = differences(f["margin_before"].to_numpy(), f["margin_after"].to_numpy(), "prob")
        single = stats.signflip_test(d, B=10_000, seed=seed)
        assert rows.loc[name, "p"] == pytest.approx(single.pvalue, abs=1e-12)
        m0 = stats.confidence(f["margin_before"].to_numpy(), "prob")
        m1 = stats.confidence(f["margin_after"].to_numpy(), "prob")
        if np.count_nonzero(m0 - m1) == 1:   # one changed pair: d_z = ±1/√N whatever the change, so undefined
            assert np.isnan(rows.loc[name, "d_z"]) and "one changed pair" in rows.loc[name, "effect_undefined"]
        elif np.std(m0 - m1) > 0:
            tt = sst.ttest_rel(m0, m1)
            assert rows.loc[name, "t"] == pytest.approx(tt.statistic, rel=1e-9)
            assert rows.loc[name, "d_z"] == pytest.approx(tt.statistic / np.sqrt(len(d)), rel=1e-9)
    # two-sided default: each tail by BH at alpha/2, reported as the doubled BH-adjusted p (compared with alpha)
    np.testing.assert_allclose(rows["p_adjusted"].to_numpy(),
                               np.minimum(2 * sst.false_discovery_control(rows["p"].to_numpy()), 1), rtol=1e-12)
    np.testing.assert_allclose(rows["p_less_adjusted"].to_numpy(),
                               np.minimum(2 * sst.false_discovery_control(rows["p_less"].to_numpy()), 1), rtol=1e-12)


def test_accuracy_before_after(controls):
    it, t = controls.items, controls.table
    f = it[(it["model"] == "overlap") & (it["subset"] == "math") & (it["perturbation"] == "LC")]
    row = t[(t["model"] == "overlap") & (t["subset"] == "math") & (t["perturbation"] == "LC")].iloc[0]
    assert row["accuracy_before"] == pytest.approx((f["margin_before"] > 0).mean())
    assert row["accuracy_after"] == pytest.approx((f["margin_after"] > 0).mean())
    assert row["n_changed"] == int(f["changed"].sum())


def test_manifest_records_what_was_used(controls):
    m = controls.manifest
    assert m["settings"]["permutations"] == 10_000 and m["settings"]["scale"] == "prob"
    assert set(m["perturbations"]) == set(controls.table["perturbation"])
    assert m["perturbations"]["LC"]["resources"].get("backend") == "apertium"
    assert set(m["models"]) == set(CONTROLS) and all(v["fingerprint"] for v in m["models"].values())
    assert m["scores"]["computed"] > 0 and m["data"]["n_items"] == 80
    json.dumps(m)  # JSON-safe


def test_save_load_and_determinism(tmp_path):
    a = audit("sample", ["noise", "overlap"], ["EF", "IU"], seed=3, permutations=2000, out=tmp_path / "a",
              progress=False)
    b = audit("sample", ["noise", "overlap"], ["EF", "IU"], seed=3, permutations=2000, progress=False)
    pd.testing.assert_frame_equal(a.table, b.table)
    back = AuditResult.load(tmp_path / "a")
    pd.testing.assert_frame_equal(back.table, a.table)
    pd.testing.assert_frame_equal(back.items, a.items)
    assert (tmp_path / "a" / "scores.sqlite").exists()
    c = audit("sample", ["noise"], ["EF", "IU"], seed=4, permutations=2000, progress=False)
    assert not np.array_equal(c.table["p"].to_numpy(), b.table[b.table["model"] == "noise"]["p"].to_numpy())


def test_paper_code_preset():
    r = audit("sample", ["overlap"], ["IW", "CN"], preset="paper-code", permutations=2000, progress=False)
    t = r.table
    assert r.manifest["settings"]["scale"] == "nll" and r.manifest["settings"]["effect_ddof"] == 0
    np.testing.assert_allclose(t["effect_size"], t["d_z0"])
    # nll differences are oriented so that a confidence drop is positive, like every other scale
    it = r.items
    assert ((it["delta"] > 0) == (it["margin_after"] < it["margin_before"])).all()
    assert set(t["stars"]) <= {"ns", "*", "**", "***", "****"}
    # the published test is one-sided at alpha: plain BH over the family, no improvement tail
    assert r.manifest["settings"]["two_sided"] is False and "p_less" not in t.columns
    assert r.manifest["error_control"]["alpha_per_tail"] == 0.05
    for _, g in t.groupby("subset"):
        np.testing.assert_allclose(g["p_adjusted"], sst.false_discovery_control(g["p"].to_numpy()), rtol=1e-12)


def test_family_model_pools_subsets():
    r = audit("sample", ["overlap"], ["IW"], family="model", permutations=2000, progress=False)
    assert list(r.table["subset"]) == ["all"] and r.table["n"].iloc[0] == 80


def test_margin_auto():
    r = audit("sample", ["overlap", "noise"], ["IW", "LC"], margin="auto", permutations=2000, progress=False)
    t = r.table
    quiet = t.loc[~t["significant"], "effect_size"]
    assert r.manifest["settings"]["margin_used"] == pytest.approx(max(quiet.max(), 0.0))
    assert ((t["verdict"] == "UNSUITABLE") == (t["significant"] & (t["effect_size"] > r.manifest["settings"]["margin_used"]))).all()


def test_missing_backend_is_skipped_and_recorded():
    def needs_backend(text, rng):
        raise pt.MissingResourceError("the frobnicator backend is not installed")

    pt.register(needs_backend, name="XTEST", side="response", group="stylized")
    try:
        r = audit("sample", ["noise"], ["EF", "XTEST"], permutations=500, progress=False)
        with pytest.raises(AuditError, match="XTEST"):
            audit("sample", ["noise"], ["EF", "XTEST"], permutations=500, progress=False, on_unavailable="error")
    finally:
        del pt.registry["XTEST"]
    assert "XTEST" in r.manifest["skipped_perturbations"]
    assert any("frobnicator" in w for w in r.manifest["warnings"])
    assert set(r.table["perturbation"]) == {"EF"}


def test_bad_arguments():
    with pytest.raises(AuditError, match="permutations"):
        audit("sample", ["noise"], ["EF"], permutations=0)
    with pytest.raises(AuditError, match="'XX'"):
        audit("sample", ["noise"], ["EF", "XX"])
    with pytest.raises(AuditError, match="scale"):
        audit("sample", ["noise"], ["EF"], scale="odds")


def test_file_based_conditions():
    "The paper's prompt-perturbation file: five conditions from the file; a length scorer cannot see prompts."
    path = shared_file("reward-auditor", "chat_filtered_prompt_disturbance.json")
    r = audit(None, ["length", "overlap"], None, conditions=path, permutations=1000, progress=False)
    t = r.table
    assert set(t["perturbation"]) == {"EF", "PH", "IU", "IW", "CN"}
    assert (t.loc[t["model"] == "length", "mean_delta"] == 0).all()
    ph = t[(t["model"] == "overlap") & (t["perturbation"] == "PH")].iloc[0]
    assert ph["n_changed"] < ph["n"]  # the paper's PH left some prompts unchanged


def test_prompt_and_response_files_form_one_family():
    "Both chat files of the paper: ten conditions named by content, one original frame, the controls behave."
    files = [shared_file("reward-auditor", "chat_filtered_prompt_disturbance.json"),
             shared_file("reward-auditor", "chat_filtered_response_disturbance.json")]
    r = audit(None, ["length", "overlap"], None, conditions=files, permutations=500, progress=False)
    t = r.table
    assert list(dict.fromkeys(t["perturbation"])) == ["EF", "PH", "IU", "IW", "CN", *pt.RESPONSE_FILE_NAMES.values()]
    assert set(t.loc[t["side"] == "response", "group"]) == {"stylized"}
    original, conds = file_conditions(files)
    assert list(conds["LE"].frame["id"]) == list(original["id"]) == list(pt.conditions_from_file(files[1])["LE"].original["id"])
    assert r.manifest["data"]["n_items"] == len(original) == 129
    assert (t.loc[(t["model"] == "length") & (t["side"] == "prompt"), "mean_delta"] == 0).all()
    le = t[(t["model"] == "length") & (t["perturbation"] == "LE")].iloc[0]
    assert le["len_change_chosen"] > 0 and le["len_change_rejected"] > 0  # the lengthened variants are longer
    assert r.manifest["perturbations"]["LE+SLC"]["resources"]["content"] == "zh_detailed"
    paper = audit(None, ["length"], None, conditions=files[1:], mapping="paper", permutations=200, progress=False)
    assert list(paper.table["perturbation"]) == list(pt.PAPER_RESPONSE_LABELS.values())
    # the same variant under two names gives the same numbers: the paper's 'LE' column 2 is the content's 'LE+SP'
    a = paper.table.set_index("perturbation").loc["LE", "mean_delta"]
    b = t[(t["model"] == "length") & (t["perturbation"] == "LE+SP")]["mean_delta"].iloc[0]
    assert a == pytest.approx(b)
    with pytest.raises(AuditError, match="differ"):
        file_conditions([files[0], shared_file("reward-auditor", "safety-refuse_filtered_response_disturbance.json")])


def _prefers_chosen_when_prompt_changed():
    "A scorer that, on a perturbed prompt, adds one unit to every chosen answer: M' > M by construction."
    data = load_sample()
    prompts, chosen = set(data["prompt"]), set(data["chosen"])

    def g(prompt: str, response: str) -> float:
        base = zlib.crc32(response.encode()) % 1000 / 1000  # a fixed function of the answer, no direction
        return base + (1.0 if prompt not in prompts and response in chosen else 0.0)
    return CallableScorer(g, name="likes-chosen-on-new-prompts")


def test_improves_is_reported_two_sided():
    sc = _prefers_chosen_when_prompt_changed()
    r = audit("sample", [sc, "noise"], ["IW", "LE"], permutations=2000, progress=False)
    t = r.table.set_index(["model", "subset", "perturbation"])
    iw = t.loc[sc.name].xs("IW", level="perturbation")
    assert (iw["verdict"] == "IMPROVES").all() and (iw["effect_size"] < 0).all()
    assert (iw["r_S"] == 0).all() and not iw["significant"].any()
    assert (iw["p_less_adjusted"] <= 0.05).all() and (iw["p_less_adjusted"] >= iw["p_less"] - 1e-12).all()
    # the response-side LE does not touch the prompt: the scorer's bonus never applies there
    assert not (t.loc[sc.name].xs("LE", level="perturbation")["verdict"] == "IMPROVES").any()
    assert not (r.table.loc[r.table["model"] == "noise", "verdict"] == "IMPROVES").any()
    # p_less is the lower-tail test of the same differences on the family's sign stream
    it = r.items
    f = it[(it["model"] == sc.name) & (it["subset"] == "chat") & (it["perturbation"] == "IW")]
    d = differences(f["margin_before"].to_numpy(), f["margin_after"].to_numpy(), "prob")
    single = stats.signflip_test(d, B=2000, seed=family_seed(0, "chat"), alternative="less")
    assert t.loc[(sc.name, "chat", "IW"), "p_less"] == pytest.approx(single.pvalue, abs=1e-12)
    # one-sided: same degradation p-values, no IMPROVES and no lower-tail columns
    one = audit("sample", [sc, "noise"], ["IW", "LE"], permutations=2000, progress=False, two_sided=False)
    np.testing.assert_array_equal(one.table["p"].to_numpy(), r.table["p"].to_numpy())
    assert "IMPROVES" not in set(one.table["verdict"]) and "p_less" not in one.table.columns


def test_end_to_end_null_is_calibrated():
    """Under a true null (hash-noise rewards, exchangeable under every perturbation) the pipeline — the sample's ten
    perturbations, scoring, sign-flip tests, BH — rejects at about alpha. 40 replicates (noise seed and audit seed k)
    x 5 subsets x 10 perturbations: 2,000 p-values in 200 families.

    The perturbed texts are made once (meaning check off: under this null it could only undo rewrites) and each
    replicate draws fresh noise for them; the replicates are independent given the texts, which is what the
    Type-I error is about. Making the texts anew for each replicate cost most of the old test's time."""
    from reward_auditor.data import load_preferences
    from reward_auditor.scorers import NoiseScorer
    data = load_preferences("sample")
    conds, skipped = make_conditions(data, "all", seed=0, semantic_check=False)
    assert len(conds) == 10 and not skipped
    reps = 40
    tables = [audit(data, [NoiseScorer(seed=k)], None, conditions=conds, permutations=1000, seed=k,
                    progress=False).table for k in range(reps)]
    t = pd.concat(tables, keys=range(reps), names=["seed"]).reset_index(level=0)
    assert len(t) == 2000 and t["p"].notna().all()
    raw = (t["p"] <= 0.05).mean()
    # 2,000 p-values, dependent within a family (they share the original margins): the band is [0.02, 0.09]
    # (the independent case's SE is 0.005; a design effect up to 10 gives SE 0.015, and no-op perturbations make
    # the test conservative, hence the lower end)
    assert 0.02 <= raw <= 0.09, raw
    families_with_a_rejection = t.groupby(["seed", "subset"])["significant"].any()
    assert len(families_with_a_rejection) == 200
    # BH: P(any rejection) <= alpha = 0.05 per family, families independent: Binomial(200, 0.05) exceeds 20 with
    # probability 0.0012, so a correct pipeline fails this about once in 900 seed choices (it is deterministic: same seeds,
    # same result)
    assert families_with_a_rejection.sum() <= 20, families_with_a_rejection.sum()


def test_effect_ci_bca_option():
    """effect_ci='bca' puts the seeded BCa interval of d_z in ci_low/ci_high, equal to stats.bca_ci on the same d."""
    r = audit("sample", ["overlap"], ["LC"], permutations=500, progress=False, effect_ci="bca")
    row = r.table[r.table["subset"] == "chat"].iloc[0]
    f = r.items[(r.items["subset"] == "chat") & (r.items["perturbation"] == "LC")].sort_values("id")
    d = differences(f["margin_before"].to_numpy(), f["margin_after"].to_numpy(), "prob")
    lo, hi = stats.bca_ci(d, 0.95, 2000, family_seed(0, "chat"))
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((lo, hi), abs=1e-12)
    assert r.manifest["settings"]["effect_ci"] == "bca"
    with pytest.raises(ValueError, match="effect_ci"):
        audit("sample", ["overlap"], ["LC"], permutations=100, progress=False, effect_ci="wald")


def test_a_family_with_nothing_testable_reports_rather_than_crashes():
    "Every margin missing (a judge that never answers, a score file with holes): rows with NaN effects, no KeyError."
    from reward_auditor.scorers import CallableScorer
    from reward_auditor.data import load_preferences
    res = audit(load_preferences("sample").head(4), [CallableScorer(lambda p, r: float("nan"), name="nan")],
                "EF,LE", seed=0, permutations=200, progress=False)
    t = res.table
    assert list(t["perturbation"]) == ["EF", "LE"] and (t["n"] == 0).all()
    assert t["effect_size"].isna().all() and t["p"].isna().all() and not t["significant"].any()


def _rb2_rows(n=12):
    return [{"id": f"r{i}", "prompt": f"Question {i}: what do cats like to eat in winter?",
             "chosen": [f"Cats like fish and warm milk, answer {i}."],
             "rejected": [f"Dogs bark at night, wrong answer {i}.{k}" for k in range(3)],
             "subset": "Focus", "num_correct": 1, "total_completions": 4} for i in range(n)]


def test_clustered_pairs_flip_whole_rewardbench2_rows():
    from reward_auditor.data import load_preferences
    from reward_auditor.stats import signflip_test
    d = load_preferences(_rb2_rows())
    r = audit(d, ["noise"], ["EF", "IU"], permutations=500, progress=False)
    assert r.table["n"].eq(36).all() and r.table["n_clusters"].eq(12).all()
    assert r.manifest["data"]["clusters"] == {"by": "group_id", "n": 12, "largest": 3}
    assert "in 12 clusters" in __import__("reward_auditor.report", fromlist=["x"]).header_html(r)
    for name, row in r.table.set_index("perturbation").iterrows():
        it = r.items[r.items["perturbation"] == name]
        sums = it.groupby(it["id"].str.split("-").str[0], sort=False)["delta"].sum()
        ids = it["id"].str.split("-").str[0].to_numpy()
        # the audit's p is the exact test on the 12 row sums, and the stats engine's cluster_ids path agrees
        assert row["p"] == signflip_test(sums.to_numpy(), B=500).pvalue
        assert row["p"] == signflip_test(it["delta"].to_numpy(), B=500, cluster_ids=ids).pvalue
        assert row["ci_high"] - row["ci_low"] > 0
    alone = audit(d, ["noise"], ["EF", "IU"], permutations=500, progress=False, group_by="id")
    assert alone.table["n_clusters"].eq(36).all() and alone.manifest["data"]["clusters"]["by"] == "id"
    with pytest.raises(AuditError, match="group_by column 'row'"):
        audit(d, ["noise"], ["EF"], permutations=100, progress=False, group_by="row")


def test_single_pair_clusters_leave_the_audit_unchanged():
    a = audit("sample", ["noise", "overlap"], ["EF", "LC"], permutations=1000, progress=False)
    b = audit("sample", ["noise", "overlap"], ["EF", "LC"], permutations=1000, progress=False, group_by="id")
    pd.testing.assert_frame_equal(a.table, b.table)
    assert a.table["n_clusters"].equals(a.table["n"]) and a.manifest["data"]["clusters"]["by"] == "prompt"


# --- RewardBench 2's own headline number, against a transcription of its scoring rule -------------------------

def _rb2_reference(rows, reward):
    """RewardBench 2's scoring, transcribed from its documented rule (Malik et al. 2025, "RewardBench 2"; the
    `allenai/reward-bench` v2 scoring: best-of-n with 1/k credit when the chosen answer is among k top scorers, and
    the Ties composite 0.30 tied accuracy + 0.30 ref accuracy + 0.20 correctness preferred + 0.20 correctness
    preferred (hard) + 0.01 mean tanh margin term), written from scratch on raw per-answer scores."""
    import math
    by_subset = {}
    for row in rows:
        by_subset.setdefault(row["subset"], []).append(row)
    out = {}
    for sub, rs in by_subset.items():
        if sub != "Ties":
            credits = []
            for row in rs:
                sc = [reward(row["chosen"][0])] + [reward(t) for t in row["rejected"]]
                top = max(sc)
                credits.append(1 / sc.count(top) if sc[0] == top else 0.0)
            out[sub] = sum(credits) / len(credits)
            continue
        stats = {}
        for row in rs:
            good = [reward(t) for t in row["chosen"]]
            bad = [reward(t) for t in row["rejected"]]
            kind, num = row["id"].split(":")
            stats[(kind, num)] = (min(good) - max(bad) > 0, max(good) - min(good) if len(good) > 1 else None,
                                  min(good) - max(bad))
        ref = {n: v for (k, n), v in stats.items() if k == "ref"}
        tied = {n: v for (k, n), v in stats.items() if k == "tied"}
        both = sorted(set(ref) & set(tied))
        pref = sum(tied[n][2] > tied[n][1] for n in both) / len(both)
        hard = sum(min(ref[n][2], tied[n][2]) > tied[n][1] for n in both) / len(both)
        terms = []
        for n in both:
            q = min(ref[n][2], tied[n][2]) / tied[n][1] if tied[n][1] else float("nan")
            terms.append(0.0 if math.isnan(q) else math.tanh(q - 1))
        out[sub] = (0.3 * sum(v[0] for v in tied.values()) / len(tied) + 0.3 * sum(v[0] for v in ref.values()) / len(ref)
                    + 0.2 * pref + 0.2 * hard + 0.01 * sum(terms) / len(terms))
    out["all"] = sum(out.values()) / len(out)
    return out


def _rb2_constructed(with_ties: bool):
    "RewardBench 2-style rows whose answers carry their reward in the text ('… worth 3'), with or without ties."
    r = np.random.default_rng(5 if with_ties else 6)
    grid = (lambda: int(r.integers(0, 4))) if with_ties else (lambda: float(r.normal()))
    ans = lambda tag: f"An answer {tag} worth {grid()}"
    rows = [{"id": f"f{i}", "prompt": f"Focus question {i}?", "chosen": [ans(f"c{i}")],
             "rejected": [ans(f"r{i}.{k}") for k in range(3)], "subset": "Focus"} for i in range(10)]
    rows += [{"id": f"m{i}", "prompt": f"Math question {i}?", "chosen": [ans(f"c{i}")],
              "rejected": [ans(f"r{i}.{k}") for k in range(3)], "subset": "Math"} for i in range(8)]
    for i in range(5):
        rows.append({"id": f"ref:{i}", "prompt": f"Name a colour {i}", "chosen": [ans(f"t{i}")],
                     "rejected": [ans(f"u{i}.{k}") for k in range(3)], "subset": "Ties"})
        rows.append({"id": f"tied:{i}", "prompt": f"Name any colour {i}", "chosen": [ans(f"t{i}.{k}") for k in range(3)],
                     "rejected": [ans(f"w{i}.{k}") for k in range(4)], "subset": "Ties"})
    return rows


@pytest.mark.parametrize("with_ties", [False, True])
def test_rewardbench2_headline_matches_its_scoring(with_ties):
    from reward_auditor.data import load_preferences
    from reward_auditor.report import rewardbench2_html
    from reward_auditor.scorers import ControlScorer

    class Worth(ControlScorer):
        kind = "worth"

        def reward(self, prompt, response):
            return float(response.rsplit(" ", 1)[1])

    rows = _rb2_constructed(with_ties)
    r = audit(load_preferences(rows), [Worth(name="worth")], ["EF"], permutations=200, progress=False)
    got = {x["subset"]: x for x in r.manifest["rewardbench2"]}
    want = _rb2_reference(rows, lambda t: float(t.rsplit(" ", 1)[1]))
    for sub, v in want.items():
        assert abs(got[sub]["score"] - v) <= 1e-12, (sub, got[sub]["score"], v)
    assert got["Focus"]["score_chance"] == 0.25 and got["Focus"]["pair_chance"] == 0.5
    assert (got["Focus"]["rows_tied_at_top"] > 0) == with_ties
    assert 0 < got["Ties"]["score_chance"] < 1 and got["Ties"]["rule"] == "Ties composite"
    pairs = r.items.drop_duplicates("id")
    assert got["all"]["pair_accuracy"] == np.mean(pairs["margin_before"] > 0)
    assert "RewardBench 2 score" in rewardbench2_html(r.manifest)


def test_unproven_procedure_is_measured_on_clustered_families():
    from reward_auditor.data import load_preferences
    r = audit(load_preferences(_rb2_rows()), ["noise"], ["EF", "IU"], permutations=200, progress=False,
              multiplicity="tsbh")
    m = r.manifest["error_control"]["measured"]
    assert len(m) == 1 and m[0]["clusters"] == {"n_clusters": 12, "pairs": 36} and m[0]["reps"] == 1000
    # a proven procedure is not simulated at all, clustered or not (before, it was simulated and the result dropped)
    from reward_auditor import multiplicity
    multiplicity._measure.cache_clear()
    assert audit(load_preferences(_rb2_rows()), ["noise"], ["EF"], permutations=200,
                 progress=False).manifest["error_control"]["measured"] == []
    assert multiplicity._measure.cache_info().misses == 0


def test_a_failing_perturbation_still_stops_the_worker_pool(monkeypatch):
    "make_conditions closes the worker processes it started and frees the embedder when a perturbation raises."
    from reward_auditor import engines, store
    events = []

    class Pool:
        def __init__(self, workers):
            events.append(("start", workers))

        def perturb(self, *a, **k):
            raise RuntimeError("a worker died")

        def close(self):
            events.append(("close",))

    monkeypatch.setenv("REWARD_AUDITOR_STORE", "off")
    monkeypatch.setattr(engines, "PerturbPool", Pool)
    monkeypatch.setattr(store, "release_embedders", lambda *a, **k: events.append(("release",)))
    with pytest.raises(RuntimeError, match="a worker died"):
        make_conditions(load_sample().head(6), ["EF"], workers=2)
    assert events == [("start", 2), ("close",), ("release",)]


def test_versions_name_the_meaning_checks_tokenizer_when_it_ran():
    "The meaning check's ids come from `tokenizers`: once imported, its version is in the manifest's versions."
    import tokenizers  # noqa: F401 - imported as the meaning check imports it
    from reward_auditor.audit import package_versions
    from importlib.metadata import version
    assert package_versions()["tokenizers"] == version("tokenizers")


def test_audit_closes_the_score_cache_it_opened(tmp_path):
    "The run folder's scores.sqlite is closed when the audit returns: no journal left beside it, nothing held open."
    from reward_auditor.data import load_sample
    audit(load_sample().head(12), "length", ["EF"], permutations=200, out=tmp_path / "run", progress=False)
    assert (tmp_path / "run" / "scores.sqlite").exists()
    assert not (tmp_path / "run" / "scores.sqlite-wal").exists()


def test_a_run_folder_is_never_replaced_by_other_scorers_unasked(tmp_path):
    """The same data with another scorer replaced the earlier results and reports with no word; now refused with a
    line naming what differs, unless overwrite. A rerun of the same audit keeps a report it did not write itself."""
    from reward_auditor.audit import record_reports
    df = load_sample().head(24)
    out = tmp_path / "run"
    first = audit(df, "length", ["EF"], permutations=200, out=out, progress=False)
    (out / "report-by-subset.html").write_text("<p>by subset</p>")       # rendered later, by `report --by subset`
    record_reports(out, "report-by-subset.html")
    again = audit(df, "length", ["EF"], permutations=200, out=out, progress=False)    # a resume: the same bytes
    assert (out / "report-by-subset.html").exists(), "a rerun deleted a report that still describes its results"
    assert json.loads((out / "manifest.json").read_text())["reports"] == ["report-by-subset.html"]
    assert again.table.equals(first.table)
    saved = (out / "results.parquet").read_bytes()
    with pytest.raises(AuditError, match=r"results of other scorers on this data \(scored by length, not in this run; "
                                         r"not scored by overlap\).*--overwrite"):
        audit(df, "overlap", ["EF"], permutations=200, out=out, progress=False)
    assert (out / "results.parquet").read_bytes() == saved and (out / "report-by-subset.html").exists()
    audit(df, "overlap", ["EF"], permutations=200, out=out, progress=False, overwrite=True)
    assert not (out / "report-by-subset.html").exists()                  # it described the replaced results
    assert list(json.loads((out / "manifest.json").read_text())["models"]) == ["overlap"]


def test_perturbation_memos_let_go_after_the_conditions_are_made(monkeypatch):
    """Edit sizes, translation plans and protected spans are remembered while one batch of conditions is made, then
    let go: a notebook session auditing a large dataset once does not keep its texts for the rest of the process."""
    monkeypatch.setenv("REWARD_AUDITOR_STORE", "off")
    data = load_sample().head(30)
    make_conditions(data, ["ST", "LE"], seed=0, semantic_check=False)
    assert len(pt.edit_size._d) == 0 and pt.edit_size.capacity == pt.edit_size._initial
    from reward_auditor.perturbation_base import _spans
    assert len(pt._plan._d) == 0 and _spans.cache_info().currsize == 0
    pt.edit_size.fit(10 ** 6)
    pt.edit_size("a b c", "a c")
    pt.edit_size.cache_clear()
    assert len(pt.edit_size._d) == 0 and pt.edit_size.capacity == pt.edit_size._initial
