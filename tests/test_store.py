"""Perturb once, audit many: the meaning check's shared embeddings, the cross-run store, rewrite packs, `cache`."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import REPO, shared_file
from reward_auditor import meaning_check as MC
from reward_auditor import perturbations as P
from reward_auditor import store as S
from reward_auditor.data import load_preferences, load_sample
from test_cli import cli


def _minilm():
    if P.minilm_folder() is None:
        pytest.skip("all-MiniLM-L6-v2 weights package (reward-auditor[semantic]) is not installed")
    return P.sentence_embedder()


class TransformersMiniLM:
    "The reference: all-MiniLM-L6-v2 through transformers' AutoTokenizer and BertModel (torch), as the check ran before."
    def __init__(self, folder):
        torch = pytest.importorskip("torch", reason="the transformers reference needs torch")
        transformers = pytest.importorskip("transformers", reason="the reference encoder is transformers' BertModel")
        self.torch, self.tok = torch, transformers.AutoTokenizer.from_pretrained(str(folder))
        self.model = transformers.BertModel.from_pretrained(str(folder), use_safetensors=True).eval()

    def ids(self, texts):
        return self.tok(list(texts), truncation=True, max_length=256)["input_ids"]

    def embed(self, texts, batch_size=32):
        "Unit vectors in fixed batches of 32 in the order given (the path before length-sorted batches)."
        out = []
        for i in range(0, len(texts), batch_size):
            enc = self.tok(texts[i:i + batch_size], padding=True, truncation=True, max_length=256, return_tensors="pt")
            with self.torch.inference_mode():
                h = self.model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            out.append(self.torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1).numpy())
        return np.concatenate(out)


@pytest.fixture
def store_on(tmp_path, monkeypatch):
    "The cross-run store in a fresh user cache (the MiniLM folder is linked in, not unpacked again)."
    cache = tmp_path / "user-cache"
    cache.mkdir()
    folder = P.minilm_folder()
    if folder is not None:
        (cache / folder.parent.name).mkdir()
        (cache / folder.parent.name / folder.name).symlink_to(folder)
    monkeypatch.setenv("REWARD_AUDITOR_CACHE", str(cache))
    monkeypatch.setenv("REWARD_AUDITOR_STORE", "on")
    S._EMBEDDINGS.clear()
    yield cache
    S._EMBEDDINGS.clear()


def _pairs(name, before, after):
    "The (item, original piece, rewritten piece) pairs the meaning check compares."
    view = P.plain_text if name.startswith("SP") else (lambda t: t)
    return [(i, x, y) for i, (b, a) in enumerate(zip(before, after)) if b != a
            for x, y in P._pieces(view(b), view(a)) if x != y]


def _check_against_fixed_batches(frame, monkeypatch):
    """The shipped path (numpy encoder, length-sorted token-budget batches of distinct texts) against the old one
    (transformers' BertModel, fixed batches of 32 in data order, originals and rewrites embedded separately): the
    same token ids, similarities within 1e-6, the same keep/restore verdicts."""
    monkeypatch.setenv("REWARD_AUDITOR_STORE", "off")
    ours = _minilm()
    old = TransformersMiniLM(ours.folder)
    S._EMBEDDINGS.clear()
    for name in ("ST", "SP"):
        p = P.registry[name]
        for f in ("chosen", "rejected"):
            before = frame[f].tolist()
            rngs = [P.item_rng(0, name, p.version, i, f) for i in frame["id"]]
            after = p.apply_many(before, rngs, **p.defaults)
            pairs = _pairs(name, before, after)
            if not pairs:            # nothing rewritten in this field (e.g. answers already in Markdown for SP)
                continue
            xs, ys = [x for _, x, _ in pairs], [y for _, _, y in pairs]
            assert [e.ids for e in ours.tok.encode_batch(xs + ys)] == old.ids(xs + ys)   # the cut at 256 too
            sim_old = (old.embed(xs) * old.embed(ys)).sum(1)
            new = S.Embeddings(ours.model_id, lambda: ours, budget=P.EMBED_TOKEN_BUDGET, store=False)
            v = new.vectors(xs + ys)
            sim_new = (v[:len(xs)] * v[len(xs):]).sum(1)
            assert np.abs(sim_new - sim_old).max() < 1e-6, (name, f)
            thr = P.SEMANTIC_THRESHOLDS[name]
            worst_old, worst_new = {}, {}
            for (i, _, _), a, b in zip(pairs, sim_old, sim_new):
                worst_old[i], worst_new[i] = min(worst_old.get(i, 1.0), a), min(worst_new.get(i, 1.0), b)
            assert {i for i, s in worst_old.items() if s < thr} == {i for i, s in worst_new.items() if s < thr}
            assert new.stats["computed"] == len(set(xs + ys)) <= len(xs) + len(ys)   # each distinct text once
            kept, _ = P.semantic_filter(name, before, after)       # the shipped path decides the same
            assert kept == [b if i in {j for j, s in worst_old.items() if s < thr} else a
                            for i, (b, a) in enumerate(zip(before, after))]
            # the device path (torch on the audit's accelerator), here on the CPU: the same similarities and verdicts
            dev = S.Embeddings("device", lambda: MC.TorchSentenceEmbedder(ours.folder, "cpu"),
                               budget=MC.EMBED_DEVICE_BUDGET, store=False)
            v = dev.vectors(xs + ys)
            assert np.abs((v[:len(xs)] * v[len(xs):]).sum(1) - sim_old).max() < 1e-6, (name, f)
            assert P.semantic_filter(name, before, after, "cpu")[0] == kept


def test_shared_embeddings_match_fixed_batches_on_the_sample(monkeypatch):
    _check_against_fixed_batches(load_sample().head(40), monkeypatch)


def test_pairs_with_the_same_token_ids_are_not_embedded(monkeypatch):
    """Spacing, case and a Markdown layout leave the token ids as they were: such a pair's similarity is 1 by
    construction, so the check embeds only the pieces whose words changed (before, it embedded all of them)."""
    _minilm()
    monkeypatch.setenv("REWARD_AUDITOR_STORE", "off")
    S._EMBEDDINGS.clear()
    after = ["It  is FINAL. The function returns a listing of integers."]
    kept, rec = P.semantic_filter("ST", ["It is final. The function returns a list of integers."], after)
    assert P.semantic_embeddings().stats["computed"] == 2          # the two sentences with "list" and "listing"
    assert (rec["checked"], rec["rejected"], kept) == (1, 0, after)
    md = "## Steps\n\n1. **Boil** the water.\n2. Add the pasta."
    kept, rec = P.semantic_filter("SP", ["Boil the water. Add the pasta."], [md])
    assert P.semantic_embeddings().stats["computed"] == 2          # nothing more: SP's layout is not a token
    assert (rec["checked"], rec["rejected"], kept) == (1, 0, [md])
    S._EMBEDDINGS.clear()


@pytest.mark.slow
def test_shared_embeddings_match_fixed_batches_on_rmbench(monkeypatch):
    path = shared_file("rm-bench", "chat_filtered.json")
    _check_against_fixed_batches(load_preferences(path, format="rmbench").head(200), monkeypatch)


AUDIT = """
import json, sys
from reward_auditor.audit import audit
from reward_auditor.data import load_sample
r = audit(load_sample().head(24), sys.argv[1], ["EF", "PH", "ST", "SP", "LE"], permutations=200, out=sys.argv[2],
          progress=False, semantic_check=sys.argv[3] == "on")
print(json.dumps({"store": r.manifest["perturbation_store"], "check": r.manifest["semantic_check"], "torch": "torch" in sys.modules,
                  "transformers": "transformers" in sys.modules}))
"""


def _audit_in_process(scorer, out, check="on"):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", AUDIT, scorer, str(out), check], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_second_audit_perturbs_nothing_embeds_nothing_imports_no_torch(store_on, tmp_path):
    "A second audit of the same data with another scorer into another folder takes every condition from the store."
    _minilm()
    first = _audit_in_process("length", tmp_path / "a")
    assert set(first["store"]["conditions"].values()) == {"made"} and first["store"]["embeddings"]["computed"] > 0
    assert first["check"] == "on" and not first["torch"] and not first["transformers"]   # the numpy encoder
    second = _audit_in_process("overlap", tmp_path / "b")
    assert set(second["store"]["conditions"].values()) == {"store"}
    assert second["store"]["embeddings"]["computed"] == 0 and second["store"]["embeddings"]["loads"] == 0
    assert not second["torch"] and not second["transformers"]    # a control scorer, every condition stored
    a = pd.read_parquet(tmp_path / "a" / "texts.parquet")
    b = pd.read_parquet(tmp_path / "b" / "texts.parquet")
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    info = S.store_info()
    assert info["conditions"] == 5 and info["embeddings"] > 0


def test_audit_without_the_meaning_check_loads_no_embedder_and_no_torch(store_on, tmp_path):
    "The meaning check is on by default; switched off, a first audit with a control scorer embeds nothing and imports no torch."
    import inspect
    from reward_auditor.audit import audit
    from reward_auditor.cli import build_parser
    assert inspect.signature(audit).parameters["semantic_check"].default is True
    assert build_parser().parse_args(["perturb", "--data", "x.jsonl", "--out", "p.parquet"]).semantic_check == "on"
    first = _audit_in_process("length", tmp_path / "a", check="off")
    assert first["check"] == "off" and set(first["store"]["conditions"].values()) == {"made"}
    assert first["store"]["embeddings"]["loads"] == 0 and first["store"]["embeddings"]["computed"] == 0
    assert not first["torch"] and not first["transformers"]


def test_corrupt_store_entry_is_made_again(store_on, tmp_path):
    from reward_auditor.audit import make_conditions
    data = load_sample().head(12)
    rep1, rep2, rep3 = {}, {}, {}
    c1, _ = make_conditions(data, ["PH", "CN"], seed=3, report=rep1)
    c2, _ = make_conditions(data, ["PH", "CN"], seed=3, report=rep2)
    assert rep1["conditions"] == {"PH": "made", "CN": "made"} and rep2["conditions"] == {"PH": "store", "CN": "store"}
    for n in ("PH", "CN"):
        pd.testing.assert_frame_equal(c1[n].frame, c2[n].frame, check_exact=True)
        assert c1[n].record == c2[n].record
    for f in (store_on / "store" / "conditions").glob("*/*.parquet"):
        f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2])       # torn entries
    c3, _ = make_conditions(data, ["PH", "CN"], seed=3, report=rep3)
    assert rep3["conditions"] == {"PH": "made", "CN": "made"}
    pd.testing.assert_frame_equal(c1["PH"].frame, c3["PH"].frame, check_exact=True)
    rep4 = {}
    make_conditions(data, ["PH"], seed=4, report=rep4)                 # another seed is another condition
    assert rep4["conditions"] == {"PH": "made"}


def test_the_device_path_keeps_its_conditions_apart(store_on, monkeypatch):
    """The meaning check on the scorers' accelerator (torch; here forced onto the CPU) keeps and restores what the
    numpy encoder does, but its vectors are other bytes: the store keys its conditions and vectors apart."""
    from reward_auditor.audit import make_conditions
    _minilm()
    pytest.importorskip("transformers", reason="the device path runs transformers' BertModel")
    data = load_sample().head(20)
    rep = [{}, {}, {}]
    dev, _ = make_conditions(data, ["ST"], seed=0, embed_device="cpu", report=rep[0])
    cpu, _ = make_conditions(data, ["ST"], seed=0, report=rep[1])
    again, _ = make_conditions(data, ["ST"], seed=0, embed_device="cpu", report=rep[2])
    assert [r["conditions"]["ST"] for r in rep] == ["made", "made", "store"]
    assert rep[0]["embeddings"]["computed"] > 0 and rep[1]["embeddings"]["computed"] > 0
    assert rep[2]["embeddings"]["computed"] == 0
    backends = [c["ST"].record["semantic_check"]["backend"] for c in (dev, cpu, again)]
    assert "transformers-bert/1 torch" in backends[0] and backends[0] == backends[2] and "numpy-bert" in backends[1]
    pd.testing.assert_frame_equal(dev["ST"].frame, cpu["ST"].frame, check_exact=True)   # the same verdicts
    assert {k: v for k, v in dev["ST"].record["semantic_check"].items() if k != "backend"} == \
        {k: v for k, v in cpu["ST"].record["semantic_check"].items() if k != "backend"}


def test_audit_embeds_on_its_scorers_accelerator(store_on, monkeypatch, tmp_path):
    "The audit hands the meaning check its scorers' device (a GPU there; the CPU stands in for it here)."
    import reward_auditor.audit as A
    _minilm()
    pytest.importorskip("transformers", reason="the device path runs transformers' BertModel")
    Dev = type("Dev", (), {})
    gpu, cpu = Dev(), Dev()
    gpu.device, cpu.device = "cuda:1", "cpu"
    assert A.scorers_device([cpu, gpu]) == "cuda:1" and A.scorers_device([cpu, object()]) is None
    monkeypatch.setattr(A, "scorers_device", lambda scorers: "cpu")
    r = A.audit(load_sample().head(12), "length", ["ST", "EF"], permutations=100, out=tmp_path / "run", progress=False)
    assert "transformers-bert/1 torch" in r.manifest["perturbations"]["ST"]["semantic_check"]["backend"]


def test_perturb_embeds_on_the_device_it_is_given(store_on, tmp_path):
    "`perturb --semantic-device` makes a pack with the meaning check on that device (torch); a device not here: one line."
    _minilm()
    pytest.importorskip("transformers", reason="the device path runs transformers' BertModel")
    pack = tmp_path / "pack.parquet"
    r = cli("perturb", "--data", "sample", "--perturbations", "ST", "--semantic-device", "cpu", "--out", pack, "-q")
    assert r.returncode == 0, r.stderr
    assert "transformers-bert/1 torch" in S.read_pack(pack)[1]["ST"]["record"]["semantic_check"]["backend"]
    r = cli("perturb", "--data", "sample", "--perturbations", "ST", "--semantic-device", "tpu", "--out", pack, "-q")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "reward-auditor: error: unknown device 'tpu': use cpu, cuda, cuda:N or mps (--semantic-device)"], r.stderr
    r = cli("perturb", "--data", "sample", "--perturbations", "ST", "--semantic-device", "cuda:99", "--out", pack, "-q")
    assert r.returncode == 2 and "(--semantic-device)" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_rewrite_pack_round_trips_bitwise(tmp_path):
    "perturb --out pack.parquet, then audit --conditions pack.parquet: the audit made in one go, bit for bit."
    pack = tmp_path / "pack.parquet"
    r = cli("perturb", "--data", "sample", "--perturbations", "EF,PH,LE", "--out", pack, "-q")
    assert r.returncode == 0, r.stderr
    assert S.is_pack(pack) and len(pd.read_parquet(pack)) == 3 * len(load_sample())   # the long layout, as before
    common = ("--scorer", "length", "-B", "200", "--no-report", "-q")
    r1 = cli("audit", "--data", "sample", "--perturbations", "EF,PH,LE", "--out", tmp_path / "direct", *common)
    r2 = cli("audit", "--conditions", pack, "--out", tmp_path / "packed", *common)
    assert r1.returncode == 0 and r2.returncode == 0, r1.stderr + r2.stderr
    for f in ("results.parquet", "items.parquet", "texts.parquet"):
        a, b = pd.read_parquet(tmp_path / "direct" / f), pd.read_parquet(tmp_path / "packed" / f)
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    ma = json.loads((tmp_path / "direct" / "manifest.json").read_text())
    mb = json.loads((tmp_path / "packed" / "manifest.json").read_text())
    assert ma["perturbations"] == mb["perturbations"] and ma["data"]["sha256"] == mb["data"]["sha256"]


def test_cache_info_and_prune(store_on, tmp_path):
    from reward_auditor.audit import make_conditions
    make_conditions(load_sample(), ["EF", "PH", "IU"], seed=0)
    r = cli("cache", "info")      # the fixture's user cache, through the environment
    assert r.returncode == 0 and "conditions: 3" in r.stdout, r.stderr
    r = cli("cache", "prune")
    assert r.returncode == 2 and "--max-size" in r.stderr
    r = cli("cache", "prune", "--max-size", "0")
    assert r.returncode == 0 and "pruned 3 condition(s)" in r.stdout, r.stderr
    assert S.store_info()["conditions"] == 0


def test_semantic_check_off_is_recorded_and_reported(tmp_path):
    from reward_auditor.audit import audit
    from reward_auditor.report import legend_html
    data = load_sample().head(12)
    S._EMBEDDINGS.clear()
    before = S.embedding_stats()["computed"]
    res = audit(data, "length", ["SP", "EF"], permutations=100, progress=False, semantic_check=False)
    assert S.embedding_stats()["computed"] == before                 # nothing was embedded: the check did not run
    sp = P.perturb(data, ["SP"], seed=0, semantic_check=False)["SP"].frame
    raw = P.registry["SP"].apply_many(data["chosen"].tolist(), [P.item_rng(0, "SP", P.registry["SP"].version, i, "chosen")
                                                                for i in data["id"]], **P.registry["SP"].defaults)
    assert sp["chosen"].tolist() == raw                              # every rewrite kept, none restored
    assert res.manifest["semantic_check"] == "off"
    assert res.manifest["perturbations"]["SP"]["semantic_check"]["note"] == P.SEMANTIC_OFF
    assert "not checked for a change of meaning" in legend_html(res)
    assert "SP" in res.manifest["cpu_seconds"]["perturb"] and "length" in res.manifest["cpu_seconds"]["score"]


def test_pool_runs_the_meaning_check_once_in_the_parent():
    "Split over processes, ST and SP are rewritten in the workers and checked here, byte-identical to the whole."
    from reward_auditor.engines import PerturbPool
    _minilm()
    data = load_sample().head(48)
    whole = P.perturb(data, ["ST", "SP"], seed=5, semantic_check=True)
    S.release_embedders()                       # forget the vectors: the split must embed again, here
    before = S.embedding_stats()["computed"]
    with PerturbPool(workers=2, min_items=16) as pool:
        split = pool.perturb(data, ["ST", "SP"], seed=5, semantic_check=True)
    assert S.embedding_stats()["computed"] > before
    for n in ("ST", "SP"):
        pd.testing.assert_frame_equal(split[n].frame, whole[n].frame, check_exact=True)
        assert split[n].record == whole[n].record


def test_embedder_uses_one_blas_thread_when_the_pools_ask():
    "REWARD_AUDITOR_EMBED_THREADS=1 (set in perturbation pool workers) caps numpy's BLAS threads after its import."
    pytest.importorskip("threadpoolctl")
    _minilm()
    code = ("from threadpoolctl import threadpool_info\n"
            "from reward_auditor.meaning_check import SentenceEmbedder, minilm_folder\n"
            "SentenceEmbedder(minilm_folder())\n"
            "print(max(i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'))")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    env.update(PYTHONPATH=str(REPO), REWARD_AUDITOR_EMBED_THREADS="1", OPENBLAS_NUM_THREADS="2")   # numpy starts with 2
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-1] == "1"


def test_embedder_tokenizes_each_text_once():
    "`lengths` (for the batches) and `token_ids` (for each batch) share one tokenization; the vectors are unchanged."
    folder = _minilm().folder
    emb, seen = P.SentenceEmbedder(folder), []

    class Counting:
        def __init__(self, tok):
            self.tok = tok

        def encode_batch(self, texts):
            seen.extend(texts)
            return self.tok.encode_batch(texts)

    emb.tok = Counting(emb.tok)
    texts = ["Kind regards,", "The function returns a list of integers.", "Boil the water.", "Paris. " * 40]
    v = S.Embeddings("count", lambda: emb, budget=64, store=False).vectors(texts)
    assert sorted(seen) == sorted(texts)                    # before: every text twice
    ref = P.SentenceEmbedder(folder)
    assert np.abs(v - np.concatenate([ref.embed_batch([t]) for t in texts])).max() < 1e-6


def test_vectors_of_another_encoder_version_are_never_read_back(store_on, monkeypatch):
    """A vector stored by an older encoder (same weights, other `MINILM_ENCODER`) is missed and made again; one
    stored under the current identity is read back (so the store is consulted, only not across encoders)."""
    from reward_auditor import meaning_check
    folder = _minilm().folder
    current, encoder = P.minilm_id(folder), meaning_check.MINILM_ENCODER
    monkeypatch.setattr(meaning_check, "MINILM_ENCODER", "numpy-bert/2")
    older = P.minilm_id(folder)
    monkeypatch.setattr(meaning_check, "MINILM_ENCODER", encoder)
    assert older != current and P.MINILM_ENCODER in current
    wrong = np.eye(1, 384, dtype=np.float32)                    # a unit vector no text embeds to
    db = S.EmbeddingStore(S.store_root() / "embeddings.sqlite")
    db.put(older, ["Kind regards,"], wrong)
    db.put(current, ["Boil the water."], wrong)
    S._EMBEDDINGS.clear()
    emb = P.semantic_embeddings()
    v = emb.vectors(["Kind regards,", "Boil the water."])
    assert emb.stats["computed"] == 1 and emb.stats["from_store"] == 1
    assert np.abs(v[0] - wrong[0]).max() > 0.1 and np.array_equal(v[1], wrong[0])
    S._EMBEDDINGS.clear()


RELEASE = """
import gc, weakref
gc.disable()                                     # only the collections release_embedders runs itself
from reward_auditor import meaning_check as MC, store as S
e = S.Embeddings("device-model", load=lambda: MC.TorchSentenceEmbedder(MC.minilm_folder(), "cpu"), store=False)
S._EMBEDDINGS["device-model"] = e
e.vectors(["Kind regards,"])
alive = weakref.ref(e.model)
S.release_embedders()
print(alive() is None and e._model is None)
"""


def test_release_frees_the_device_encoder_it_loaded():
    """The device encoder is built where torch and transformers are first imported, and that import leaves
    reference cycles holding the frame that built it: released, it kept its (GPU) memory until some later
    collection. `release_embedders` collects when such a model was loaded (and only then, see below)."""
    _minilm()
    pytest.importorskip("transformers", reason="the device path runs transformers' BertModel")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "REWARD_AUDITOR_STORE": "off"}
    r = subprocess.run([sys.executable, "-c", RELEASE], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "True"     # before: False, the encoder still alive


def test_release_frees_the_encoder_without_a_collection(monkeypatch):
    """Releasing the embedders lets the MiniLM encoder go by reference counting alone (no reference cycle), so no
    full garbage collection (~0.1-0.2 s) is needed; the vectors are forgotten too."""
    import gc
    import weakref
    folder = _minilm().folder
    e = S.Embeddings("test-model", load=lambda: P.SentenceEmbedder(folder), store=False)
    monkeypatch.setattr(S, "_EMBEDDINGS", {"test-model": e})      # no model another test left loaded
    e.vectors(["Kind regards,"])
    alive, calls = weakref.ref(e.model), []
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append(1) or 0)
    gc.disable()
    try:
        S.release_embedders()
        assert alive() is None and e._model is None and not e._mem
        assert calls == []                                        # before: a full collection on every release
    finally:
        gc.enable()

def test_a_pack_of_step_data_without_the_original_steps_is_refused(tmp_path, monkeypatch):
    "A pack that kept only the texts (made before the step lists were kept) would audit rewritten steps as originals."
    from reward_auditor.steps import parse_solutions, solution_pairs
    rows = [{"prompt": "What is 2 + 3?", "completions": ["2 + 3 = 5.", "The answer is 5."], "labels": [True, True]},
            {"prompt": "What is 2 + 3?", "completions": ["2 + 3 = 6.", "The answer is 6."], "labels": [False, False]}]
    pairs = solution_pairs(parse_solutions(rows)[0])
    conds = P.perturb(pairs, ["LE"], seed=0)
    S.write_pack(tmp_path / "new.parquet", pairs, conds)
    original, _ = S.read_pack(tmp_path / "new.parquet")
    assert [list(v) for v in original["chosen_steps"]] == pairs["chosen_steps"].tolist()  # not LE's rewrite
    assert conds["LE"].frame["chosen_steps"].tolist() != pairs["chosen_steps"].tolist()
    monkeypatch.setattr(S, "_TEXT_FIELDS", ("prompt", "chosen", "rejected", "history"))  # the layout before
    S.write_pack(tmp_path / "old.parquet", pairs, conds)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="does not keep the original chosen_steps"):
        S.read_pack(tmp_path / "old.parquet")
    r = cli("audit", "--conditions", tmp_path / "old.parquet", "--scorer", "length", "--out", tmp_path / "o", "-q",
            "--no-report")
    assert r.returncode == 2 and "original_chosen_steps" in r.stderr and "Traceback" not in r.stderr, r.stderr
