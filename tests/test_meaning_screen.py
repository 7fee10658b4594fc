"""The meaning check's bfloat16 screen: it decides only what the float32 encoder would decide, stores nothing, and
runs only where it pays."""
import warnings

import numpy as np
import pandas as pd
import pytest

from conftest import shared_file
from reward_auditor import meaning_check as MC
from reward_auditor import perturbations as P
from reward_auditor import store as S
from reward_auditor.data import load_preferences


def _folder():
    if MC.minilm_folder() is None:
        pytest.skip("all-MiniLM-L6-v2 weights package (reward-auditor[semantic]) is not installed")
    pytest.importorskip("torch", reason="the screen runs on torch")
    return MC.minilm_folder()


def _pairs(frame: pd.DataFrame, name: str) -> list[tuple[str, str]]:
    "The (original, rewrite) pieces the check compares for one perturbation of both answers, as `semantic_filter` cuts them."
    view = MC.plain_text if name.startswith("SP") else (lambda t: t)
    out = []
    for f in ("chosen", "rejected"):
        before = frame[f].tolist()
        rngs = [P.item_rng(0, name, P.registry[name].version, i, "response") for i in frame["id"]]
        after = P.registry[name].apply_many(before, rngs)
        out += [(x, y) for b, a in zip(before, after) if b != a for x, y in MC._pieces(view(b), view(a)) if x != y]
    return out


def _sample_answers_st(n: int) -> tuple[list[str], list[str]]:
    "The chosen answers of the sample's first n items and their ST rewrites (seed 0)."
    from reward_auditor.data import load_sample
    frame = load_sample().head(n)
    before = frame["chosen"].tolist()
    rngs = [P.item_rng(0, "ST", P.registry["ST"].version, i, "response") for i in frame["id"]]
    return before, P.registry["ST"].apply_many(before, rngs)


@pytest.mark.slow
def test_screen_stays_within_a_quarter_of_its_margin_on_rmbench():
    """On RM-Bench's own synonym and Markdown rewrites (chat and code, 100 items each: short sentences, and code
    answers cut at 256 tokens) and on a few very short texts, the screened similarity of every compared pair lies
    within SCREEN_MARGIN / 4 of the float32 encoder's: each pair the screen decides, it decides as the exact
    encoder does, with room to spare."""
    folder = _folder()
    pairs = []
    for name in ("chat", "code"):
        frame = load_preferences(shared_file("rm-bench", f"{name}_filtered.json"), format="rmbench").head(100)
        pairs += _pairs(frame, "ST") + _pairs(frame, "SP")
    pairs += [("I", "me"), ("Yes.", "Yeah."), ("", "."), ("42", "forty-two"), ("你好", "您好"), ("OK!", "Okay!")]
    texts = sorted({t for p in pairs for t in p})
    exact = MC.SentenceEmbedder(folder)
    screen = MC.ScreenEmbedder(exact)
    ix = {t: i for i, t in enumerate(texts)}
    ve = np.concatenate([exact.embed_batch(texts[i:i + 64]) for i in range(0, len(texts), 64)])
    vs = np.concatenate([screen.embed_batch(texts[i:i + 64]) for i in range(0, len(texts), 64)])
    assert max(exact.lengths(texts)) == MC.MINILM_MAX_TOKENS          # long texts, cut, are among them
    a, b = [ix[x] for x, _ in pairs], [ix[y] for _, y in pairs]
    gap = np.abs((ve[a] * ve[b]).sum(1) - (vs[a] * vs[b]).sum(1))
    assert len(pairs) > 300 and gap.max() < MC.SCREEN_MARGIN / 4, (len(pairs), gap.max())


def test_screened_filter_keeps_and_undoes_what_the_exact_one_does(monkeypatch):
    """The whole check with the screen forced on (any CPU: only slower without AMX) against the check without it:
    the same texts kept, the same records; the screen embedded every text, the exact encoder only those of pairs
    near the threshold."""
    _folder()
    before, after = _sample_answers_st(40)
    monkeypatch.setenv("REWARD_AUDITOR_STORE", "off")
    runs = {}
    for on in (False, True):
        S._EMBEDDINGS.clear()
        monkeypatch.setattr(MC, "screen_available", lambda: on)
        monkeypatch.setattr(MC, "SCREEN_MIN_TOKENS", 0)
        runs[on] = MC.semantic_filter("ST", before, after), S.embedding_stats()
    (kept0, rec0), stats0 = runs[False]
    (kept1, rec1), stats1 = runs[True]
    assert kept1 == kept0 and rec1 == rec0 and rec0["rejected"] > 0
    assert stats0["screened"] == 0 and stats1["screened"] == stats0["computed"] > 0
    assert stats1["computed"] < stats0["computed"] / 2
    S._EMBEDDINGS.clear()


@pytest.fixture
def sample_st(monkeypatch):
    "The pieces ST gives the first 60 items of the sample (originals, rewrites), the exact embeddings, and their similarities."
    _folder()
    from reward_auditor.data import load_sample
    monkeypatch.setenv("REWARD_AUDITOR_STORE", "off")
    S._EMBEDDINGS.clear()
    pieces = _pairs(load_sample().head(60), "ST")
    xs, ys = [x for x, _ in pieces], [y for _, y in pieces]
    exact = MC.semantic_embeddings()
    yield xs, ys, exact, MC.similarities(xs, ys, 0.8, exact)
    S._EMBEDDINGS.clear()


class _Blurred:
    "A stand-in screen: the exact vectors, each turned a little at random (cosines move by up to about 0.015)."
    def __init__(self, exact, scale=0.12, seed=0):
        self.exact, self.scale, self.rng, self.asked = exact, scale, np.random.default_rng(seed), 0

    def vectors(self, texts):
        self.asked += len(texts)
        v = self.exact.vectors(texts)
        noise = self.rng.standard_normal(v.shape).astype(np.float32)
        v = v + self.scale * noise / np.linalg.norm(noise, axis=1, keepdims=True)
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def test_any_screen_within_the_margin_decides_as_the_exact_encoder(sample_st):
    """`similarities` with a screen that is off by up to ~0.009 (under half the 0.02 margin, so its own check keeps
    it) keeps every pair on the side of the threshold where the exact similarity puts it, at every threshold; pairs
    it could not decide carry the exact value itself, and the rest the screen's."""
    xs, ys, exact, want = sample_st
    blurred = MC._cosines(_Blurred(exact, scale=0.06), xs, ys)
    assert 0.001 < np.abs(blurred - want).max() < MC.SCREEN_MARGIN / 2   # the stand-in really is off, within the margin
    for thr in np.quantile(want, [0.1, 0.3, 0.5, 0.7, 0.9]):
        exact.forget()   # exact vectors already held are never screened: forgotten, every pair goes to the screen first
        screen = _Blurred(exact, scale=0.06)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)   # the screen is trusted: no fallback to exact for all
            got = MC.similarities(xs, ys, thr, exact, screen)
        assert screen.asked == 2 * len(xs)
        assert ((got < thr) == (want < thr)).all()
        near = np.abs(got - thr) <= MC.SCREEN_MARGIN
        assert (got[near] == want[near]).all() and (got[~near] != want[~near]).any()


class _Flat(_Blurred):
    "A broken stand-in screen: one vector for every text (every similarity 1.0, none near a threshold of 0.8)."
    def vectors(self, texts):
        self.asked += len(texts)
        return np.tile(self.exact.vectors(texts[:1]), (len(texts), 1))


def test_a_screen_gone_far_off_is_caught_by_its_spot_checks(sample_st):
    """A screen so wrong that no pair lands near the threshold is still caught: a few screened pairs far from it are
    embedded exactly on every call, so the check warns and every pair gets the float32 encoder's similarity."""
    xs, ys, exact, want = sample_st
    exact.forget()
    with pytest.warns(RuntimeWarning, match="every pair embedded exactly"):
        got = MC.similarities(xs, ys, 0.8, exact, _Flat(exact))
    assert (want < 0.8).any() and np.array_equal(got, want)


def test_screened_vectors_never_reach_the_store(tmp_path, monkeypatch):
    "With the store on, only the exact encoder's vectors are kept: the screen's stay in memory under their own name."
    folder = _folder()
    cache = tmp_path / "user-cache"
    (cache / folder.parent.name).mkdir(parents=True)
    (cache / folder.parent.name / folder.name).symlink_to(folder)
    monkeypatch.setenv("REWARD_AUDITOR_CACHE", str(cache))
    monkeypatch.setenv("REWARD_AUDITOR_STORE", "on")
    monkeypatch.setattr(MC, "screen_available", lambda: True)
    monkeypatch.setattr(MC, "SCREEN_MIN_TOKENS", 0)
    monkeypatch.setattr(MC, "SCREEN_MARGIN", 0.15)   # a wide band: some pairs are screened, then embedded exactly
    monkeypatch.setattr(MC, "SCREEN_SPOT_CHECKS", 0)   # three pairs: spot checks would embed them all exactly
    S._EMBEDDINGS.clear()
    before = ["Kind regards,", "The function returns a list of integers.", "Paris is the capital of France."]
    after = ["Kind considers,", "The function returns a listing of integers.", "Paris is the chief city of France."]
    MC.semantic_filter("ST", before, after)
    store = S.EmbeddingStore(S.store_root() / "embeddings.sqlite")
    models = {m for (m,) in store._con().execute("SELECT DISTINCT model FROM vectors")}
    assert all(MC.SCREEN_ENCODER not in m for m in models)
    assert S.embedding_stats()["screened"] == 6
    exact = MC.semantic_embeddings()
    kept = [t for t in before + after if store.get(exact.model_id, [t])[0] is not None]
    assert 0 < len(kept) < 6   # those near 0.8 were embedded exactly and kept, each vector the float32 encoder's, bit for bit
    for t, v in zip(kept, store.get(exact.model_id, kept)):
        assert np.array_equal(v, MC.SentenceEmbedder(folder).embed_batch([t])[0])
    S._EMBEDDINGS.clear()


def test_screen_runs_only_where_it_pays(monkeypatch):
    "Off by the environment, and for fewer tokens than repay loading torch and the screen."
    _folder()
    monkeypatch.setenv("REWARD_AUDITOR_SCREEN", "off")
    exact = MC.semantic_embeddings()
    assert not MC.screen_available() and MC.screen_embeddings(10 ** 9, exact) is None
    monkeypatch.delenv("REWARD_AUDITOR_SCREEN")
    monkeypatch.setattr(MC, "screen_available", lambda: True)
    assert MC.screen_embeddings(MC.SCREEN_MIN_TOKENS - 1, exact) is None
    assert MC.screen_embeddings(MC.SCREEN_MIN_TOKENS, exact).model.model_id == f"{exact.model_id} {MC.SCREEN_ENCODER}"
    S._EMBEDDINGS.clear()


def test_a_drifted_screen_is_caught_by_the_pairs_both_encoders_saw(sample_st):
    """A screen off by more than half its margin (a changed torch, a broken kernel) is caught on the pairs near the
    threshold, which both encoders embed: a warning, and every pair gets the float32 encoder's similarity."""
    xs, ys, exact, want = sample_st
    drifted = MC._cosines(_Blurred(exact, scale=0.25), xs, ys)   # the same draws as the screen's below
    k = int(np.argmax(np.abs(drifted - want)))
    assert abs(drifted[k] - want[k]) > MC.SCREEN_MARGIN / 2
    thr = float(drifted[k])        # that pair is at the threshold: both encoders embed it, and they disagree
    exact.forget()
    with pytest.warns(RuntimeWarning, match="off the float32 encoder"):
        got = MC.similarities(xs, ys, thr, exact, _Blurred(exact, scale=0.25))
    assert np.array_equal(got, want)


def test_no_screen_for_texts_whose_exact_vectors_are_held(monkeypatch):
    """The screen is weighed on the tokens of texts without an exact vector: a second check of the same rewrites,
    their vectors held from the first, neither asks for the screen (which imports torch) nor changes a decision."""
    _folder()
    before, after = _sample_answers_st(40)
    monkeypatch.setenv("REWARD_AUDITOR_STORE", "off")
    monkeypatch.setattr(MC, "SCREEN_MIN_TOKENS", 1)
    S._EMBEDDINGS.clear()
    monkeypatch.setattr(MC, "screen_available", lambda: False)   # the first check: the float32 encoder alone
    want = MC.semantic_filter("ST", before, after)
    made = S.embedding_stats()["computed"]
    assert made > 0 and want[1]["checked"] > 0

    def no_screen(*a, **k):   # asking loads torch (about a CPU second), building it more
        raise AssertionError("the screen was weighed for texts whose exact vectors are held")
    monkeypatch.setattr(MC, "screen_available", no_screen)
    monkeypatch.setattr(MC, "ScreenEmbedder", no_screen)
    assert MC.semantic_filter("ST", before, after) == want
    assert S.embedding_stats()["computed"] == made     # nothing embedded again
    S._EMBEDDINGS.clear()
