"""Rewriter backends: a tiny random causal LM built offline and loaded through from_pretrained, an
OpenAI-compatible server on 127.0.0.1, apertium batching, and the content-hash cache."""
import http.server
import json
import os
import time
import shutil
import socketserver
import threading

import numpy as np
import pandas as pd
import pytest

from reward_auditor import perturbations as P
from reward_auditor import rewriters as R

SENTENCES = ["the cat sat on the mat", "keep the meaning and change only the form",
             "rewrite the answer in a longer way", "translate this answer into chinese"]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    d = tmp_path_factory.mktemp("tiny-llama")
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(SENTENCES, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "<s>", "</s>"]))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                                bos_token="<s>", eos_token="</s>")
    fast.chat_template = "{% for m in messages %}<s> {{ m['content'] }} {% endfor %}{% if add_generation_prompt %}</s>{% endif %}"
    cfg = transformers.LlamaConfig(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   pad_token_id=fast.pad_token_id, bos_token_id=fast.bos_token_id,
                                   eos_token_id=fast.eos_token_id)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).save_pretrained(d)
    fast.save_pretrained(d)
    return d


def test_transformers_rewriter_is_deterministic_and_cached(tiny_model, tmp_path):
    cache = tmp_path / "rw.sqlite"
    a = R.TransformersRewriter(tiny_model, max_new_tokens=6, cache=cache)
    texts = ["the cat sat on the mat", "keep the meaning"]
    out1 = a.rewrite(texts, "rewrite the answer")
    assert len(out1) == 2 and all(isinstance(o, str) and o for o in out1)
    assert a.last_counts == {"computed": 2, "cached": 0}
    b = R.TransformersRewriter(tiny_model, max_new_tokens=6, cache=None)
    assert b.rewrite(texts, "rewrite the answer") == out1          # greedy + seeded: same bytes
    c = R.TransformersRewriter(tiny_model, max_new_tokens=6, cache=cache)
    assert c.rewrite(texts, "rewrite the answer") == out1 and c.last_counts == {"computed": 0, "cached": 2}
    assert c._model is None                                         # served from the cache, model never loaded
    assert a.model_id.startswith(tiny_model.name + "@") and a.resources()["decoding"] == "greedy"
    assert a.format("x", "y").startswith("<s> y")


def test_transformers_rewriter_bad_folder(tmp_path):
    pytest.importorskip("transformers")
    with pytest.raises(R.RewriterError, match="cannot load"):
        R.TransformersRewriter(tmp_path / "nothing", cache=None).rewrite(["a"], "b")


class _Server:
    "A chat-completions server on 127.0.0.1 that reverses the user's text; fails the first `fail` requests."
    def __init__(self, fail=0, delay=0.0):
        outer = self
        self.requests, self.fail = [], fail

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, dict(self.headers), body))
                time.sleep(delay)
                if outer.fail > 0:
                    outer.fail -= 1
                    self.send_response(503); self.end_headers(); return
                msg = body["messages"][-1]["content"]
                data = json.dumps({"id": "x", "object": "chat.completion", "model": body["model"],
                                   "choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": msg[::-1]}}]}).encode()
                self.send_response(200); self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}/v1"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown(); self.srv.server_close()


def test_openai_rewriter_round_trip_env_and_cache(monkeypatch, tmp_path):
    s = _Server(fail=1)
    try:
        monkeypatch.setenv("OPENAI_BASE_URL", s.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("REWARD_AUDITOR_REWRITER_MODEL", "tiny-model")
        rw = R.OpenAIRewriter(cache=tmp_path / "c.sqlite", concurrency=1)
        assert rw.rewrite(["abc", "hello"], "reverse it") == ["cba", "olleh"]
        path, headers, body = s.requests[-1]
        assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer sk-test"
        assert body["model"] == "tiny-model" and body["temperature"] == 0.0 and body["messages"][0]["content"] == "reverse it"
        n = len(s.requests)
        again = R.OpenAIRewriter(cache=tmp_path / "c.sqlite")
        assert again.rewrite(["hello"], "reverse it") == ["olleh"] and len(s.requests) == n
    finally:
        s.close()


def test_openai_rewriter_errors(monkeypatch):
    monkeypatch.delenv("REWARD_AUDITOR_REWRITER_MODEL", raising=False)
    monkeypatch.delenv("OPENAI_MODEL", raising=False)
    with pytest.raises(R.RewriterError, match="needs a model"):
        R.OpenAIRewriter(base_url="http://127.0.0.1:9/v1")
    rw = R.OpenAIRewriter(base_url="http://127.0.0.1:9/v1", model="m", retries=0, timeout=2, cache=None)
    with pytest.raises(R.RewriterError, match="cannot reach"):
        rw.rewrite(["x"], "y")


def test_model_variants_through_server():
    s = _Server()
    try:
        rw = R.OpenAIRewriter(base_url=s.url, model="m", cache=None)
        df = pd.DataFrame({"id": ["a", "b"], "subset": "chat", "prompt": ["q?", "r?"],
                           "chosen": ["abc def", "keep `code` here"], "rejected": ["xyz", "uvw"]})
        c = P.perturb(df, ["LC-model"], rewriter=rw, target_language="Chinese")["LC-model"]
        assert c.frame["chosen"].tolist()[0] == "fed cba"
        assert c.frame["chosen"].tolist()[1] == "keep `code` here"      # placeholders reversed: kept original
        assert c.record["params"]["rewriter"] == "m" and c.record["resources"]["model_id"] == "m"
        assert "Chinese" in s.requests[0][2]["messages"][0]["content"]
    finally:
        s.close()


@pytest.mark.skipif(shutil.which("apertium") is None, reason="apt-get install apertium apertium-eng-spa")
def test_apertium_batches_in_few_processes(monkeypatch):
    tr = R.ApertiumTranslator("eng-spa", jobs=2, cache=None)
    calls = []
    orig = tr._run
    monkeypatch.setattr(tr, "_run", lambda lines: calls.append(len(lines)) or orig(lines))
    segs = [f"The house number {i} is red." for i in range(900)] + ["The cat ⟦0⟧ is here."]
    out = tr.translate(segs + segs[:10])
    assert len(out) == 911 and len(calls) <= 2 and sum(calls) == 901    # repeats translated once
    assert "⟦0⟧" in out[900] and "casa" in out[0]
    assert out[:10] == out[-10:]
    assert tr.resources()["apertium"] and tr.resources()["pair"] == "eng-spa"


@pytest.mark.skipif(shutil.which("apertium") is None, reason="apt-get install apertium apertium-eng-spa")
def test_apertium_batches_do_not_depend_on_order_or_processes():
    import os
    import random
    assert R.ApertiumTranslator("eng-spa", cache=None).jobs == (os.cpu_count() or 1)
    segs = [f"Item {i}: let the {w} run, then check that it works." for i, w in
            enumerate(["test", "job", "model", "server", "loop"] * 40)]
    shuffled = segs[:]
    random.Random(1).shuffle(shuffled)
    a = R.ApertiumTranslator("eng-spa", jobs=1, chunk=70, cache=None).translate(segs)
    b = dict(zip(shuffled, R.ApertiumTranslator("eng-spa", jobs=3, chunk=70, cache=None).translate(shuffled)))
    assert a == [b[s] for s in segs] and len(set(a)) == len(segs)


@pytest.mark.skipif(shutil.which("apertium") is None, reason="apt-get install apertium apertium-eng-spa")
def test_apertium_without_its_mode_tool_is_a_missing_resource(monkeypatch):
    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "apertium-wblank-mode" else real(name, *a, **k))
    with pytest.raises(R.MissingResourceError, match="apertium-wblank-mode"):
        R.ApertiumTranslator("eng-spa", cache=None)


def test_two_checkpoints_alike_in_their_first_mib_get_two_identities(tmp_path, monkeypatch):
    "sft/ and dpo/checkpoint-500: same name, size and first MiB; the rewrites of one are not served for the other."
    monkeypatch.setenv("REWARD_AUDITOR_CACHE", str(tmp_path / "user-cache"))
    head = bytes(range(256)) * 4096 + b"\0" * (1 << 20)   # the first 2 MiB, the same in both
    dirs = []
    for run, tail in (("sft", b"a"), ("dpo", b"b")):
        d = tmp_path / run / "checkpoint-500"
        d.mkdir(parents=True)
        (d / "config.json").write_text('{"model_type": "llama"}')
        (d / "model.safetensors").write_bytes(head + tail * 4096)
        dirs.append(d)
    sft, dpo = (R.TransformersRewriter(d, cache=tmp_path / "rewrites.sqlite") for d in dirs)
    assert sft.model_id != dpo.model_id
    asked = []
    for rw, who in ((sft, "sft"), (dpo, "dpo")):
        rw._generate = lambda texts, instruction, who=who: (asked.append(who), [f"{who}: {t}" for t in texts])[1]
    assert sft.rewrite(["x"], "do") == ["sft: x"]
    assert dpo.rewrite(["x"], "do") == ["dpo: x"] and asked == ["sft", "dpo"]
    # the same checkpoint again: its own rewrite from the cache, and its digest from the user cache
    again = R.TransformersRewriter(dirs[0], cache=tmp_path / "rewrites.sqlite")
    again._generate = lambda texts, instruction: pytest.fail("a cached rewrite was computed again")
    assert again.model_id == sft.model_id and again.rewrite(["x"], "do") == ["sft: x"]
    assert len(list((tmp_path / "user-cache").rglob("*.txt"))) >= 2   # one remembered digest per file
    # a checkpoint rewritten in place (new bytes, same size) is another model
    path = dirs[0] / "model.safetensors"
    path.write_bytes(head + b"c" * 4096)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))   # even on a coarse clock
    assert R.TransformersRewriter(dirs[0], cache=None).model_id not in (sft.model_id, dpo.model_id)


def test_model_rewriters_count_their_texts_on_a_progress_bar(monkeypatch):
    "A served model's rewrites advance a bar text by text (off a terminal the command line prints it as timed lines)."
    import tqdm.auto
    bars = []

    class Recording(tqdm.auto.tqdm):
        def __init__(self, *a, **kw):
            super().__init__(*a, **{**kw, "disable": True})
            self.label, self.size, self.counted = kw.get("desc"), kw.get("total"), 0
            bars.append(self)

        def update(self, n=1):
            self.counted += n
            return super().update(n)

    monkeypatch.setattr(tqdm.auto, "tqdm", Recording)
    s = _Server()
    try:
        rw = R.OpenAIRewriter(base_url=s.url, model="m", cache=None, concurrency=2)
        assert rw.rewrite(["ab", "cd", "ef"], "reverse it") == ["ba", "dc", "fe"]
    finally:
        s.close()
    assert [(b.label, b.size, b.counted) for b in bars] == [("rewrite with m", 3, 3)]


def test_a_served_rewrite_off_a_terminal_prints_progress_lines(tmp_path):
    "`perturb` with a model rewriter printed nothing off a terminal until it ended; now a line per interval."
    import subprocess
    import sys
    s = _Server(delay=0.15)          # a slow server: each answer takes longer than a bar's refresh interval
    try:
        env = {**os.environ, "REWARD_AUDITOR_PROGRESS_SECONDS": "0", "OMP_NUM_THREADS": "1"}
        r = subprocess.run([sys.executable, "-m", "reward_auditor.cli", "perturb", "--data", "sample", "--limit", "6",
                            "--perturbations", "LC-model", "--rewriter-url", s.url, "--rewriter-name", "m",
                            "--out", str(tmp_path / "p.jsonl")], capture_output=True, text=True, env=env, timeout=300)
    finally:
        s.close()
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("reward-auditor: rewrite with m: ")]
    assert len(lines) >= 2 and all(" after " in ln for ln in lines), r.stderr
