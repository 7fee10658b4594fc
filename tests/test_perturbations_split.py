"""Perturbing in parts gives the conditions of perturbing the whole, byte for byte: local processes, Ray tasks,
shuffled items, and a process that perturbed a few items first (against a fresh process)."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, SHARED_DATA
from reward_auditor import perturbations as P
from reward_auditor.data import load_preferences, load_sample
from reward_auditor.engines import PerturbPool, engine_perturber, splittable

HAS_APERTIUM = shutil.which("apertium") is not None
NO_APERTIUM = "apertium is not installed (apt-get install apertium apertium-eng-spa)"


def items(k: int = 4) -> pd.DataFrame:
    "The sample k times with fresh ids, then RM-Bench chat answers when the shared data is present."
    base = load_sample()[["id", "subset", "prompt", "chosen", "rejected"]]
    parts = [base.assign(id=base["id"].astype(str) + f"-{j}") for j in range(k)]
    chat = SHARED_DATA / "rm-bench" / "chat_filtered.json"
    if chat.exists():
        parts.append(load_preferences(chat).head(40)[["id", "subset", "prompt", "chosen", "rejected"]])
    return pd.concat(parts, ignore_index=True)


def digest(conds: dict) -> dict:
    return {n: hashlib.sha256(c.frame.to_json(orient="records").encode()).hexdigest() for n, c in conds.items()}


def test_translation_and_rules_are_splittable_model_rewriters_are_not():
    for n in P.BUILTINS:
        assert splittable(P.registry[n]), n
    assert not splittable(P.registry["LC-model"]) and not splittable(None)
    assert engine_perturber(None, 1) is None and isinstance(engine_perturber(None, 2), PerturbPool)


@pytest.mark.skipif(not HAS_APERTIUM, reason=NO_APERTIUM)
def test_translation_split_or_shuffled_equals_the_whole():
    data = items()
    whole = P.perturb(data, ["LC", "SLC"], seed=5)
    with PerturbPool(workers=2, min_items=16) as pool:
        split = pool.perturb(data, ["LC", "SLC"], seed=5)
    shuffled = data.sample(frac=1.0, random_state=1).reset_index(drop=True)
    shuf = P.perturb(shuffled, ["LC", "SLC"], seed=5)
    for n in ("LC", "SLC"):
        pd.testing.assert_frame_equal(split[n].frame, whole[n].frame, check_exact=True)
        assert split[n].record == whole[n].record
        a = shuf[n].frame.set_index("id").loc[whole[n].frame["id"]].reset_index()
        pd.testing.assert_frame_equal(a, whole[n].frame, check_exact=True)
        assert whole[n].n_changed > len(data) // 2


FRESH = """
import hashlib, json, sys
import pandas as pd
from reward_auditor import perturbations as P
data = pd.read_parquet(sys.argv[1])
conds = P.perturb(data, {names}, seed=7)
print(json.dumps({{n: hashlib.sha256(c.frame.to_json(orient="records").encode()).hexdigest() for n, c in conds.items()}}))
"""


@pytest.mark.skipif(not HAS_APERTIUM, reason=NO_APERTIUM)
def test_a_few_items_first_then_the_whole_equals_a_fresh_process(tmp_path):
    "Whatever the process translated before (here two items), the whole frame comes out as in a fresh process."
    data = items(2)
    names = ["LC", "SLC"]
    P.perturb(data.head(2), names, seed=7)
    P.perturb(data.iloc[::-3], names, seed=7)
    here = digest(P.perturb(data, names, seed=7))
    data.to_parquet(tmp_path / "data.parquet")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", FRESH.format(names=names), str(tmp_path / "data.parquet")],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == here


# The Ray tests of perturbing in parts are in test_engines.py, which starts the test run's one Ray instance.
