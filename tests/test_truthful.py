"""Every number in a report means what a reader thinks it means: the model's real token limit and truncation
counts, the perturbation legend, changed items, below-chance subsets, the paper preset, --drop-invalid with
--conditions, the model rewriters on the command line, and RM-Bench's style matrix."""
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import SHARED_DATA, shared_file
from test_cli import cli
from tiny_models import tiny_rm, tiny_tokenizer

REPO = Path(__file__).resolve().parents[1]
LONG = " ".join(["The quick brown fox jumps over the lazy dog while the cat sleeps."] * 30)


def tiny_bert(path: Path, positions: int = 128, seed: int = 0) -> Path:
    "A BERT-style one-label reward model with a fixed position table (`positions`), saved offline."
    import torch
    from transformers import BertConfig, BertForSequenceClassification
    tok = tiny_tokenizer(path)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, max_position_embeddings=positions, num_labels=1,
                     pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    BertForSequenceClassification(cfg).eval().save_pretrained(str(path))
    return path


def frame(n=6, long=False):
    rows = [{"id": f"i{k}", "subset": "s", "prompt": f"Question {k}: what is the capital of France?",
             "chosen": ("Paris is the capital of France. " + (LONG if long else "")),
             "rejected": f"I think it is Lyon, number {k}."} for k in range(n)]
    return pd.DataFrame(rows)


# ---- model limits -------------------------------------------------------------------------------------------------

def test_bert_128_positions_defaults_to_its_limit_and_does_not_crash(tmp_path):
    from reward_auditor.scorers import ScorerError, load_scorer
    d = tiny_bert(tmp_path / "bert")
    sc = load_scorer(str(d))
    assert sc.max_length == 128 and "max_position_embeddings=128" in sc.limit_source
    with pytest.warns(UserWarning, match="longer than max_length=128"):
        out = sc.score_pairs(frame(3, long=True), progress=False)   # 300+ tokens: used to fail with index 128
    assert np.isfinite(out["margin"]).all()
    with pytest.raises(ScorerError, match="exceeds the model's limit of 128"):
        load_scorer(str(d), max_length=4096)
    r = cli("audit", "--data", "sample", "--model", d, "--max-length", "4096", "--out", tmp_path / "run", "-q",
            "--perturbations", "EF", "-B", "50")
    assert r.returncode == 2 and "exceeds the model's limit of 128" in r.stderr, r.stderr


def test_tokenizer_limit_when_real_and_the_smaller_wins(tmp_path):
    from reward_auditor.scorers import load_scorer, model_limit
    d = tiny_rm(tmp_path / "rm")                        # config: 512 positions; tokenizer: no real limit
    assert load_scorer(str(d)).max_length == 512
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**cfg, "model_max_length": 100}))
    sc = load_scorer(str(d))
    assert sc.max_length == 100 and sc.limit_source == "tokenizer model_max_length=100"
    from transformers import LlamaConfig
    assert model_limit(LlamaConfig(max_position_embeddings=64), sc.tokenizer) == (64, "config max_position_embeddings=64")


def test_truncation_counted_per_subset_and_perturbation_in_manifest_table_and_report(tmp_path):
    from reward_auditor.audit import audit
    from reward_auditor.report import render
    from reward_auditor.scorers import load_scorer
    d = tiny_rm(tmp_path / "rm")
    data = pd.concat([frame(4, long=True), frame(4).assign(id=lambda f: "j" + f["id"], subset="t")],
                     ignore_index=True)
    sc = load_scorer(str(d), max_length=64)
    with pytest.warns(UserWarning):
        res = audit(data, [sc], ["EF", "LE"], permutations=50, out=tmp_path / "run", progress=False)
    tr = res.manifest["truncation"]["rm"]
    assert tr["max_length"] == 64 and tr["limit"] == 512
    assert tr["cells"]["s"]["orig"] == {"truncated": 4, "answer_cut": 4, "history_cut": 0, "n": 4}  # long answers: cut inside
    assert tr["cells"]["t"]["orig"]["truncated"] == 0                                 # short ones: untouched
    assert tr["cells"]["t"]["LE"]["truncated"] >= 1                                   # LE makes them longer
    t = res.table.set_index(["subset", "perturbation"])
    assert t.loc[("s", "EF"), "n_truncated"] == 4 and t.loc[("s", "EF"), "n_answer_cut"] == 4
    assert any("removed part of an answer" in w for w in res.manifest["warnings"])
    page = render(tmp_path / "run").html.read_text()
    assert "Truncation" in page and "max_length 64 tokens" in page and "4/4 (4 answer)" in page
    assert "†" in page                                                                # beside the affected cells


# ---- legend, changed items, below chance ----------------------------------------------------------------------------

def test_legend_in_help_readme_and_report(tmp_path):
    from reward_auditor.perturbations import BUILTINS, OFFLINE_NOTE, PERTURBATION_LEGEND
    r = cli("audit", "--help")
    assert r.returncode == 0
    flat = " ".join(r.stdout.split())
    for code, *_ in PERTURBATION_LEGEND:
        assert f"{code}, " in flat
    assert "apertium eng-spa" in flat and "length template" in flat and "WordNet first sense" in flat
    assert " ".join(OFFLINE_NOTE.split()) in flat
    readme = " ".join(" ".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs" / "guide").glob("*.md"))]).split())
    assert all(f"| {c} |" in readme for c in BUILTINS) and " ".join(OFFLINE_NOTE.split()) in readme


def test_changed_share_edit_size_and_untestable_cells():
    from reward_auditor.audit import audit
    res = audit(frame(8), ["length"], ["EF", "IU"], permutations=50, progress=False)
    t = res.table.set_index("perturbation")
    assert t.loc["IU", "change_rate"] == 1.0 and t.loc["IU", "median_edit_size"] > 0
    from reward_auditor.audit import too_few_to_test
    # IU edits the prompt, which the length scorer never reads: 8 changed, N0 = 0, p = 1 is a finding, not untestable
    assert t.loc["IU", "n_changed"] == 8 and t.loc["IU", "n_nonzero"] == 0 and not too_few_to_test(res.table).any()
    one = frame(8)
    # a condition that changes 3 items only: 2^-3 = 0.125 > 0.05, so no test could flag it
    from reward_auditor.perturbations import condition_from_frame
    pert = one.copy()
    pert.loc[:2, "chosen"] = pert.loc[:2, "chosen"] + " Indeed."
    res2 = audit(one, ["length"], None, conditions={"X": condition_from_frame("X", one, pert, side="response",
                                                                            group="stylized")},
                 permutations=50, progress=False)
    r = res2.table.iloc[0]
    assert r["n_changed"] == 3 and r["n_nonzero"] == 3 and r["p_min"] == 0.125 and not r["detectable"]
    assert "testable" not in res2.table  # one notion of untestable: `detectable`
    assert sum("too few changed" in w for w in res2.manifest["warnings"]) == 1  # one warning, not two
    from reward_auditor.report import changes_html, risk_display
    assert "too few changed to test" in changes_html(res2.table) and risk_display(res2.table)["stars"].iloc[0].endswith("°")
    assert "too few changed to test" not in changes_html(res.table)


def test_below_chance_marked_in_findings_and_risk_table(tmp_path):
    from reward_auditor.audit import audit
    from reward_auditor.report import BELOW_CHANCE_NOTE, findings, render
    data = frame(8)    # chosen answers are the longer ones: a "shorter is better" scorer is always wrong
    res = audit(data, [lambda p, r: -float(len(r))], ["IU", "EF"], permutations=50, out=tmp_path / "run",
                progress=False)
    assert res.table["accuracy_before"].iloc[0] == 0.0
    assert findings(res.table)["caveat"].tolist() == [BELOW_CHANCE_NOTE]
    page = render(tmp_path / "run").html.read_text()
    assert BELOW_CHANCE_NOTE in page and "s (below chance)" in page and "Below chance" in page


# ---- the paper preset, --drop-invalid with --conditions -------------------------------------------------------------

def test_paper_code_preset_is_one_sided_with_at_most_three_stars(tmp_path):
    r = cli("audit", "--data", "sample", "--scorer", "length", "--preset", "paper-code", "--out", tmp_path / "p",
            "-q", "--no-report", "-B", "200", "--semantic-check", "off")  # the preset, not the meaning check
    assert r.returncode == 0, r.stderr
    t = pd.read_parquet(tmp_path / "p" / "results.parquet")
    m = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert m["settings"]["two_sided"] is False and "IMPROVES" not in set(t["verdict"])
    assert set(t["stars"]) <= {"ns", "*", "**", "***"}
    from reward_auditor.audit import AuditSettings
    assert AuditSettings(preset="paper-code").two_sided is False


def test_drop_invalid_applies_to_conditions_and_is_counted(tmp_path):
    f = shared_file("reward-auditor", "math_filtered_prompt_disturbance.json")
    r = cli("audit", "--conditions", f, "--scorer", "length", "--out", tmp_path / "a", "-q", "--no-report", "-B", "50")
    assert r.returncode == 2 and "--drop-invalid" in r.stderr
    r = cli("audit", "--conditions", f, "--scorer", "length", "--out", tmp_path / "b", "-q", "--no-report", "-B", "50",
            "--drop-invalid")
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert m["data"]["dropped_invalid"] == {str(f): {"count": 1}} and "1 invalid item(s)" in r.stderr


# ---- model rewriters on the command line ----------------------------------------------------------------------------

class _Echo(BaseHTTPRequestHandler):
    "An OpenAI-compatible chat endpoint that returns the user text with one sentence added."
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = body["messages"][-1]["content"]
        reply = json.dumps({"choices": [{"message": {"role": "assistant", "content": text + " More detail."}}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(reply.encode())

    def log_message(self, *a):
        pass


def test_model_rewriters_have_cli_options_and_never_crash(tmp_path):
    r = cli("perturb", "--data", "sample", "--perturbations", "LE-model", "--out", tmp_path / "x.jsonl", "-q")
    assert r.returncode == 2 and "--rewriter-model" in r.stderr and "internal error" not in r.stderr, r.stderr
    r = cli("audit", "--data", "sample", "--scorer", "length", "--perturbations", "LE-model", "--out", tmp_path / "a",
            "-q", "--no-report")
    assert r.returncode == 2 and "--rewriter-url" in r.stderr, r.stderr
    srv = HTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_port}/v1"
        r = cli("perturb", "--data", "sample", "--perturbations", "LE-model,EF", "--rewriter-url", url,
                "--rewriter-name", "echo", "--out", tmp_path / "y.jsonl", "-q")
        assert r.returncode == 0, r.stderr
        assert "LE-model:" in r.stdout and "EF:" in r.stdout
        rows = pd.read_json(tmp_path / "y.jsonl", lines=True)
        le = rows[(rows["perturbation"] == "LE-model") & rows["changed"]]
        assert len(le) and le["chosen"].str.endswith("More detail.").all()
    finally:
        srv.shutdown()


# ---- RM-Bench: the style matrix, and the done-when report -----------------------------------------------------------

def test_rmbench_style_matrix_in_cli_and_manifest(tmp_path):
    f = shared_file("rm-bench", "chat_filtered.json")
    r = cli("audit", "--data", f, "--scorer", "length", "--perturbations", "EF", "--out", tmp_path / "r", "-q",
            "--no-report", "-B", "50")
    assert r.returncode == 0, r.stderr
    assert "RM-Bench style matrix" in r.stdout and "hard" in r.stdout and "concise/concise" in r.stdout
    sm = json.loads((tmp_path / "r" / "manifest.json").read_text())["rmbench_style_matrix"]["length"]["all"]
    # a length scorer prefers detailed answers: it wins the easy cells and loses the hard ones
    assert sm["easy"] > sm["normal"] > sm["hard"] and np.shape(sm["matrix"]) == (3, 3)


def test_report_of_a_tiny_model_on_rmbench_chat_and_code(tmp_path):
    "The acceptance report: legend, backends, truncation counts, changed counts, chance caveat and style matrix."
    from reward_auditor.audit import audit
    from reward_auditor.data import load_preferences
    from reward_auditor.report import render
    from reward_auditor.scorers import load_scorer
    parts = [load_preferences(shared_file("rm-bench", f"{s}_filtered.json")).head(12) for s in ("chat", "code")]
    data = pd.concat(parts, ignore_index=True)
    data.attrs["format"] = "rmbench"
    sc = load_scorer(str(tiny_bert(tmp_path / "bert")))       # 128 positions: RM-Bench answers get cut
    with pytest.warns(UserWarning):
        res = audit(data, [sc], ["EF", "IU", "LE", "SP"], permutations=100, out=tmp_path / "run", progress=False)
    page = render(tmp_path / "run").html.read_text()
    assert "Perturbation legend" in page and "length template" in page and "LLM rewrites" in page   # legend, backends
    assert "max_length 128 tokens" in page and "original pairs truncated" in page                    # truncation
    assert "Changed items per perturbation" in page and " of 12 (" in page                          # changed counts
    assert "RM-Bench style matrix" in page and "concise/concise" in page and "hard" in page          # style matrix
    from reward_auditor.audit import below_chance_rows
    if below_chance_rows(res.table.drop_duplicates("subset")).any():   # judged on the decided pairs, ties left out
        assert "Below chance" in page and "(below chance)" in page                                    # chance caveat
    else:
        assert "Below chance" not in page
    assert set(res.manifest["rmbench_style_matrix"]["bert"]) == {"chat", "code", "all"}


# ---- meta: exact p for small n, degenerate ranks, sum of r_S -------------------------------------------------------

def test_meta_small_n_spearman_is_exact_and_says_when_ranks_are_degenerate():
    from reward_auditor import meta as mt
    # six models, four of them with r_S = 0 (nothing significant): rho = -1 by ranks, but not p = 0
    rows = []
    risk = {"m1": 0.0, "m2": 0.0, "m3": 0.0, "m4": 0.0, "m5": 0.4, "m6": 0.9}
    for m, r in risk.items():
        rows.append({"model": m, "subset": "chat", "perturbation": "EF", "group": "controlled",
                     "effect_size": r, "significant": r > 0, "p_adjusted": 0.01 if r else 0.5, "r_S": r})
    win = pd.Series({"m1": 0.9, "m2": 0.9, "m3": 0.9, "m4": 0.9, "m5": 0.5, "m6": 0.1})
    res = mt.downstream_correlation(pd.DataFrame(rows), win, metric="win")
    assert res.statistic == pytest.approx(-1.0)
    assert res.pvalue == pytest.approx(res.pvalue_permutation) and res.pvalue > 0.01   # exact, not 0.000
    s = res.summary()
    assert "exact" in s and "ranks" in s and "r_S is a test's effect size" in s


# ---- verifier audit: each configuration gets the form it parses; the identity rule is the harness check -------------

def _never(gold, answer):
    return False


def test_verifier_harness_feeds_each_form_and_checks_identity(tmp_path):
    pytest.importorskip("math_verify")
    from reward_auditor.verifiers import verifier_audit
    res = verifier_audit({"math-verify-expr": "math-verify-expr", "string": "string", "never": _never},
                         rules=["identity", "dollar_delimiters", "sign_flip"], workers=1)
    ident = res.per_rule.query("rule == 'identity'").set_index("verifier")["rate"]
    assert ident["math-verify-expr"] == 0 and ident["string"] == 0          # was 36/36 rejected for expr
    sane = res.sanity.set_index("verifier")
    assert sane.loc["string", "status"] == "ok"
    assert 0 < sane.loc["math-verify-expr", "identity_accepted"] < sane.loc["math-verify-expr", "golds"]
    assert sane.loc["never", "status"].startswith("harness is wrong")
    assert "plain expressions" in res.params["input_forms"]["math-verify-expr"]
    assert "Harness check" in res.summary() and "harness is wrong" in res.summary()
    # excluded golds leave the rates and the failure list of that verifier only
    ex = set(res.params["excluded_golds"]["math-verify-expr"])
    f = res.failures("math-verify-expr")
    assert not set(f["gold"]) & {g for g in res.variants.set_index("gold_id").loc[list(ex), "gold"]}
    back = type(res).load(res.save(tmp_path / "v"))
    pd.testing.assert_frame_equal(back.sanity, res.sanity)


# ---- ST quality: protected words, and the semantic-preservation check counted in the record -------------------------

def test_st_keeps_expressions_names_quantities_and_terms():
    from reward_auditor.perturbations import Segmented, st_protected, words
    def kept(text):
        sp = words(Segmented(text).masked)
        return {text[s:e] for k, (s, e) in enumerate(sp) if k in st_protected(text, sp)}
    assert {"condensed", "milk"} <= kept("Pour in the sweetened condensed milk slowly.")
    assert "antennas" in kept("Mount two omnidirectional antennas on the roof.")
    assert {"cups", "grams"} <= kept("Use 3 cups of water and 200 grams of rice.")
    assert "Street" in kept("The shop is on Baker Street near the station.")
    assert "station" not in kept("The shop is on Baker Street near the station.")


def test_semantic_check_counts_rejections_in_the_record(tmp_path):
    from reward_auditor.perturbations import SEMANTIC_THRESHOLDS, perturb, sentence_embedder
    from reward_auditor.data import load_sample
    c = perturb(load_sample(), ["ST", "SP"], seed=0, semantic_check=True)
    for name in ("ST", "SP"):
        sem = c[name].record["semantic_check"]
        if sentence_embedder() is None:
            assert sem["backend"] is None and "reward-auditor[semantic]" in sem["note"]
            continue
        assert sem["threshold"] == SEMANTIC_THRESHOLDS[name] and sem["checked"] >= c[name].n_changed
        assert 0 <= sem["rejected"] <= sem["checked"]
    if sentence_embedder() is not None:
        assert c["ST"].record["semantic_check"]["rejected"] > 0     # "Kind regards," → "Kind considers," is undone
        assert "Kind considers" not in " ".join(c["ST"].frame["chosen"])
