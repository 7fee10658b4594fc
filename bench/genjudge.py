"""Requests and tokens of a generative-judge audit, against the obvious loop.

    python bench/genjudge.py                       # 60 pairs, K = 8, four conditions (two change every item)
    python bench/genjudge.py --pairs 200 --samples 16

One audit of the length-biased judge of tests/fake_judge.py (an in-process OpenAI-compatible server that counts
what it receives) on synthetic pairs with four conditions: the rejected answer padded, the chosen answer padded
(both change every item), a prompt prefix on every third item, and one on no item. Three ways to get the same
K samples per answer order:

- `obvious loop`: one request per sample, per order, per condition, for every item of every condition (counted:
  K × 2 × pairs × (1 + conditions));
- `one sample per request`: this package's scorer with `samples_per_request=1` (measured): unchanged items keep
  their original verdicts and identical requests are made once, but each sample is its own request;
- `n samples per request`: the default (`samples_per_request = K`, measured): one request per presentation.

Prompt tokens are the server's word counts of the messages sent (a proxy for tokens); generated tokens are the
same for equal samples. `shared prefix` is the share of each request's prompt that is the template's system
message, identical in every request of the audit (a server with prefix caching computes it once).
Nothing here asserts anything; the target is ≥ 3× fewer requests than the obvious loop.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("REWARD_AUDITOR_STORE", "off")
REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=60)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--template", default="mt-bench")
    a = ap.parse_args(argv)
    from fake_judge import FakeJudgeServer
    from tiny_models import make_pairs
    from reward_auditor.audit import audit
    from reward_auditor.genjudge import ChatBackend, GenerativeJudgeScorer
    from reward_auditor.perturbations import condition_from_frame
    from reward_auditor.verdicts import load_template

    data = make_pairs(a.pairs, seed=0)
    pad = " Furthermore, as noted above, this point deserves to be stated again in plain words."
    conds = {}
    f = data.copy(); f["rejected"] = f["rejected"] + pad
    conds["pad-rejected"] = condition_from_frame("pad-rejected", data, f, side="response")
    f = data.copy(); f["chosen"] = f["chosen"] + pad
    conds["pad-chosen"] = condition_from_frame("pad-chosen", data, f, side="response")
    f = data.copy(); f.loc[f.index % 3 == 0, "prompt"] = "Please answer: " + f["prompt"]
    conds["prefix-third"] = condition_from_frame("prefix-third", data, f, side="prompt")
    conds["no-change"] = condition_from_frame("no-change", data, data.copy(), side="prompt")
    k, n_cond = a.samples, len(conds)
    system = load_template(a.template).messages("q", "a", "b")[0]["content"] if load_template(a.template).system else ""
    rows = []
    for label, per_request in (("one sample per request", 1), ("n samples per request", k)):
        with FakeJudgeServer() as srv:
            sc = GenerativeJudgeScorer(ChatBackend(srv.url, "length-judge", concurrency=8), a.template, samples=k,
                                       samples_per_request=per_request, name="length-judge")
            audit(data, [sc], perturbations=None, conditions=conds, permutations=1000, progress=False)
            rows.append((label, srv.requests, srv.choices, sc.totals["prompt_tokens"], sc.totals["completion_tokens"]))
    naive_requests = k * 2 * a.pairs * (1 + n_cond)
    per_req_prompt = rows[1][3] / max(1, rows[1][1])
    naive = ("obvious loop", naive_requests, naive_requests, int(per_req_prompt * naive_requests),
             int(rows[1][4] / max(1, rows[1][2]) * naive_requests))
    print(f"{a.pairs} pairs, K = {k} samples per order, {n_cond} conditions, template {a.template}\n")
    print(f"{'':24} {'requests':>9} {'samples':>9} {'prompt tok':>11} {'gen tok':>9} {'requests ×':>11}")
    for label, req, ch, pt, gt in [naive, *rows]:
        print(f"{label:24} {req:9d} {ch:9d} {pt:11d} {gt:9d} {naive_requests / max(1, req):10.1f}×")
    shared = len(system.split()) / per_req_prompt if per_req_prompt else 0.0
    print(f"\nshared prefix: {len(system.split())} of {per_req_prompt:.0f} prompt words per request "
          f"({100 * shared:.0f} %) are the system message common to every request")


if __name__ == "__main__":
    main()
