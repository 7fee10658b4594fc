"""An in-process OpenAI-compatible chat server (stdlib ThreadingHTTPServer on 127.0.0.1) whose judges follow known rules.

It serves `GET /v1/models` and `POST /v1/chat/completions` with `n`, `seed`, `temperature`, `max_tokens` and
`chat_template_kwargs.enable_thinking`. Each choice is a short rationale and a verdict in the format the prompt
asks for (MT-Bench `[[A]]`/`[[B]]`/`[[C]]`, RewardBench 2 `[[A]]`/`[[B]]`, RM-R1 `<answer>[[A]]</answer>`,
JudgeBench `Output (a)`, RM-Bench `\\boxed{A>B}`, or `Rating: [[N]]`), drawn from a generator seeded by the
request's seed, the choice's index and the messages, so one request always gets the same answer.

The judges (the served model names):
* `length-judge` — picks the answer with more words 9 times in 10 (equal lengths: a coin); rates 1 + words // 4;
* `position-judge` — picks slot A 8 times in 10, whatever the answers; rates 6 ± 1;
* `null-judge` — a fair coin between A and B (a tie 1 time in 10), blind to the answers; rates 5 ± 2;
* `flaky-judge` — the length judge, but a share `fail_rate` of its samples are gibberish with no verdict.

Samples with thinking on (the default) start with a `<think>` block that names the opposite verdict, so a parser
that does not strip thinking reads the wrong verdict. `invalid_emitted` counts the gibberish samples sent (each
distinct (messages, seed, index) once).

    with FakeJudgeServer() as srv:
        scorer = GenerativeJudgeScorer(ChatBackend(srv.url, "length-judge"), "mt-bench", samples=4)
"""
from __future__ import annotations

import hashlib
import json
import random
import re
import threading
import time

from fake_vllm import JSONHandler, LocalServer

JUDGES = ("length-judge", "position-judge", "null-judge", "flaky-judge")
_A = re.compile(r"\[Answer A\]\n(.*?)\n\[End of Answer A\]", re.S)
_B = re.compile(r"\[Answer B\]\n(.*?)\n\[End of Answer B\]", re.S)
_ONE = re.compile(r"\[Answer\]\n(.*?)\n\[End of Answer\]", re.S)


def instructions(text: str) -> str:
    "The judge's instructions: the text without the question and the answers (which may hold a \\boxed{} or [[A]])."
    starts = [i for i in (text.find("[Question]"), text.find("# Instruction:")) if i >= 0]
    end = text.rfind("[End of Answer")
    return text if not starts or end < 0 else text[:min(starts)] + text[end:]


def verdict_format(text: str) -> str:
    "Which verdict format the judge's instructions ask for."
    text = instructions(text)
    if "\\boxed{" in text:
        return "boxed"
    if "<answer>[[A]]</answer>" in text:
        return "rm-r1"
    if "Output (a)" in text:
        return "judgebench"
    if "Rating: [[" in text:
        return "rating"
    if "[[C]]" in text:
        return "mt-bench"
    return "two-way"


def spell(fmt: str, side: str) -> str:
    "A verdict (A, B or tie) written in a format."
    if fmt == "boxed":
        return {"A": "\\boxed{A>B}", "B": "\\boxed{B>>A}", "tie": "\\boxed{A=B}"}[side]
    if fmt == "rm-r1":
        return f"<answer>[[{side}]]</answer>"
    if fmt == "judgebench":
        return f"Output ({side.lower()})"
    return "[[C]]" if side == "tie" else f"[[{side}]]"


class FakeJudgeServer(LocalServer):
    def __init__(self, fail_rate: float = 0.25, delay: float = 0.0, fail: list[int] | None = None,
                 judges=JUDGES, die_after: int | None = None, port: int = 0, max_prompt_words: int | None = None,
                 ignore_n: bool = False):
        self.fail_rate, self.delay, self.fail, self.judges = float(fail_rate), float(delay), list(fail or []), tuple(judges)
        self.die_after, self.max_prompt_words = die_after, max_prompt_words
        self.ignore_n = bool(ignore_n)   # answer one choice whatever `n` asks (a server without n)
        self.requests = self.choices = self.active = self.max_active = 0
        self.invalid_seen: set = set()
        self.kwargs_seen: list = []
        self.lock = threading.Lock()
        fake = self

        class Handler(JSONHandler):
            def do_GET(self):
                if self.path != "/v1/models":
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                self._send(200, {"object": "list", "data": [{"id": j, "object": "model", "root": j,
                                                             "max_model_len": 4096} for j in fake.judges]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with fake.lock:
                    fake.active += 1
                    fake.max_active = max(fake.max_active, fake.active)
                    status = fake.fail.pop(0) if fake.fail else None
                    n_seen = fake.requests
                try:
                    if fake.die_after is not None and n_seen >= fake.die_after:
                        time.sleep(3600)  # hangs: the client is killed while waiting
                    time.sleep(fake.delay)
                    if status is not None:
                        return self._send(status, {"error": {"message": f"injected {status}"}})
                    if self.path != "/v1/chat/completions":
                        return self._send(404, {"error": {"message": f"no route {self.path}"}})
                    if body.get("model") not in fake.judges:
                        return self._send(404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}})
                    words = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
                    if fake.max_prompt_words is not None and words > fake.max_prompt_words:
                        return self._send(400, {"error": {"message": (
                            f"This model's maximum context length is {fake.max_prompt_words} tokens. However, you "
                            f"requested {words} tokens in the messages. Please reduce the length of the messages."),
                            "type": "BadRequestError", "code": 400}})
                    self._send(200, fake.chat(body))
                finally:
                    with fake.lock:
                        fake.active -= 1

        self.serve(Handler, port)

    def _side(self, model: str, a: str, b: str, rng: random.Random) -> str:
        if model == "position-judge":
            return "A" if rng.random() < 0.8 else "B"
        if model == "null-judge":
            u = rng.random()
            return "tie" if u < 0.1 else "A" if u < 0.55 else "B"
        la, lb = len(a.split()), len(b.split())
        if la == lb:
            return "A" if rng.random() < 0.5 else "B"
        longer = "A" if la > lb else "B"
        return longer if rng.random() < 0.9 else ("B" if longer == "A" else "A")

    def _rating(self, model: str, answer: str, rng: random.Random) -> int:
        if model in ("length-judge", "flaky-judge"):
            r = 1 + len(answer.split()) // 4
        elif model == "position-judge":
            r = 6 + rng.choice((-1, 0, 1))
        else:
            r = 5 + rng.choice((-2, -1, 0, 1, 2))
        return max(1, min(10, r))

    def sample(self, model: str, messages: list, seed: int, index: int, thinking: bool) -> tuple[str, bool]:
        "(text, is_gibberish) of one choice."
        text = "\n".join(str(m.get("content", "")) for m in messages)
        h = hashlib.sha256(json.dumps([model, seed, index, text]).encode()).digest()
        rng = random.Random(int.from_bytes(h[:8], "big"))
        fmt = verdict_format(text)
        if model == "flaky-judge" and rng.random() < self.fail_rate:
            return "zq vorp " * rng.randint(1, 6) + "no decision", True
        if fmt == "rating":
            m = _ONE.search(text)
            r = self._rating(model, m.group(1) if m else "", rng)
            think = f"<think>Rating: [[{11 - r}]] maybe</think>\n" if thinking else ""
            return f"{think}The answer covers the question.\nRating: [[{r}]]", False
        ma, mb = _A.search(text), _B.search(text)
        a, b = (ma.group(1) if ma else ""), (mb.group(1) if mb else "")
        side = self._side(model, a, b, rng)
        if fmt in ("two-way", "rm-r1", "judgebench") and side == "tie":
            side = "A" if rng.random() < 0.5 else "B"
        other = {"A": "B", "B": "A", "tie": "A"}[side]
        think = f"<think>At first sight {spell(fmt, other)} looks right.</think>\n" if thinking else ""
        return f"{think}Comparing both answers on accuracy and detail.\nVerdict: {spell(fmt, side)}", False

    def chat(self, body: dict) -> dict:
        n, seed = 1 if self.ignore_n else int(body.get("n") or 1), int(body.get("seed") or 0)
        kw = body.get("chat_template_kwargs") or {}
        thinking = kw.get("enable_thinking", True) is not False
        choices, tokens = [], 0
        for i in range(n):
            text, bad = self.sample(body["model"], body["messages"], seed, i, thinking)
            if bad:
                key = hashlib.sha256(json.dumps([body["model"], body["messages"], seed, i]).encode()).hexdigest()
                with self.lock:
                    self.invalid_seen.add(key)
            tokens += len(text.split())
            choices.append({"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"})
        with self.lock:
            self.requests += 1
            self.choices += n
            self.kwargs_seen.append(kw)
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
        return {"id": "chatcmpl-fake", "object": "chat.completion", "model": body["model"], "choices": choices,
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": tokens,
                          "total_tokens": prompt_tokens + tokens}}

    @property
    def invalid_emitted(self) -> int:
        return len(self.invalid_seen)


if __name__ == "__main__":  # serve until killed: python tests/fake_judge.py [PORT [JUDGE ...]]
    import sys
    srv = FakeJudgeServer(port=int(sys.argv[1]) if len(sys.argv) > 1 else 0, judges=tuple(sys.argv[2:]) or JUDGES)
    print(srv.url, flush=True)
    threading.Event().wait()
