"""items.jsonl beside items.parquet: one line per scorer, pair and condition with its rewards (RewardBench's habit)."""
import json

import numpy as np
import pandas as pd

from reward_auditor.audit import audit
from reward_auditor.data import load_sample


def test_items_jsonl_has_one_line_per_pair_and_condition(tmp_path):
    data = load_sample()
    res = audit(data, ["overlap", "length"], ["EF", "LE"], permutations=100, out=tmp_path, progress=False)
    lines = [json.loads(x) for x in (tmp_path / "items.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 2 * len(data) * 3                       # 2 scorers x pairs x (orig, EF, LE)
    got = pd.DataFrame(lines)
    assert set(got.columns) >= {"model", "subset", "id", "condition", "reward_chosen", "reward_rejected", "margin",
                                "correct"}
    assert got.groupby(["model", "id"]).size().eq(3).all()
    # the rewards are the items' own, and `correct` of the original pairs gives the risk table's accuracy
    it = res.items.set_index(["model", "id", "perturbation"])
    le = got[got["condition"] == "LE"].set_index(["model", "id"])
    orig = got[got["condition"] == "orig"].set_index(["model", "id"])
    for cond, frame, when in (("LE", le, "after"), ("orig", orig, "before")):
        mine = it.xs("LE", level="perturbation").loc[frame.index]
        for side in ("chosen", "rejected"):
            np.testing.assert_array_equal(frame[f"reward_{side}"].to_numpy(), mine[f"reward_{side}_{when}"].to_numpy(),
                                          err_msg=f"{cond} {side}")
    # margin and correct follow from the two rewards (margin > 0 is right), recomputed here
    np.testing.assert_allclose(got["margin"], got["reward_chosen"] - got["reward_rejected"], rtol=0, atol=1e-12)
    assert (got["correct"] == (got["reward_chosen"] > got["reward_rejected"])).all()
    acc = orig.groupby(["model", "subset"])["correct"].mean()
    t = res.table.drop_duplicates(["model", "subset"]).set_index(["model", "subset"])["accuracy_before"]
    np.testing.assert_allclose(acc.loc[t.index].to_numpy(), t.to_numpy(), rtol=0, atol=1e-12)
