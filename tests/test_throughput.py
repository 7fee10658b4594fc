"""Throughput changes keep every number: the sign-flip kernel's counts and p-values are bitwise those of the
previous matrix-product kernel (a frozen copy below), batch plans and token ids are reproducible."""
import numpy as np
import pytest

from reward_auditor import stats
from reward_auditor.stats import sign_words, words_to_bits

_BLOCK = 512


def previous_mc_count_linear(V, alternative, B, seed, chunk=None):
    "The Monte Carlo kernel as it was before byte tables (float32 0/1 matrix product), frozen for comparison."
    n, K = V.shape
    npad = 64 * ((n + 63) // 64)
    Vp = np.zeros((npad, K), np.float64)
    Vp[:n] = V
    V32 = Vp.astype(np.float32)
    colsum = Vp.sum(axis=0)
    absum = np.abs(Vp).sum(axis=0)
    t_obs = colsum.copy()
    sgn = -1.0 if alternative == "less" else 1.0
    obs = np.abs(t_obs) if alternative == "two-sided" else sgn * t_obs
    thr = obs - 1e-12 * np.maximum(1.0, absum)
    depth = min(_BLOCK, npad)
    bound = 2.0 * 1.5 * (depth + 2) * 2.0 ** -24 * absum + 1e-300
    counts = np.zeros(K, np.int64)
    buf = None
    for words in sign_words(seed, B, n, chunk):
        bits = words_to_bits(words)
        if buf is None or buf.shape[0] < bits.shape[0]:
            buf = np.empty(bits.shape, np.float32)
        bf = buf[: bits.shape[0]]
        np.copyto(bf, bits, casting="unsafe")
        U = np.zeros((bf.shape[0], K))
        for s in range(0, npad, _BLOCK):
            U += bf[:, s:s + _BLOCK] @ V32[s:s + _BLOCK]
        T = 2.0 * U - colsum
        stat = np.abs(T) if alternative == "two-sided" else sgn * T
        gap = stat - thr
        counts += np.count_nonzero(gap >= bound, axis=0)
        near = np.abs(gap) < bound
        if near.any():
            rows, cols = np.nonzero(near)
            for k in np.unique(cols):
                r = rows[cols == k]
                T64 = (bits[r].astype(np.float64) * 2 - 1) @ Vp[:, k]
                st = np.abs(T64) if alternative == "two-sided" else sgn * T64
                counts[k] += int(np.count_nonzero(st >= thr[k]))
    return counts


def _weights(rng, trial, n, K):
    kind = trial % 5
    if kind == 0:
        return rng.normal(size=(n, K))
    V = rng.integers(-3, 4, size=(n, K)).astype(float)           # many exact ties
    if kind == 2:
        V[: n // 2] = 0.0                                          # zero differences
    if kind == 3:
        V = np.round(V * 0.1, 1)                                   # decimal grid (inexact in binary)
    if kind == 4:
        V = rng.normal(size=(n, K)) * 10.0 ** rng.integers(-6, 6, size=(1, K))
    return V


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_kernel_counts_equal_previous(alternative):
    rng = np.random.default_rng(11)
    for trial in range(30):
        n, K, B = int(rng.integers(2, 700)), int(rng.integers(1, 5)), int(rng.integers(1, 2500))
        V = _weights(rng, trial, n, K)
        chunk = None if trial % 3 else int(rng.integers(1, 300))
        np.testing.assert_array_equal(stats._mc_count_linear(V, alternative, B, trial, chunk),
                                      previous_mc_count_linear(V, alternative, B, trial, chunk))


def test_family_p_values_bitwise_equal(monkeypatch):
    rng = np.random.default_rng(5)
    N = 400
    D = np.column_stack([rng.normal(0.02 * k, 0.2, N) for k in range(6)])
    D[rng.random(D.shape) < 0.2] = 0.0
    D[rng.random(D.shape) < 0.02] = np.nan
    for statistic in ("mean", "t", "signed_rank"):
        for cols in ([0], [1, 2], list(range(6))):
            for alt in ("greater", "two-sided"):
                new = stats.signflip_tests(D[:, cols], B=3000, seed=7, statistic=statistic, alternative=alt)
                with monkeypatch.context() as m:
                    m.setattr(stats, "_mc_count_linear", previous_mc_count_linear)
                    old = stats.signflip_tests(D[:, cols], B=3000, seed=7, statistic=statistic, alternative=alt)
                np.testing.assert_array_equal(new.n_exceed, old.n_exceed)
                assert new.pvalue.tobytes() == old.pvalue.tobytes()


class _Stub:
    "A translator that upper-cases each segment (stands in for apertium; counts what it is sent)."
    def __init__(self):
        self.sent = 0

    def translate(self, segments):
        self.sent += len(segments)
        return [s.upper() for s in segments]

    def resources(self):
        return {"backend": "stub"}


def test_lc_slc_plans_are_never_redone_above_the_old_cache_size():
    from reward_auditor import perturbations as P
    P._plan.cache_clear()
    n = 9000                                      # above the previous fixed memo size of 8192
    texts = [f"Answer {i} says the list is sorted. Then it prints item {i}!" for i in range(n)]
    rngs = lambda: [np.random.default_rng(i) for i in range(n)]
    tr = _Stub()
    lc = P.registry["LC"].apply_many(texts, rngs(), translator=tr)
    plan_misses = P._plan.misses
    assert plan_misses == n                                     # every text planned once
    slc = P.registry["SLC"].apply_many(texts, rngs(), translator=tr)
    assert P._plan.misses - plan_misses <= n                    # SLC's own layouts are the only new plans
    after_slc = P._plan.misses
    lc2 = P.registry["LC"].apply_many(texts, rngs(), translator=tr)
    assert P._plan.misses == after_slc and lc2 == lc and slc != lc  # LC again: every plan found, none redone


# --- batch plans in tokens and tokenizing ahead -----------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import torch
    from tiny_models import tiny_lm, tiny_rm
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("tput")
    return {"rm": tiny_rm(d / "rm"), "rm_bos": tiny_rm(d / "rm_bos", add_bos=True, seed=7),
            "policy": tiny_lm(d / "policy", seed=1)}


def _pairs(n=40, seed=0):
    import pandas as pd
    rng = np.random.default_rng(seed)
    words = "the capital of france is paris and a binary search works on a sorted list of numbers".split()
    txt = lambda lo, hi: " ".join(rng.choice(words, rng.integers(lo, hi)))
    return pd.DataFrame({"id": [f"i{k}" for k in range(n)], "subset": "chat",
                         "prompt": [txt(3, 15) + "?" for _ in range(n)],
                         "chosen": [txt(2, 60) for _ in range(n)], "rejected": [txt(1, 40) for _ in range(n)]})


@pytest.mark.parametrize("which,kind", [("rm", None), ("rm_bos", None), ("policy", "dpo")])
def test_tokenizing_ahead_gives_the_same_ids_and_scores(tiny, which, kind):
    from reward_auditor.scorers import load_scorer
    frame, later = _pairs(30, 1), _pairs(20, 2)
    serial = load_scorer(str(tiny[which]), kind=kind, batch_size=4)
    serial.tokenize_ahead = False
    ahead = load_scorer(str(tiny[which]), kind=kind, batch_size=4)
    items = list(dict.fromkeys(zip(later["prompt"].tolist() * 2, later["chosen"].tolist() + later["rejected"].tolist())))
    assert ahead.prefetch(later) == len(items) and serial.prefetch(later) == 0
    assert ahead._encodings(items) == [(*serial._encode_item(p, r), 0) for p, r in items]  # ids identical, no turns dropped
    ahead.prefetch(later)
    a = serial.score_pairs(later, progress=False)
    b = ahead.score_pairs(later, progress=False)
    assert a["margin"].to_numpy().tobytes() == b["margin"].to_numpy().tobytes()
    assert not ahead._pending                                                             # every encoding consumed


def test_token_budget_plans_are_recorded_and_reproducible(tiny):
    from reward_auditor.scorers import CPU_TOKEN_BUDGET, load_scorer, length_batches
    frame = _pairs(60, 3)
    auto = load_scorer(str(tiny["rm"]))
    rec = auto.batching()
    assert rec["token_budget"] == CPU_TOKEN_BUDGET and rec["batch_size"] is None and "CPU" in rec["budget_source"]
    a = auto.score_pairs(frame, progress=False)
    again = load_scorer(str(tiny["rm"]), max_batch_tokens=rec["token_budget"])
    b = again.score_pairs(frame, progress=False)
    assert a["margin"].to_numpy().tobytes() == b["margin"].to_numpy().tobytes()
    assert max(map(len, auto.plan_batches([50] * 100))) == CPU_TOKEN_BUDGET // 50     # rows by tokens, not 16
    # the previous defaults, given explicitly, plan exactly as before
    old = load_scorer(str(tiny["rm"]), batch_size=16, max_batch_tokens=65536)
    lengths = [7, 300, 45, 45, 2, 90] * 7
    assert old.plan_batches(lengths) == length_batches(lengths, 16, 65536)
    assert old.batching()["budget_source"].startswith("given")


def test_audit_records_batching_in_manifest_and_report_header(tiny, tmp_path):
    from reward_auditor.audit import audit
    from reward_auditor.report import header_html
    from reward_auditor.scorers import load_scorer
    frame = _pairs(24, 4)
    rm = load_scorer(str(tiny["rm"]), max_batch_tokens=2048)
    res = audit(frame, [rm], ["EF", "IU"], permutations=200, progress=False)
    b = res.manifest["models"][rm.name]["batching"]
    assert b["token_budget"] == 2048 and b["budget_source"].startswith("given")
    assert "2048 tokens per batch" in header_html(res)
    assert not rm._pending


# --- reports: renderer imports and one kernel for several reports ------------------------------------------------

def _normalized_outputs(nb_path):
    import json
    import re
    import nbformat
    nb = nbformat.read(str(nb_path), as_version=4)
    outs = [[{k: v for k, v in o.items() if k not in ("execution_count", "metadata")} for o in c.get("outputs", [])]
            for c in nb.cells if c.cell_type == "code"]
    return json.loads(re.sub(r"T_[0-9a-f]{5}", "T_id", json.dumps(outs)))   # pandas Styler's random table ids


def test_reports_rendered_in_one_session_equal_fresh_kernels(tmp_path):
    pytest.importorskip("papermill")
    from reward_auditor import report as R
    from reward_auditor.audit import audit
    run = tmp_path / "run"
    audit("sample", ["length", "noise"], ["EF", "IU"], permutations=200, progress=False, out=run)
    fresh = R.render(run, by="subset", out=tmp_path / "fresh", name="s").notebook
    with R.report_session() as session:
        R.render(run, by="model", out=tmp_path / "shared", name="m")
        km = session.km
        shared = R.render(run, by="subset", out=tmp_path / "shared", name="s").notebook
        assert session.km is km and session.renders == 2            # one kernel start for both reports
        work = session.work
    assert session.km is None and not work.exists() and R._SESSION is None
    assert _normalized_outputs(shared) == _normalized_outputs(fresh)


def test_renderers_import_without_the_iri_grammar():
    import subprocess
    import sys
    code = ("import sys\nfrom reward_auditor import report as R\nR._import_renderers()\n"
            "assert 'papermill' in sys.modules and 'nbconvert' in sys.modules\n"
            "assert 'rfc3987_syntax' not in sys.modules\nimport jsonschema\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
