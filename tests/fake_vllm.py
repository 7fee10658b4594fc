"""An in-process stand-in for a vLLM server (stdlib ThreadingHTTPServer on 127.0.0.1), backed by a tiny model.

It speaks the parts of vLLM's HTTP API the endpoint scorers use: `GET /v1/models`, `POST /classify` (token ids in,
`use_activation` honoured), `POST /v1/completions` (token-id prompt, `echo` with prompt log-probs) and
`POST /v1/chat/completions` (messages rendered with the tiny model's chat template; `logprobs`/`top_logprobs` give
the top-k candidates of the first generated token, as hosted OpenAI-compatible APIs do). It counts
requests in flight, and can inject failures: a list of HTTP statuses to answer first, a delay, or dying after n
requests. Every request is answered with one padded forward pass of exactly the ids it carries.

    with FakeVLLM(rm_folder) as server:
        scorer = EndpointRewardScorer(server.url)
"""
from __future__ import annotations

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer



class JSONHandler(BaseHTTPRequestHandler):
    "A quiet handler that answers JSON (with Retry-After: 0 on 429 and 503); `sent` sees each status code."
    def log_message(self, *a):
        pass

    def sent(self, code: int) -> None:
        pass

    def _send(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        if code in (429, 503):
            self.send_header("Retry-After", "0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.sent(code)

class LocalServer:
    "A ThreadingHTTPServer on 127.0.0.1 answered from a daemon thread; `close` (or leaving a `with`) stops it once."
    def serve(self, handler: type, port: int = 0) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", int(port)), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.closed = False
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        if not self.closed:
            self.closed = True
            self.httpd.shutdown()
            self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class FakeVLLM(LocalServer):
    def __init__(self, rm: str | None = None, lm: str | None = None, name: str | None = None, delay: float = 0.0,
                 fail: list[int] | None = None, die_after: int | None = None, ignore_activation: bool = False,
                 slow_first: float = 0.0, boost: dict | None = None):
        from reward_auditor.scorers import DiscriminativeScorer, JudgeScorer
        self.rm = DiscriminativeScorer(rm, dtype="float32", device="cpu") if rm else None
        self.lm = JudgeScorer(lm, dtype="float32", device="cpu") if lm else None
        self.name = name or str(rm or lm)
        self.max_model_len = (self.rm or self.lm).max_length  # the model's own limit, as vLLM reports it
        self.delay, self.fail, self.die_after = delay, list(fail or []), die_after
        self.ignore_activation, self.slow_first = ignore_activation, slow_first
        self.boost = dict(boost or {})  # chat route only: token text → added logit (a judge that says "A" a lot)
        self.active = self.max_active = self.served = 0
        self.statuses: list[int] = []
        self.auth: set[str] = set()  # Authorization headers received
        self.lock, self.model_lock = threading.Lock(), threading.Lock()
        fake = self

        class Handler(JSONHandler):
            def sent(self, code):
                fake.statuses.append(code)

            def do_GET(self):
                if self.path != "/v1/models":
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                self._send(200, {"object": "list", "data": [{"id": fake.name, "object": "model", "root": fake.name,
                                                             "max_model_len": fake.max_model_len}]})

            def do_POST(self):
                with fake.lock:
                    fake.active += 1
                    fake.max_active = max(fake.max_active, fake.active)
                    n = fake.served
                    fake.served += 1
                    status = fake.fail.pop(0) if fake.fail else None
                try:  # the answer is computed while counted as in flight, and sent after (so counts never overlap)
                    answer = self._answer(n, status)
                finally:
                    with fake.lock:
                        fake.active -= 1
                if answer is None:
                    self.close_connection = True
                    return
                self._send(*answer)

            def _answer(self, n, status):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if self.headers.get("Authorization"):
                    fake.auth.add(self.headers["Authorization"])
                if fake.die_after is not None and n >= fake.die_after:
                    threading.Thread(target=fake.close, daemon=True).start()
                    return None
                if status == "slow":
                    time.sleep(fake.slow_first)
                elif status is not None:
                    return status, {"error": {"message": f"injected {status}", "code": status}}
                time.sleep(fake.delay)
                if body.get("model") != fake.name:
                    return 404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}}
                if self.path == "/classify":
                    return 200, fake.classify(body)
                if self.path == "/v1/completions":
                    return 200, fake.completions(body)
                if self.path == "/v1/chat/completions":
                    return 200, fake.chat(body)
                return 404, {"error": {"message": f"no route {self.path}"}}

        self.serve(Handler)

    def classify(self, body):
        import torch
        seqs = body["input"]
        if seqs and isinstance(seqs[0], int):
            seqs = [seqs]
        with self.model_lock, torch.inference_mode():
            vals = self.rm._forward(*self.rm._pad(seqs), [0] * len(seqs))
        act = body.get("use_activation", True) is not False or self.ignore_activation
        data = [{"index": i, "label": "LABEL_0", "probs": [1 / (1 + math.exp(-v)) if act else v], "num_classes": 1}
                for i, v in enumerate(vals)]
        return {"id": "classify-fake", "object": "list", "model": self.name, "data": data,
                "usage": {"prompt_tokens": sum(map(len, seqs))}}

    def completions(self, body):
        "echo + logprobs: the log-probability of every prompt token after the first (vLLM/OpenAI legacy layout)."
        import torch
        ids = body["prompt"]
        with self.model_lock, torch.inference_mode():
            t = torch.tensor([ids])
            logits = self.lm.model(input_ids=t, attention_mask=torch.ones_like(t)).logits[0].double()
            lsm = torch.log_softmax(logits, -1)
        lps = [None] + [float(lsm[j - 1, ids[j]]) for j in range(1, len(ids))]
        toks = [self.lm.tokenizer.convert_ids_to_tokens(i) for i in ids]
        return {"id": "cmpl-fake", "object": "text_completion", "model": self.name,
                "choices": [{"index": 0, "text": "", "finish_reason": "length",
                             "logprobs": {"tokens": toks, "token_logprobs": lps, "top_logprobs": None,
                                          "text_offset": []}}]}

    def chat(self, body):
        "One generated token with the top-k log-probabilities of its position (OpenAI chat layout)."
        import torch
        from reward_auditor.scorers import encode_text, render_messages
        tok = self.lm.tokenizer
        ids = encode_text(tok, render_messages(tok, body["messages"], True))
        with self.model_lock, torch.inference_mode():
            t = torch.tensor([ids])
            logits = self.lm.model(input_ids=t, attention_mask=torch.ones_like(t)).logits[0, -1].double()
            for text, add in self.boost.items():
                logits[tok.encode(text, add_special_tokens=False)[0]] += add
            lsm = torch.log_softmax(logits, -1)
        k = min(int(body.get("top_logprobs") or 0), 20) if body.get("logprobs") else 0
        vals, top = torch.topk(lsm, max(k, 1))
        entry = lambda i, v: {"token": tok.decode([int(i)]), "logprob": float(v), "bytes": list(tok.decode([int(i)]).encode())}
        first = entry(top[0], vals[0])
        content = {**first, "top_logprobs": [entry(i, v) for i, v in zip(top[:k], vals[:k])]}
        return {"id": "chatcmpl-fake", "object": "chat.completion", "model": self.name,
                "choices": [{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": first["token"]},
                             "logprobs": {"content": [content]} if body.get("logprobs") else None}]}
