"""Tiny random models and a small BPE tokenizer with a chat template, built offline for tests and benchmarks.

Everything here is deterministic given `seed` and saved with `save_pretrained`, so the code under test loads it
back through the ordinary `from_pretrained` path, exactly as it would load a model from the hub.

    from tiny_models import tiny_rm, tiny_lm
    rm_dir = tiny_rm(tmp_path / "rm")              # LlamaForSequenceClassification, one label
    lm_dir = tiny_lm(tmp_path / "lm", arch="qwen2")  # Qwen2ForCausalLM
"""
from __future__ import annotations

from pathlib import Path


WORDS = ("the capital of france is paris and a binary search works on a sorted list of numbers while "
         "the quick brown fox jumps over the lazy dog so please summarise this text in two sentences").split()


def make_pairs(n: int, seed: int = 0):
    "`n` random single-turn preference pairs (subset chat) drawn from a small vocabulary, seeded."
    import numpy as np
    import pandas as pd
    rng = np.random.default_rng(seed)
    txt = lambda lo, hi: " ".join(rng.choice(WORDS, rng.integers(lo, hi)))
    return pd.DataFrame({"id": [f"i{k}" for k in range(n)], "subset": "chat",
                         "prompt": [txt(3, 15) + "?" for _ in range(n)],
                         "chosen": [txt(2, 40) for _ in range(n)], "rejected": [txt(1, 30) for _ in range(n)]})

SPECIALS = ["<unk>", "<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>"]

# A Jinja chat template in the style of common instruction models: BOS first, one marker per turn, EOS per turn.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "{{ '<|' + m['role'] + '|>\n' + m['content'] + eos_token + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

CORPUS = [
    "What is the capital of France? The capital of France is Paris.",
    "Explain how a binary search works on a sorted list of numbers.",
    "Write a Python function that returns the square of a number: def square(x): return x * x",
    "The quick brown fox jumps over the lazy dog while the cat sleeps.",
    "I cannot help with that request, but here is some safer information instead.",
    "Answer A is better than answer B because it is correct and helpful. [[A]] [[B]] [[C]]",
    "La capital de Francia es París. El zorro marrón salta sobre el perro.",
    "Compute 12 + 30 = 42, then divide by 7 to get 6. Prime numbers: 2, 3, 5, 7, 11, 13.",
    "Please summarise the following text in two sentences, keeping the key facts.",
    "Sure! Here are three tips: drink water, sleep well, and take regular walks outside.",
]


def tiny_tokenizer(path: str | Path | None = None, vocab_size: int = 320, template: bool = True,
                   pad: bool = True, add_bos: bool = False):
    "Train a byte-level BPE tokenizer on a small built-in corpus and wrap it as a fast tokenizer."
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 3, trainer=trainer)
    if add_bos:
        from tokenizers import processors
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                           special_tokens=[("<s>", tok.token_to_id("<s>"))])
    kw = dict(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    if pad:
        kw["pad_token"] = "<pad>"
    fast = PreTrainedTokenizerFast(**kw)
    if template:
        fast.chat_template = CHAT_TEMPLATE
    if path is not None:
        fast.save_pretrained(str(path))
    return fast


def _config(arch: str, vocab: int, tok, **extra):
    from transformers import LlamaConfig, Qwen2Config
    common = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                  pad_token_id=tok.pad_token_id, tie_word_embeddings=False, **extra)
    if arch == "llama":
        return LlamaConfig(**common)
    if arch == "qwen2":
        return Qwen2Config(**common)
    raise ValueError(f"unknown tiny architecture {arch!r}: use 'llama' or 'qwen2'")


def _init(model, seed: int):
    "Re-draw every weight from a seeded normal so that outputs vary across inputs (not near-constant)."
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() == 1 and "norm" in name:
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model.eval()


def tiny_rm(path: str | Path, arch: str = "llama", seed: int = 0, **tok_kw) -> Path:
    "Save a one-label sequence-classification reward model (hidden size 32) with its tokenizer to `path`."
    from transformers import LlamaForSequenceClassification, Qwen2ForSequenceClassification
    path = Path(path)
    tok = tiny_tokenizer(path, **tok_kw)
    cfg = _config(arch, len(tok), tok, num_labels=1)
    cls = LlamaForSequenceClassification if arch == "llama" else Qwen2ForSequenceClassification
    _init(cls(cfg), seed).save_pretrained(str(path))
    return path


def tiny_lm(path: str | Path, arch: str = "llama", seed: int = 0, **tok_kw) -> Path:
    "Save a causal language model (hidden size 32) with its tokenizer to `path` (policy, reference or judge)."
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM
    path = Path(path)
    tok = tiny_tokenizer(path, **tok_kw)
    cfg = _config(arch, len(tok), tok)
    cls = LlamaForCausalLM if arch == "llama" else Qwen2ForCausalLM
    _init(cls(cfg), seed).save_pretrained(str(path))
    return path


# ---------------------------------------------------------------------------------------------------------------
# Tiny folders for each reward-model family of `reward_auditor.families`. Remote-code families get a small
# `modeling_*.py` that mimics the family's published interface (output fields, methods, reward token); families whose
# head the library builds itself get a checkpoint with the family's weight names. All load through `from_pretrained`.

_POOL = '''
def _last(h, attention_mask):
    if attention_mask is None:
        return h[:, -1]
    pos = torch.arange(h.shape[1], device=h.device)
    return h[torch.arange(h.shape[0], device=h.device), (attention_mask * pos).argmax(1)]


def _before_first_pad(h, input_ids, pad_token_id):
    # the pooling of the published gating/LDL/INF-ORM code: the token before the first pad id (the last one if none)
    idx = (torch.eq(input_ids, pad_token_id).int().argmax(-1) - 1) % input_ids.shape[-1]
    return h[torch.arange(h.shape[0], device=h.device), idx.to(h.device)]
'''

_GATED = '''from dataclasses import dataclass
from typing import Optional
import torch
from torch import nn
from transformers import LlamaModel, LlamaPreTrainedModel
from transformers.utils import ModelOutput
''' + _POOL + '''

@dataclass
class GatedRewardOutput(ModelOutput):
    rewards: Optional[torch.FloatTensor] = None
    gating_output: Optional[torch.FloatTensor] = None
    score: Optional[torch.FloatTensor] = None
    logits: Optional[torch.FloatTensor] = None


class LlamaForRewardModelWithGating(LlamaPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.model = LlamaModel(config)
        self.regression_layer = nn.Linear(config.hidden_size, config.num_objectives, bias=False)
        self.gating = nn.Linear(config.hidden_size, config.num_objectives)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, **kw):
        h = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        x = _before_first_pad(h, input_ids, self.config.pad_token_id)
        rewards = self.regression_layer(x)
        gate = torch.softmax(self.gating(x), -1)
        score = (rewards * gate).sum(-1)  # (batch,), as ArmoRM's output.score
        return GatedRewardOutput(rewards=rewards, gating_output=gate, score=score, logits=score)


class LlamaForRewardModelWithGating31(LlamaForRewardModelWithGating):
    def forward(self, input_ids=None, attention_mask=None, **kw):
        out = super().forward(input_ids=input_ids, attention_mask=attention_mask)
        score = out.score[:, None]  # (batch, 1), as QRM's output.score
        return GatedRewardOutput(rewards=out.rewards, gating_output=out.gating_output, score=score, logits=score)
'''

_URM = '''import torch
from torch import nn
from transformers import LlamaModel, LlamaPreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutputWithPast
''' + _POOL + '''

class LlamaForSequenceClassificationWithNormal_Weights(LlamaPreTrainedModel):
    # URM: the score head gives (mean, log-variance) for 5 attributes; a gating MLP weights the 5 means
    def __init__(self, config):
        super().__init__(config)
        self.model = LlamaModel(config)
        self.score = nn.Linear(config.hidden_size, 10, bias=False)
        h = config.hidden_size
        self.weights = nn.Sequential(nn.Linear(h, h), nn.SELU(), nn.Linear(h, h), nn.SELU(), nn.Linear(h, 5))
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, **kw):
        x = _last(self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state, attention_mask)
        means = self.score(x).view(-1, 5, 2)[:, :, 0]
        return SequenceClassifierOutputWithPast(logits=(means * self.weights(x)).sum(-1, keepdim=True))
'''

_GRM = '''import torch
from torch import nn
from transformers import LlamaModel, LlamaPreTrainedModel
''' + _POOL + '''

class ValueHead(nn.Module):
    # the trl-style value head of the GRM code: weights under v_head.summary.*
    def __init__(self, hidden):
        super().__init__()
        self.summary = nn.Sequential(nn.Linear(hidden, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, h):
        return self.summary(h)


class GRewardModel(LlamaPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.v_head = ValueHead(config.hidden_size)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, **kw):
        h = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        value = self.v_head(h).squeeze(-1)[torch.arange(h.shape[0]), attention_mask.sum(-1) - 1]
        return self.lm_head(h), None, value  # (lm_logits, loss, value), the reward last
'''

_INTERNLM2_CONFIG = '''from transformers import LlamaConfig


class InternLM2Config(LlamaConfig):
    model_type = "internlm2"

    def __init__(self, reward_token_id=None, **kw):
        self.reward_token_id = reward_token_id
        super().__init__(**kw)
'''

_INTERNLM2 = '''import torch
from torch import nn
from transformers import LlamaModel, PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutputWithPast
from .configuration_internlm2 import InternLM2Config
''' + _POOL + '''

class InternLM2ForRewardModel(PreTrainedModel):
    config_class = InternLM2Config
    base_model_prefix = "model"

    def __init__(self, config):
        super().__init__(config)
        self.model = LlamaModel(config)
        self.v_head = nn.Linear(config.hidden_size, 1, bias=False)
        self.reward_token_id = config.reward_token_id
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, **kw):
        assert input_ids[:, -1].eq(self.reward_token_id).all().item(), "the last token must be the reward token"
        h = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).last_hidden_state
        return SequenceClassifierOutputWithPast(logits=self.v_head(h)[:, -1].view(-1, 1))

    @torch.no_grad()
    def get_score(self, tokenizer, conversation):
        text = tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=False)
        ids = tokenizer.encode(text) + [self.reward_token_id]  # as published: the tokenizer may add a BOS of its own
        return self.forward(input_ids=torch.tensor([ids])).logits[0, 0].item()
'''

_QWEN2_RM_CONFIG = '''from transformers import Qwen2Config


class Qwen2RMConfig(Qwen2Config):
    model_type = "qwen2_rm"
'''

_QWEN2_RM = '''import torch
from torch import nn
from transformers import Qwen2Model, PreTrainedModel
from .configuration_qwen2_rm import Qwen2RMConfig
''' + _POOL + '''

class Qwen2ForRewardModel(PreTrainedModel):
    config_class = Qwen2RMConfig
    base_model_prefix = "model"

    def __init__(self, config):
        super().__init__(config)
        self.model = Qwen2Model(config)
        self.score = nn.Sequential(nn.Linear(config.hidden_size, config.hidden_size), nn.ReLU(),
                                   nn.Linear(config.hidden_size, 1))
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, **kw):
        h = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return (self.score(_last(h, attention_mask)),)
'''

_EURUS = '''import torch
from torch import nn
from transformers import LlamaModel, LlamaPreTrainedModel
''' + _POOL + '''

class EurusRewardModel(LlamaPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.model = LlamaModel(config)
        self.regression_head = nn.Linear(config.hidden_size, 1, bias=False)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, **kw):
        h = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.regression_head(_last(h, attention_mask))
'''

# family name -> (modeling file, source, class, Auto class, config extras, config file, config source, config class)
REMOTE_FAMILIES = {
    "armorm": ("modeling_custom.py", _GATED, "LlamaForRewardModelWithGating", "AutoModelForSequenceClassification",
               {"num_objectives": 4, "gating_temperature": 10}),
    "qrm": ("modeling_custom.py", _GATED, "LlamaForRewardModelWithGating31", "AutoModelForSequenceClassification",
            {"num_objectives": 4, "num_quantiles": 4, "loss": "quantile_regression"}),
    "urm": ("modeling_urm.py", _URM, "LlamaForSequenceClassificationWithNormal_Weights",
            "AutoModelForSequenceClassification", {}),
    "grm": ("modeling_grm.py", _GRM, "GRewardModel", "AutoModelForSequenceClassification", {}),
    "internlm2-reward": ("modeling_internlm2.py", _INTERNLM2, "InternLM2ForRewardModel", "AutoModel", {},
                         "configuration_internlm2.py", _INTERNLM2_CONFIG, "InternLM2Config"),
    "worldpm": ("modeling_qwen2_rm.py", _QWEN2_RM, "Qwen2ForRewardModel", "AutoModel", {},
                "configuration_qwen2_rm.py", _QWEN2_RM_CONFIG, "Qwen2RMConfig"),
    "eurus-rm": ("modeling_eurus_rm.py", _EURUS, "EurusRewardModel", "AutoModel", {}),
}

# family name -> (backbone attribute, head attribute, head layers (in, out, bias), architectures, config extras)
HEAD_FAMILIES = {
    "ultrarm": ("model", "regression_head", [(32, 1, False)], "LlamaRewardModel", {}),
    "starling-rm": ("transformer", "v_head", [(32, 1, False)], "LlamaForSequenceClassification", {}),
    "inf-orm": ("model", "score", [(32, 32, True), (32, 1, True)], "INFORMForSequenceClassification", {}),
    "beaver-reward": ("model", "score_head", [(32, 1, False)], "LlamaForScore", {"score_type": "reward", "score_dim": 1}),
    "beaver-cost": ("model", "score_head", [(32, 1, True)], "LlamaForScore", {"score_type": "cost", "score_dim": 1}),
}

# families with a loading path of their own: LDL's heads beside the checkpoint, Starling-7B's raw state dict,
# Nemotron's plain causal LM (chosen with kind="lm-reward")
OWN_PATH_FAMILIES = ("ldl-reward", "starling-rm-7b", "nemotron-reward")
LDL_BINS, LDL_K = 10, 3

REWARD_TOKEN = "[UNUSED_TOKEN_130]"


def _tiny_ldl(path: Path, tok, seed: int) -> Path:
    "A LlamaModel backbone saved alone, plus regression_layer.pt / gating_layer.pt state dicts beside it."
    import torch
    from torch import nn
    from transformers import LlamaModel
    cfg = _config("llama", len(tok), tok)
    _init(LlamaModel(cfg), seed).save_pretrained(str(path))
    g = torch.Generator().manual_seed(seed + 1)
    rnd = lambda *shape: torch.randn(*shape, generator=g) * 0.3
    h, hid = cfg.hidden_size, 16
    regression = {"network.0.weight": rnd(hid, h), "network.0.bias": rnd(hid), "network.2.weight": rnd(hid, hid),
                  "network.2.bias": rnd(hid), "network.4.weight": rnd(LDL_K * LDL_BINS, hid),
                  "network.4.bias": rnd(LDL_K * LDL_BINS)}
    gating = {"network.0.weight": rnd(hid, h), "network.0.bias": rnd(hid), "network.3.weight": rnd(hid, hid),
              "network.3.bias": rnd(hid), "network.6.weight": rnd(LDL_K, hid), "network.6.bias": rnd(LDL_K)}
    torch.save(regression, path / "regression_layer.pt")
    torch.save(gating, path / "gating_layer.pt")
    _write_config(path, {"architectures": ["LDLRewardModel27B"], "num_objectives": LDL_K * LDL_BINS,
                         "softmax": True, "temperature": 2.0})
    return path


def _tiny_starling7b(path: Path, tok, seed: int) -> Path:
    "The state dict of a GPTRewardModel-style wrapper (model.*, transformer.*, v_head.weight) as a .pt beside a config."
    import torch
    from transformers import LlamaForCausalLM
    cfg = _config("llama", len(tok), tok)
    lm = _init(LlamaForCausalLM(cfg), seed)
    g = torch.Generator().manual_seed(seed + 1)
    sd = {**{f"model.{k}": v for k, v in lm.state_dict().items()},
          **{f"transformer.{k}": v for k, v in lm.model.state_dict().items()},
          "v_head.weight": torch.randn(1, cfg.hidden_size, generator=g) * 0.3}
    torch.save(sd, path / "reward_model.pt")
    cfg.architectures = ["LlamaForCausalLM"]
    cfg.save_pretrained(str(path))
    return path


def _write_config(path: Path, updates: dict, drop=()):
    import json
    cfg = json.loads((path / "config.json").read_text())
    for k in drop:
        cfg.pop(k, None)
    cfg.update(updates)
    (path / "config.json").write_text(json.dumps(cfg, indent=2))


def tiny_folders(root: Path, build, names) -> dict:
    "Build one tiny folder per name with `build(root / name, name, seed=i)`, hushing transformers' warnings → {name: path}."
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {name: build(Path(root) / name, name, seed=i) for i, name in enumerate(names)}


def _import_folder_module(path: Path, pkg: str, module: str):
    "Import `path/module.py` as part of a package named `pkg` (so its relative imports work), as a hub folder's own code is."
    import importlib
    import importlib.util
    import sys
    init = path / "__init__.py"
    init.write_text("")
    spec = importlib.util.spec_from_file_location(pkg, init, submodule_search_locations=[str(path)])
    sys.modules[pkg] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules[pkg])
    code = importlib.import_module(f"{pkg}.{module}")
    init.unlink()
    return code


def _keep_code_files(path: Path, keep: set):
    "`save_pretrained` may copy code files into the folder; keep exactly the ones named in `keep`."
    for p in path.glob("*.py"):
        if p.name not in keep:
            p.unlink()


def tiny_family(path: str | Path, family: str, seed: int = 0, **tok_kw) -> Path:
    "Save a tiny model folder of a registry family (config, tokenizer, weights, and the family's code if any)."
    import importlib
    import torch
    from transformers import LlamaConfig
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if family == "sequence-classifier":
        return tiny_rm(path, seed=seed, **tok_kw)
    if family in ("pair-preference", "nemotron-reward"):
        return tiny_lm(path, seed=seed, **tok_kw)
    tok = tiny_tokenizer(None, **tok_kw)
    if family == "internlm2-reward":
        tok.add_tokens([REWARD_TOKEN], special_tokens=True)
    tok.save_pretrained(str(path))
    if family == "ldl-reward":
        return _tiny_ldl(path, tok, seed)
    if family == "starling-rm-7b":
        return _tiny_starling7b(path, tok, seed)
    if family == "pairrm":
        from transformers import DebertaV2Config
        from reward_auditor.families import PAIRRM_PREFIXES, pairrm_model_class
        tok.add_tokens(list(PAIRRM_PREFIXES), special_tokens=True)
        tok.save_pretrained(str(path))
        ids = dict(zip(("source_prefix_id", "cand1_prefix_id", "cand2_prefix_id"),
                       tok.convert_tokens_to_ids(list(PAIRRM_PREFIXES))))
        cfg = DebertaV2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, max_position_embeddings=512, pad_token_id=tok.pad_token_id,
                              n_tasks=1, drop_out=0.05, **ids)
        _init(pairrm_model_class()(cfg), seed).save_pretrained(str(path))
        _write_config(path, {"architectures": ["DebertaV2PairRM"]})
        return path
    if family in HEAD_FAMILIES:
        from reward_auditor.families import head_model_class
        backbone, head, layers, arch, extra = HEAD_FAMILIES[family]
        cfg = _config("llama", len(tok), tok, **extra)
        model = head_model_class(backbone, head, layers)(cfg)
        _init(model, seed).save_pretrained(str(path))
        _write_config(path, {"architectures": [arch]})
        return path
    spec = REMOTE_FAMILIES[family]
    modfile, src, cls, auto, extra = spec[:5]
    (path / modfile).write_text(src)
    amap = {auto: f"{modfile[:-3]}.{cls}"}
    if len(spec) > 5:  # a config class of its own
        cfgfile, cfgsrc, cfgcls = spec[5:]
        (path / cfgfile).write_text(cfgsrc)
        amap["AutoConfig"] = f"{cfgfile[:-3]}.{cfgcls}"
    pkg = f"_tiny_family_{family.replace('-', '_')}_{abs(hash(str(path)))}"
    code = _import_folder_module(path, pkg, modfile[:-3])
    arch = "qwen2" if family == "worldpm" else "llama"
    common = _config(arch, len(tok), tok).to_dict()
    for k in ("architectures", "model_type", "transformers_version", "auto_map"):
        common.pop(k, None)
    if len(spec) > 5:
        cfgmod = importlib.import_module(f"{pkg}.{spec[5][:-3]}")
        cfg = getattr(cfgmod, spec[7])(**common, **extra)
    else:
        cfg = LlamaConfig(**common, **extra)
    if family == "internlm2-reward":
        cfg.reward_token_id = tok.convert_tokens_to_ids(REWARD_TOKEN)
    model = _init(getattr(code, cls)(cfg), seed)
    model.save_pretrained(str(path))
    _write_config(path, {"architectures": [cls], "auto_map": amap})
    _keep_code_files(path, {modfile, spec[5] if len(spec) > 5 else None})
    return path


# ---------------------------------------------------------------------------------------------------------------
# Tiny process reward models, one per step layout of `reward_auditor.prm`, saved as a hub repository carries them.

_QWEN2_PRM = '''import torch
from torch import nn
from transformers import Qwen2Model, Qwen2PreTrainedModel


class Qwen2ForProcessRewardModel(Qwen2PreTrainedModel):
    "Qwen2 backbone + a two-layer head giving two logits (wrong, right) per token; output[0] is (batch, length, 2)."

    def __init__(self, config):
        super().__init__(config)
        self.model = Qwen2Model(config)
        self.score = nn.Sequential(nn.Linear(config.hidden_size, config.hidden_size), nn.ReLU(),
                                   nn.Linear(config.hidden_size, 2))
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, **kw):
        h = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).last_hidden_state
        return (self.score(h),)
'''

PRM_STYLES = ("token-classification", "qwen-prm", "math-shepherd")


def tiny_prm(path: str | Path, style: str = "token-classification", seed: int = 0, **tok_kw) -> Path:
    "Save a tiny process reward model of one style (see `reward_auditor.prm`) with its tokenizer to `path`."
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = tiny_tokenizer(None, **tok_kw)
    if style == "token-classification":
        from transformers import LlamaForTokenClassification
        tok.save_pretrained(str(path))
        cfg = _config("llama", len(tok), tok, num_labels=2)
        _init(LlamaForTokenClassification(cfg), seed).save_pretrained(str(path))
        return path
    if style == "math-shepherd":
        from transformers import LlamaForCausalLM
        tok.add_tokens(["ки"])
        tok.save_pretrained(str(path))
        cfg = _config("llama", len(tok), tok)
        _init(LlamaForCausalLM(cfg), seed).save_pretrained(str(path))
        return path
    if style != "qwen-prm":
        raise ValueError(f"unknown PRM style {style!r}: use one of {PRM_STYLES}")
    tok.add_tokens(["<extra_0>"], special_tokens=True)
    tok.save_pretrained(str(path))
    (path / "modeling_qwen2_prm.py").write_text(_QWEN2_PRM)
    code = _import_folder_module(path, f"_tiny_prm_{abs(hash(str(path)))}", "modeling_qwen2_prm")
    cfg = _config("qwen2", len(tok), tok)
    _init(code.Qwen2ForProcessRewardModel(cfg), seed).save_pretrained(str(path))
    _write_config(path, {"architectures": ["Qwen2ForProcessRewardModel"],
                         "auto_map": {"AutoModel": "modeling_qwen2_prm.Qwen2ForProcessRewardModel"}})
    _keep_code_files(path, {"modeling_qwen2_prm.py"})
    return path


# ---------------------------------------------------------------------------------------------------------------
# A real vocabulary: Mistral-7B v1's SentencePiece model, which the mistral-common package ships. Math-Shepherd's PRM
# is a Mistral-7B fine-tune, so a tiny random Mistral with this tokenizer lays its step tag out as the real one does
# ("▁ки" in the text, not the bare piece "ки"). The .model file is a protobuf; the few fields needed (each piece's
# text, score and type) are read here directly, so neither sentencepiece nor protobuf is needed.

def mistral_v1_model_file() -> Path | None:
    "The path of mistral-common's copy of Mistral's v1 SentencePiece model, or None when it is not installed."
    import importlib.util
    spec = importlib.util.find_spec("mistral_common")
    if spec is None or not spec.submodule_search_locations:
        return None
    f = Path(list(spec.submodule_search_locations)[0]) / "data" / "tokenizer.model.v1"
    return f if f.is_file() else None


def _varint(b: bytes, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        c = b[i]
        i += 1
        out |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return out, i


def _proto_fields(b: bytes):
    "(field number, wire type, value) of each field of one protobuf message."
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(b, i)
        elif wire == 1:
            v, i = b[i:i + 8], i + 8
        elif wire == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif wire == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield field, wire, v


def sentencepiece_pieces(path: str | Path) -> list[tuple[str, float, int]]:
    "(piece, score, type) of every piece of a SentencePiece model, in id order (ModelProto field 1)."
    import struct
    out = []
    for field, wire, v in _proto_fields(Path(path).read_bytes()):
        if field == 1 and wire == 2:
            piece, score, kind = "", 0.0, 1
            for g, _, u in _proto_fields(v):
                if g == 1:
                    piece = u.decode("utf-8")
                elif g == 2:
                    score = struct.unpack("<f", u)[0]
                elif g == 3:
                    kind = u
            out.append((piece, score, kind))
    return out


def mistral_v1_tokenizer(path: str | Path | None = None):
    "Mistral-7B v1's tokenizer (BOS added, byte fallback) rebuilt from its SentencePiece model; None if absent."
    from transformers import LlamaTokenizer
    f = mistral_v1_model_file()
    if f is None:
        return None
    pieces = sentencepiece_pieces(f)
    vocab = {p: i for i, (p, _, _) in enumerate(pieces)}
    # BPE merges: every split of a normal piece into two pieces, the higher-scored merged piece first
    merges = sorted((-score, vocab[p[:k]], vocab[p[k:]], p[:k], p[k:]) for p, score, kind in pieces if kind == 1
                    for k in range(1, len(p)) if p[:k] in vocab and p[k:] in vocab)
    tok = LlamaTokenizer(vocab=vocab, merges=[(a, b) for *_, a, b in merges], legacy=False, add_prefix_space=True,
                         add_bos_token=True, add_eos_token=False)
    if path is not None:
        tok.save_pretrained(str(path))
    return tok


def tiny_shepherd_mistral(path: str | Path, seed: int = 0) -> Path | None:
    "A tiny random MistralForCausalLM on Mistral-7B v1's real vocabulary (Math-Shepherd's base); None if absent."
    from transformers import MistralConfig, MistralForCausalLM
    path = Path(path)
    tok = mistral_v1_tokenizer()
    if tok is None:
        return None
    path.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(path))
    cfg = MistralConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    _init(MistralForCausalLM(cfg), seed).save_pretrained(str(path))
    return path
