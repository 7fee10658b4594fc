"""The reward-model family registry: every family loads from a tiny folder through `from_pretrained` exactly as a hub
folder would, and its margins equal a direct computation through that family's own interface."""
import hashlib
import json
import warnings

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_models import (HEAD_FAMILIES, LDL_BINS, OWN_PATH_FAMILIES, REMOTE_FAMILIES, tiny_family,  # noqa: E402
                         tiny_folders, tiny_tokenizer)

from reward_auditor import families as F  # noqa: E402
from reward_auditor.scorers import ScorerError, load_scorer  # noqa: E402

# every family the registry lists is built and checked here; test_cli_lists_exactly_the_tested_families pins that
# (the process reward models' families are built and checked in test_prm.py)
PRM_FAMILIES = ("prm-token-classification", "qwen2.5-math-prm", "math-shepherd")  # built in test_prm.py
TESTED = sorted([*REMOTE_FAMILIES, *HEAD_FAMILIES, *OWN_PATH_FAMILIES, "sequence-classifier", "pairrm",
                 "pair-preference", *PRM_FAMILIES])
BUILT_HERE = [f for f in TESTED if f not in PRM_FAMILIES]

# RLHFlow's published context template for its pair-preference model (a data format, used here as the reference)
RLHFLOW_PLAIN_TEMPLATE = ("\n{% for message in messages %}{% if loop.index0 % 2 == 0 %}\n\n<turn> user\n "
                          "{{ message['content'] }}{% else %}\n\n<turn> assistant\n {{ message['content'] }}"
                          "{% endif %}{% endfor %}\n\n\n")

FRAME = pd.DataFrame({
    "id": ["a", "b", "c"],
    "prompt": ["What is the capital of France?", "Explain how a binary search works.", "Compute 12 + 30."],
    "chosen": ["The capital of France is Paris.", "Halve the sorted list each step.", "12 + 30 = 42."],
    "rejected": ["It is Lyon.", "Look at every number in turn, one by one, until done.", "It is 7."],
})


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return tiny_folders(tmp_path_factory.mktemp("families"), tiny_family, BUILT_HERE)


def _messages(prompt, response):
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]


def _direct_remote(name, folder, pairs):
    "Rewards through each family's own published interface, one text at a time, no padding."
    import transformers
    auto = getattr(transformers, REMOTE_FAMILIES[name][3])
    model = auto.from_pretrained(str(folder), trust_remote_code=True, dtype=torch.float32).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    out = []
    with torch.no_grad():
        for p, r in pairs:
            if name == "internlm2-reward":
                out.append(model.get_score(tok, _messages(p, r)))
                continue
            if name == "eurus-rm":
                ids = tok(f"[INST] {p} [/INST] {r}")["input_ids"]
            else:
                ids = tok(tok.apply_chat_template(_messages(p, r), tokenize=False), add_special_tokens=False)["input_ids"]
            o = model(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long))
            v = {"armorm": lambda: o.score, "qrm": lambda: o.score, "urm": lambda: o.logits[0][0],
                 "grm": lambda: o[2], "worldpm": lambda: o[0], "eurus-rm": lambda: o}[name]()
            out.append(float(v.reshape(-1)[0]))
    return np.array(out)


def _direct_head(name, folder, pairs):
    "Backbone from the checkpoint's weights + the head as plain matrix products, read at the last token."
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, LlamaConfig, LlamaModel
    backbone, head, layers, _, _ = HEAD_FAMILIES[name]
    cfg = LlamaConfig.from_pretrained(str(folder))
    sd = load_file(str(folder / "model.safetensors"))
    model = LlamaModel(cfg)
    model.load_state_dict({k[len(backbone) + 1:]: v for k, v in sd.items() if k.startswith(backbone + ".")})
    model.eval()
    tok = AutoTokenizer.from_pretrained(str(folder))
    out = []
    for p, r in pairs:
        if name == "ultrarm":
            text = f"Human: {p}\nAssistant: {r}"
        elif name.startswith("beaver"):  # safe-rlhf trains on prompt + answer + EOS and reads the EOS position
            text = f"BEGINNING OF CONVERSATION: USER: {p} ASSISTANT:{r}{tok.eos_token}"
        else:
            text = tok.apply_chat_template(_messages(p, r), tokenize=False)
        ids = tok(text, add_special_tokens=not text.startswith(tok.bos_token))["input_ids"]
        with torch.no_grad():
            x = model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
            if len(layers) == 1:
                v = sd[f"{head}.weight"] @ x + (sd[f"{head}.bias"] if f"{head}.bias" in sd else 0)
            else:
                hdn = torch.relu(sd[f"{head}.0.weight"] @ x + sd[f"{head}.0.bias"])
                v = sd[f"{head}.2.weight"] @ hdn + sd[f"{head}.2.bias"]
        out.append(float(v[0]) * (-1 if name == "beaver-cost" else 1))
    return np.array(out)


def _score(folder, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sc = load_scorer(str(folder), device="cpu", dtype="float32", **kw)
        return sc, sc.score_pairs(FRAME, progress=False)


@pytest.mark.parametrize("name", [f for f in BUILT_HERE if f not in ("pair-preference",)])
def test_family_recognised_from_config_and_weights(folders, name):
    kind = "lm-reward" if name == "nemotron-reward" else None
    assert F.family_of(str(folders[name]), kind=kind).name == name
    if kind:  # a plain causal-LM config is never guessed to be a reward model
        assert F.family_of(str(folders[name])) is None


@pytest.mark.parametrize("name", sorted(REMOTE_FAMILIES))
def test_remote_code_refused_without_the_flag(folders, name):
    with pytest.raises(ScorerError, match="trust-remote-code"):
        load_scorer(str(folders[name]), device="cpu")


@pytest.mark.parametrize("name", sorted(REMOTE_FAMILIES))
def test_remote_family_margins_equal_its_own_interface(folders, name):
    sc, out = _score(folders[name], trust_remote_code=True)
    assert isinstance(sc, F.FamilyScorer) and sc.settings()["family"] == name
    pairs_c = list(zip(FRAME["prompt"], FRAME["chosen"]))
    pairs_r = list(zip(FRAME["prompt"], FRAME["rejected"]))
    rc, rr = _direct_remote(name, folders[name], pairs_c), _direct_remote(name, folders[name], pairs_r)
    np.testing.assert_allclose(out["reward_chosen"], rc, atol=1e-5)
    np.testing.assert_allclose(out["margin"], rc - rr, atol=1e-5)
    assert np.ptp(out["margin"]) > 1e-4  # the tiny model does discriminate
    # the manifest records that remote code ran, and which code
    rec = sc.settings()["remote_code"]
    assert rec["used"] is True
    for fname, digest in rec["files"].items():
        assert digest == hashlib.sha256((folders[name] / fname).read_bytes()).hexdigest()
    assert any(f.startswith("modeling_") for f in rec["files"])


@pytest.mark.parametrize("name", sorted(HEAD_FAMILIES))
def test_built_in_head_margins_equal_a_direct_computation(folders, name):
    sc, out = _score(folders[name])  # no remote code needed
    assert sc.settings()["family"] == name and "remote_code" not in sc.settings()
    rc = _direct_head(name, folders[name], list(zip(FRAME["prompt"], FRAME["chosen"])))
    rr = _direct_head(name, folders[name], list(zip(FRAME["prompt"], FRAME["rejected"])))
    np.testing.assert_allclose(out["margin"], rc - rr, atol=1e-5)


def test_objective_choice_is_recorded(folders):
    sc, out = _score(folders["urm"], trust_remote_code=True)  # URM: one gated reward column
    assert sc.describe()["output_columns"] == 1 and sc.describe()["readout_used"] == "logits"
    fam = F.register(F.Family("armo-objectives", architectures=("LlamaForRewardModelWithGating",), readout=("rewards",),
                              needs="--trust-remote-code"))
    try:
        sc0, out0 = _score(folders["armorm"], trust_remote_code=True)
        sc1, out1 = _score(folders["armorm"], trust_remote_code=True, objective=1)
    finally:
        F.FAMILIES.remove(fam)
    assert sc0.describe()["output_columns"] == 4 and sc0.settings()["objective"] == 0
    assert sc1.settings()["objective"] == 1 and sc1.fingerprint != sc0.fingerprint
    assert not np.allclose(out1["margin"], out0["margin"])


def test_plain_classifier_keeps_the_default_path(folders):
    from reward_auditor.scorers import DiscriminativeScorer
    sc, out = _score(folders["sequence-classifier"])
    assert type(sc) is DiscriminativeScorer and np.isfinite(out["margin"]).all()


def test_settings_record_tokenization(folders):
    sc, _ = _score(folders["armorm"], trust_remote_code=True)
    s = sc.describe()["tokenization"]
    tok_template = sc.tokenizer.chat_template
    assert s["template_sha256"] == hashlib.sha256(json.dumps(tok_template).encode()).hexdigest()
    assert s["padding_side"] == "right" and s["truncation_side"] == "left" and s["dtype"] == "float32"
    assert "attn_implementation" in s


def test_family_cap_is_the_smaller_limit(folders, tmp_path):
    import shutil
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the tiny folder has 512 positions: the model's own limit is below the family's cap of 2048
        assert load_scorer(str(folders["starling-rm"]), device="cpu").max_length == 512
        assert load_scorer(str(folders["starling-rm"]), device="cpu", max_length=100).max_length == 100
        big = shutil.copytree(folders["starling-rm"], tmp_path / "starling-4096")
        cfg = json.loads((big / "config.json").read_text())
        (big / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": 4096}))
        sc = load_scorer(str(big), device="cpu")
        assert sc.max_length == 2048 and "family starling-rm cap 2048" in sc.limit_source


def test_reward_token_appended_once_and_kept_by_truncation(folders):
    sc, _ = _score(folders["internlm2-reward"], trust_remote_code=True)
    rid = sc.config_dict["reward_token_id"]
    ids, _ = sc._encode_item("Hello there", "General Kenobi")
    assert ids[-1] == rid and ids.count(rid) == 1
    sc.max_length = 8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (_, vals), = list(sc._iter_scores([("Hello there " * 20, "General Kenobi")], progress=False))
    assert np.isfinite(vals).all() and sc.last_report["truncated"] == 1


def test_doubled_bos_is_fixed_by_construction(tmp_path):
    "A template that writes BOS, tokenized by a tokenizer that adds BOS too: exactly one BOS reaches the model."
    folder = tiny_family(tmp_path / "armorm", "armorm", add_bos=True)
    sc, out = _score(folder, trust_remote_code=True)
    tok = sc.tokenizer
    text = tok.apply_chat_template(_messages("Hi", "Hello"), tokenize=False)
    assert text.startswith(tok.bos_token)
    assert tok(text)["input_ids"][:2] == [tok.bos_token_id] * 2  # the naive way doubles it
    ids, _ = sc._encode_item("Hi", "Hello")
    assert ids[0] == tok.bos_token_id and ids[1] != tok.bos_token_id
    assert ids == tok(text, add_special_tokens=False)["input_ids"]
    assert sc.describe()["tokenization"]["bos"] == {"template_writes": True, "tokenizer_adds": True, "doubled_fixed": True}


def test_unreadable_output_names_model_output_and_the_fix(folders):
    fam = F.Family("my-rm", architectures=("LlamaForRewardModelWithGating",), readout=("reward",))
    from reward_auditor.families import extract  # noqa: F401
    out = {"score": torch.zeros(2, 1), "rewards": torch.zeros(2, 4)}
    with pytest.raises(ScorerError) as e:
        fam.read(out, 2, "tiny-armo", "LlamaForRewardModelWithGating")
    msg = str(e.value)
    assert "tiny-armo" in msg and "score=(2, 1)" in msg and "register(Family(" in msg and "\n" not in msg


def test_user_registered_family_takes_precedence(folders):
    fam = F.register(F.Family("armo-rewards0", architectures=("LlamaForRewardModelWithGating",), readout=("rewards",)))
    try:
        sc, out = _score(folders["armorm"], trust_remote_code=True)
        assert sc.settings()["family"] == "armo-rewards0" and sc.describe()["output_columns"] == 4
    finally:
        F.FAMILIES.remove(fam)
    assert F.family_of(str(folders["armorm"])).name == "armorm"


def test_pairrm_margin_is_its_log_odds_in_both_orders(folders):
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, DebertaV2Config, DebertaV2Model
    sc, out = _score(folders["pairrm"])
    assert isinstance(sc, F.PairRMScorer) and "remote_code" not in sc.settings()
    swapped = FRAME.rename(columns={"chosen": "rejected", "rejected": "chosen"})
    # The swapped frame is scored in other batches (other padding), so the float32 logits agree only to rounding:
    # a few ulps of logits of order one, not bitwise.
    np.testing.assert_allclose(sc.score_pairs(swapped, progress=False)["margin"], -out["margin"], atol=1e-6)
    folder = folders["pairrm"]
    cfg = DebertaV2Config.from_pretrained(str(folder))
    sd = load_file(str(folder / "model.safetensors"))
    enc = DebertaV2Model(cfg)
    enc.load_state_dict({k[len("pretrained_model."):]: v for k, v in sd.items() if k.startswith("pretrained_model.")})
    enc.eval()
    tok = AutoTokenizer.from_pretrained(str(folder))

    def z(p, a, b):
        ids = tok.encode("<|source|>" + p) + tok.encode("<|candidate1|>" + a) + tok.encode("<|candidate2|>" + b)
        with torch.no_grad():
            h = enc(input_ids=torch.tensor([ids])).last_hidden_state[0]
        at = {t: h[ids.index(tok.convert_tokens_to_ids(t))] for t in F.PAIRRM_PREFIXES}

        def head(x):
            return sd["head_layer.4.weight"] @ torch.tanh(sd["head_layer.1.weight"] @ x + sd["head_layer.1.bias"]) \
                + sd["head_layer.4.bias"]
        src = at["<|source|>"]
        return float(head(torch.cat([src, at["<|candidate1|>"]])) - head(torch.cat([src, at["<|candidate2|>"]])))

    want = [0.5 * (z(p, c, r) - z(p, r, c)) for p, c, r in zip(FRAME["prompt"], FRAME["chosen"], FRAME["rejected"])]
    np.testing.assert_allclose(out["margin"], want, atol=1e-5)
    assert np.ptp(out["margin"]) > 1e-5


def test_pairwise_scorer_is_symmetric_and_equals_the_log_odds(folders, tmp_path):
    sc, out = _score(folders["pair-preference"], kind="pairwise")
    swapped = FRAME.rename(columns={"chosen": "rejected", "rejected": "chosen"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out2 = sc.score_pairs(swapped, progress=False)
    # the swapped frame is scored again in other batches (other padding): float32 rounding of logits of order
    # one, not bitwise (bitwise holds only for a cache hit or the same batches)
    np.testing.assert_allclose(out2["margin"], -out["margin"], atol=1e-6)
    # direct: log-odds of "A" vs "B" at the next token, chosen first and chosen second
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(str(folders["pair-preference"]), dtype=torch.float32).eval()
    tok = sc.tokenizer
    a, b = tok.encode("A", add_special_tokens=False)[0], tok.encode("B", add_special_tokens=False)[0]

    # the published usage: the context rendered by a plain Jinja template (a second tokenizer), the prompt by the
    # model's chat template with the assistant header after it, every BOS removed, A/B read at the last position
    import copy
    plain = copy.deepcopy(tok)
    plain.chat_template = RLHFLOW_PLAIN_TEMPLATE

    def z(p, x, y):
        ctx = plain.apply_chat_template([{"role": "user", "content": p}], tokenize=False)
        text = tok.apply_chat_template([{"role": "user", "content": F.PAIR_TEMPLATE.format(prompt=ctx, a=x, b=y)}],
                                       tokenize=False, add_generation_prompt=True).replace(tok.bos_token, "")
        with torch.no_grad():
            lg = model(input_ids=torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])).logits[0, -1]
        return float(lg[a] - lg[b])

    want = [0.5 * (z(p, c, r) - z(p, r, c)) for p, c, r in zip(FRAME["prompt"], FRAME["chosen"], FRAME["rejected"])]
    np.testing.assert_allclose(out["margin"], want, atol=1e-4)
    # cached like the judge: a second pass computes nothing
    from reward_auditor.cache import ScoreCache
    cache = ScoreCache(tmp_path / "c.sqlite")
    sc.score_pairs(FRAME, cache=cache, progress=False)
    sc.score_pairs(FRAME, cache=cache, progress=False)
    assert sc.last_counts["computed"] == 0


def test_load_in_is_refused_on_cpu(folders):
    with pytest.raises(ScorerError, match="CUDA"):
        load_scorer(str(folders["sequence-classifier"]), device="cpu", load_in="8bit")


def test_unknown_remote_classifier_is_refused_without_the_flag(tmp_path):
    "An unregistered classifier with its own code: refused without the flag; with it, the code's hash is recorded."
    folder = tiny_family(tmp_path / "x", "sequence-classifier")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForSequenceClassification": "modeling_x.MyRM"}
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "modeling_x.py").write_text(
        "from transformers import LlamaForSequenceClassification\n\n\n"
        "class MyRM(LlamaForSequenceClassification):\n    pass\n")
    with pytest.raises(ScorerError, match="trust-remote-code"):
        load_scorer(str(folder), device="cpu")
    sc, out = _score(folder, trust_remote_code=True)
    assert np.isfinite(out["margin"]).all()
    digest = hashlib.sha256((folder / "modeling_x.py").read_bytes()).hexdigest()
    assert sc.settings()["remote_code"] == {"used": True, "files": {"modeling_x.py": digest}}


def test_cli_lists_exactly_the_tested_families():
    from reward_auditor.cli import main
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["models", "--json"]) == 0
    assert sorted(r["family"] for r in json.loads(buf.getvalue())) == TESTED
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["models"]) == 0
    assert "ArmoRM-Llama3-8B-v0.1" in buf.getvalue() and "--trust-remote-code" in buf.getvalue()


def test_cli_audit_of_a_remote_code_family(folders, tmp_path, capsys):
    from reward_auditor.cli import main
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": str(i), "prompt": p, "chosen": c, "rejected": r}) + "\n"
                            for i, (p, c, r) in enumerate(zip(FRAME["prompt"], FRAME["chosen"], FRAME["rejected"]))))
    base = ["audit", "--data", str(data), "--model", str(folders["armorm"]), "--perturbations", "EF",
            "--permutations", "50", "--no-report", "--device", "cpu", "-q"]
    assert main(base + ["--out", str(tmp_path / "no")]) == 2
    assert "--trust-remote-code" in capsys.readouterr().err
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(base + ["--out", str(tmp_path / "yes"), "--trust-remote-code"]) == 0
    man = json.loads((tmp_path / "yes" / "manifest.json").read_text())
    (rec,) = man["models"].values()
    assert rec["settings"]["family"] == "armorm" and rec["settings"]["remote_code"]["used"] is True
    assert "modeling_custom.py" in rec["settings"]["remote_code"]["files"]
    assert rec["tokenization"]["padding_side"] == "right" and rec["tokenization"]["template_sha256"]


def test_classifier_without_its_head_weights_is_refused(tmp_path):
    "An UltraRM checkpoint labelled LlamaForSequenceClassification would silently get a random `score` head."
    folder = tiny_family(tmp_path / "u", "ultrarm")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["architectures"] = ["LlamaForSequenceClassification"]
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ScorerError, match="random head.*regression_head"):
        load_scorer(str(folder), device="cpu")


def test_bin_checkpoint_is_recognised_from_its_tensors(folders, tmp_path):
    "UltraRM ships .bin weights: names and shapes are read with weights_only (no code runs), margins unchanged."
    import shutil
    from safetensors.torch import load_file
    folder = tmp_path / "ultrarm-bin"
    shutil.copytree(folders["ultrarm"], folder)
    torch.save(load_file(str(folder / "model.safetensors")), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    assert F.family_of(str(folder)).name == "ultrarm"
    _, a = _score(folders["ultrarm"])
    _, b = _score(folder)
    np.testing.assert_allclose(a["margin"], b["margin"], atol=1e-6)


def test_unknown_architecture_says_how_to_register(tmp_path):
    folder = tiny_family(tmp_path / "x", "sequence-classifier")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["architectures"] = ["MysteryRewardModel"]
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ScorerError, match=r"MysteryRewardModel.*register\(Family"):
        load_scorer(str(folder), device="cpu")


# ---------------------------------------------------------------- families with a loading path of their own --------
def test_ldl_reward_equals_its_heads_computed_by_hand(folders):
    "LDL: backbone from the checkpoint, heads from regression_layer.pt / gating_layer.pt; expected bin value."
    from transformers import AutoTokenizer, LlamaModel
    folder = folders["ldl-reward"]
    sc, out = _score(folder)
    assert sc.settings()["family"] == "ldl-reward" and "remote_code" not in sc.settings()
    backbone = LlamaModel.from_pretrained(str(folder), dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(str(folder))
    reg = torch.load(folder / "regression_layer.pt", weights_only=True)
    gate = torch.load(folder / "gating_layer.pt", weights_only=True)
    cfg = json.loads((folder / "config.json").read_text())

    def mlp(sd, x, idx):
        for n, i in enumerate(idx):
            x = sd[f"network.{i}.weight"] @ x + sd[f"network.{i}.bias"]
            x = torch.where(x > 0, x, 0.01 * x) if n < len(idx) - 1 else x
        return x

    def reward(p, r):
        text = tok.apply_chat_template(_messages(p, r), tokenize=False)
        with torch.no_grad():
            x = backbone(input_ids=torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])).last_hidden_state[0, -1]
        dist = torch.softmax(mlp(reg, x, (0, 2, 4)).view(-1, LDL_BINS), -1)          # k distributions over the bins
        w = torch.softmax(mlp(gate, x, (0, 3, 6)) / cfg["temperature"], -1)          # config softmax: true
        mix = (w[:, None] * dist).sum(0)
        return float((mix * torch.arange(LDL_BINS) / (LDL_BINS - 1)).sum())

    want = [reward(p, c) - reward(p, r) for p, c, r in zip(FRAME["prompt"], FRAME["chosen"], FRAME["rejected"])]
    np.testing.assert_allclose(out["margin"], want, atol=1e-5)
    assert np.ptp(out["margin"]) > 1e-5


def test_starling_7b_raw_checkpoint_with_a_tokenizer_placed_beside_it(folders, tmp_path):
    "Starling-RM-7B-alpha: a .pt state dict + Llama-2-chat config/tokenizer; v_head at the last token of its layout."
    import shutil
    from transformers import AutoTokenizer, LlamaConfig, LlamaModel
    folder = folders["starling-rm-7b"]
    sc, out = _score(folder)
    assert sc.settings()["family"] == "starling-rm-7b" and sc.truncation_side == "left"
    sd = torch.load(folder / "reward_model.pt", weights_only=True)
    model = LlamaModel(LlamaConfig.from_pretrained(str(folder)))
    model.load_state_dict({k[len("transformer."):]: v for k, v in sd.items() if k.startswith("transformer.")})
    model.eval()
    tok = AutoTokenizer.from_pretrained(str(folder))

    def reward(p, r):
        ids = tok(f"<s>[INST] {p} </s> [/INST] {r}</s>", add_special_tokens=False)["input_ids"]  # one BOS
        with torch.no_grad():
            return float(sd["v_head.weight"] @ model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1])

    want = [reward(p, c) - reward(p, r) for p, c, r in zip(FRAME["prompt"], FRAME["chosen"], FRAME["rejected"])]
    np.testing.assert_allclose(out["margin"], want, atol=1e-5)
    # what a downloaded snapshot lacks is named in one line: the tokenizer, then the config
    bare = shutil.copytree(folder, tmp_path / "no-tokenizer")
    for f in bare.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")) or f.name == "chat_template.jinja":
            f.unlink()
    with pytest.raises(ScorerError, match=r"no tokenizer.*Llama-2-7b-chat-hf") as e:
        load_scorer(str(bare), device="cpu")
    assert "\n" not in str(e.value)
    (bare / "config.json").unlink()
    with pytest.raises(ScorerError, match=r"starling-rm-7b checkpoint but no config\.json.*tokenizer"):
        load_scorer(str(bare), device="cpu")


def test_nemotron_reward_is_the_logit_of_token_0_at_the_first_generated_position(folders):
    "kind='lm-reward': the published recipe (generate one token, read scores[0][0][0]) equals the scorer's margin."
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder = folders["nemotron-reward"]
    with pytest.raises(ScorerError, match="causal language model"):
        load_scorer(str(folder), device="cpu")  # an ordinary causal-LM config is not guessed to be a reward model
    sc, out = _score(folder, kind="lm-reward")
    assert isinstance(sc, F.FamilyScorer) and sc.settings()["family"] == "nemotron-reward"
    assert sc.padding_side == "left"
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(str(folder))

    def reward(p, r):
        enc = tok.apply_chat_template(_messages(p, r), tokenize=True, add_generation_prompt=False, return_dict=True,
                                      return_tensors="pt")
        with torch.no_grad():
            gen = model.generate(enc["input_ids"], attention_mask=enc["attention_mask"], max_new_tokens=1,
                                 do_sample=False, return_dict_in_generate=True, output_scores=True)
        return float(gen["scores"][0][0][0])

    want = [reward(p, c) - reward(p, r) for p, c, r in zip(FRAME["prompt"], FRAME["chosen"], FRAME["rejected"])]
    np.testing.assert_allclose(out["margin"], want, atol=1e-4)
    assert np.ptp(out["margin"]) > 1e-5


def test_a_pad_id_inside_the_text_does_not_move_the_gating_read(folders):
    "Remote code that reads the token before the first pad id: with BOS standing in for pad, rows are re-read alone."
    sc, out = _score(folders["armorm"], trust_remote_code=True)
    bos = sc.tokenizer.bos_token_id
    sc.pad_id = bos  # what a tokenizer with neither pad nor unk leaves; every rendered text starts with BOS
    sc._set_model_pad(bos)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = sc.score_pairs(FRAME, progress=False)
    np.testing.assert_allclose(again["margin"], out["margin"], atol=1e-5)
    assert sc.rows_rerun > 0


def test_pair_preference_context_is_rlhflow_plain_layout_for_several_turns():
    history = ({"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"})
    msgs = F.conversation("And now?", None, history)
    tok = tiny_tokenizer(None)
    tok.chat_template = RLHFLOW_PLAIN_TEMPLATE
    assert F.turns_context(msgs) == tok.apply_chat_template(msgs, tokenize=False)


def test_a_remote_family_config_without_auto_map_is_refused(folders, tmp_path):
    "URM's class name without the auto_map that loads its code: the library's own classifier would read other numbers."
    import shutil
    folder = shutil.copytree(folders["urm"], tmp_path / "urm-no-map")
    cfg = json.loads((folder / "config.json").read_text())
    cfg.pop("auto_map")
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ScorerError, match="no auto_map entry"):
        load_scorer(str(folder), device="cpu", trust_remote_code=True)


def test_beaver_normaliser_from_config(folders, tmp_path):
    "safe-rlhf's do_normalize: reward margins scale by 1/std (affine), cost margins too (scale), signs kept."
    import shutil
    _, raw = _score(folders["beaver-cost"])
    folder = shutil.copytree(folders["beaver-cost"], tmp_path / "cost-norm")
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "do_normalize": True, "mean": [3.0], "var": [4.0]}))
    _, norm = _score(folder)
    np.testing.assert_allclose(norm["margin"], raw["margin"] / (2.0 + 1e-8), atol=1e-6)


def test_readme_registry_table_matches_the_registry():
    "The guide's family table names exactly the families the registry (and `reward-auditor models`) lists."
    from pathlib import Path
    repo = Path(__file__).resolve().parents[1]  # the README and the guide pages it links (docs/guide)
    text = "\n\n".join(p.read_text(encoding="utf-8") for p in [repo / "README.md", *sorted((repo / "docs" / "guide").glob("*.md"))])
    table = text[text.index("| family | example ids | recognised by | reads | needs |"):]
    table = table[:table.index("\n\n")]
    names = set()
    for line in table.splitlines()[2:]:
        names.update(n.strip() for n in line.split("|")[1].split("/"))
    assert names == set(TESTED)


def test_pairrm_scores_conversations_in_its_multi_turn_layout(folders):
    "Multi-turn rows use PairRM's conversation layout (the same text for the shared turns, the answers differ)."
    frame = FRAME.assign(history=[[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]] * 3)
    sc, out = _score(folders["pairrm"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conv = sc.score_pairs(frame, progress=False)
    assert np.isfinite(conv["margin"]).all() and not np.allclose(conv["margin"], out["margin"])
    src, a, b = F.pairrm_conversation(frame["history"][0], "Q2", "A2", "B2")
    assert src.endswith("USER: Hi\nAssistant: <Response 1>\nUSER: Q2\nAssistant: <Response 2>")
    assert (a, b) == ("<Response 1>: Hello!\n<Response 2>: A2", "<Response 1>: Hello!\n<Response 2>: B2")


def test_starling_34b_without_a_chat_template_falls_back_to_chatml(folders, tmp_path):
    import shutil
    folder = shutil.copytree(folders["starling-rm"], tmp_path / "no-template")
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    sc, _ = _score(folder)
    assert not sc.tokenizer.chat_template
    ids, _ = sc._encode_item("Hi", "Hello")
    assert sc.tokenizer.decode(ids).endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>")
