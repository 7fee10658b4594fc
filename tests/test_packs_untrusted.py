"""Rewrite packs and conditions files from outside: a pack is never data, a malformed one is named in one line, two
files are audited together only when they hold the same items, a data file is bounded by what it expands to, and a
refused command leaves no folder behind."""
import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from reward_auditor import store as S
from reward_auditor.cli import main
from reward_auditor.data import load_sample

from cli_helpers import run_cli as _run

B = ("--scorer", "length", "-B", "50", "--no-report", "-q")


def _one_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    return lines[0]


def _data(path, rows, ids=True):
    "A JSONL preference file of sample rows; without ids the loader numbers the rows (1, 2, ...)."
    frame = load_sample().iloc[rows][["id", "prompt", "chosen", "rejected"]]
    if not ids:
        frame = frame.drop(columns="id")
    frame.to_json(path, orient="records", lines=True, force_ascii=False)
    return path


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    "Two packs of two different files whose ids are row numbers (EF of one, PH of the other), and their data files."
    d = tmp_path_factory.mktemp("packs")
    a, b = _data(d / "a.jsonl", range(0, 10), ids=False), _data(d / "b.jsonl", range(10, 20), ids=False)
    for src, pert, out in ((a, "EF", d / "a.parquet"), (b, "PH", d / "b.parquet")):
        assert main(["perturb", "--data", str(src), "--perturbations", pert, "--out", str(out), "-q"]) == 0
    return d


def _tamper(src, dst, frame_fn=None, meta_fn=None):
    "A copy of the pack `src` with its long table and/or its header changed (what a hand-made pack could hold)."
    t = pq.read_table(src)
    meta = json.loads(t.schema.metadata[S.PACK_KEY])
    frame = t.to_pandas()
    frame = frame_fn(frame) if frame_fn else frame
    meta = meta_fn(meta) or meta if meta_fn else meta
    out = pa.Table.from_pandas(frame, preserve_index=False)
    pq.write_table(out.replace_schema_metadata({**(out.schema.metadata or {}), S.PACK_KEY: json.dumps(meta)}), dst)
    return dst


def test_audit_refuses_data_beside_conditions(capsys, packs, tmp_path):
    "--data with --conditions used to audit the pack's own pairs and ignore --data: now one line, nothing written."
    rc, out = _run(capsys, "audit", "--data", packs / "b.jsonl", "--conditions", packs / "a.parquet",
                   "--out", tmp_path / "run", *B)
    line = _one_line(out.err)
    assert rc == 2 and "not both" in line and line.endswith("(--conditions)"), out.err
    assert not (tmp_path / "run").exists()


def test_two_files_with_the_same_ids_but_other_items_are_refused(capsys, packs, tmp_path):
    "Row-number ids 1..10 in both packs: the ids agree, the original texts do not; the second file is named."
    rc, out = _run(capsys, "audit", "--conditions", packs / "a.parquet", packs / "b.parquet",
                   "--out", tmp_path / "run", *B)
    line = _one_line(out.err)
    assert rc == 2 and str(packs / "b.parquet") in line and "other original texts" in line, out.err
    assert "item '1'" in line
    rc, out = _run(capsys, "audit", "--conditions", packs / "a.parquet", "--out", tmp_path / "ok", *B)
    assert rc == 0, out.err                             # one pack alone still audits


def test_same_originals_encodes_each_row_once_and_always_refuses(monkeypatch):
    "60 shared ids, the last item's text differs: named from one encoding of each file (old: 122 fingerprints)."
    from pathlib import Path
    from reward_auditor import audit as A
    ours = load_sample().head(60)[["id", "subset", "prompt", "chosen", "rejected"]].reset_index(drop=True)
    ours = ours.assign(id=[str(i) for i in range(1, 61)])
    theirs = ours.assign(chosen=ours["chosen"].tolist()[:-1] + [ours["chosen"].iloc[-1] + " (edited)"])
    from reward_auditor import audit_conditions as C   # where _same_originals and data_fingerprint live
    calls, real = [], C.data_fingerprint
    monkeypatch.setattr(C, "data_fingerprint", lambda f: calls.append(len(f)) or real(f))
    with pytest.raises(A.AuditError, match="item '60' has other original texts than in a.jsonl"):
        A._same_originals(Path("b.jsonl"), Path("a.jsonl"), theirs, ours)
    assert len(calls) <= 2, len(calls)
    A._same_originals(Path("b.jsonl"), Path("a.jsonl"), ours.copy(), ours)   # the same items: accepted
    twice = pd.concat([ours, ours.iloc[[-1]]], ignore_index=True)   # id 60 twice: every shared row agrees
    with pytest.raises(A.AuditError, match="an id repeats"):
        A._same_originals(Path("b.jsonl"), Path("a.jsonl"), twice, ours)


def _rename_to_orig(frame):
    return frame.assign(perturbation="orig")


def _orig_header(meta):
    meta["conditions"] = {"orig": meta["conditions"]["EF"]}


def _dup_id(frame):
    ids = frame["id"].tolist()
    ids[1] = ids[0]
    return frame.assign(id=ids)


def _none_text(frame):
    return frame.assign(chosen=[None] + frame["chosen"].tolist()[1:])


def _side_both(meta):
    meta["conditions"]["EF"]["side"] = "both"


def _changed_yes(frame):
    return frame.assign(changed=["yes"] * len(frame))


def _header_without_chosen(meta):
    meta["columns"] = [c for c in meta["columns"] if c != "chosen"]


def _condition_id_changed(meta):
    meta["conditions"]["EF"]["columns"] = ["id", "changed"]


def _condition_columns_text(meta):
    meta["conditions"]["EF"]["columns"] = "id,prompt"


def _null_steps(frame):
    return frame.assign(chosen_steps=[None] + [["a step", "another"]] * (len(frame) - 1))


def _steps_listed(meta):
    meta["conditions"]["EF"]["columns"] = [*meta["conditions"]["EF"]["columns"], "chosen_steps"]


def _text_steps(frame):
    return frame.assign(chosen_steps="one step")


@pytest.mark.parametrize("frame_fn, meta_fn, want", [
    (_rename_to_orig, _orig_header, "a condition is named 'orig'"),
    (_dup_id, None, "row 2, field 'id': condition 'EF' repeats id '1'"),
    (_none_text, None, "row 1, field 'chosen': condition 'EF' has no text (null)"),
    (None, _side_both, "condition 'EF' has side 'both'"),
    (_changed_yes, None, "row 1, field 'changed': condition 'EF' has changed = 'yes'"),
    (None, _header_without_chosen, "its header's columns do not list 'chosen'"),
    (None, _condition_id_changed, "condition 'EF' does not list column 'prompt' in the header"),
    (None, _condition_columns_text, "condition 'EF' has columns 'id,prompt' in the header"),
    (_null_steps, _steps_listed, "row 1, field 'chosen_steps': condition 'EF' has no step list (null)"),
    (_text_steps, _steps_listed, "row 1, field 'chosen_steps': condition 'EF' has str 'one step', not a list of step"),
], ids=["orig", "duplicate-id", "none-text", "side-both", "changed-yes", "header-columns", "condition-columns",
        "columns-not-a-list", "null-steps", "text-steps"])
def test_malformed_pack_is_named_in_one_line(capsys, packs, tmp_path, frame_fn, meta_fn, want):
    bad = _tamper(packs / "a.parquet", tmp_path / "bad.parquet", frame_fn, meta_fn)
    rc, out = _run(capsys, "audit", "--conditions", bad, "--out", tmp_path / "run", *B)
    line = _one_line(out.err)
    assert rc == 2 and f"rewrite pack {bad}" in line and want in line, out.err
    assert not (tmp_path / "run").exists()


def test_a_pack_in_the_data_folder_is_not_data(capsys, tmp_path):
    "perturb wrote its pack into the data folder: --data DIR audits the data file's 12 pairs, not 24."
    d = tmp_path / "data"
    d.mkdir()
    _data(d / "mine.jsonl", range(12))
    rc, out = _run(capsys, "perturb", "--data", d / "mine.jsonl", "--perturbations", "EF", "--out",
                   d / "pack.parquet", "-q")
    assert rc == 0, out.err
    rc, out = _run(capsys, "audit", "--data", d, "--perturbations", "EF", "--out", tmp_path / "run", *B)
    assert rc == 0, out.err
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["data"]["n_items"] == 12
    rc, out = _run(capsys, "audit", "--data", d / "pack.parquet", "--perturbations", "EF",
                   "--out", tmp_path / "run2", *B)
    line = _one_line(out.err)
    assert rc == 2 and str(d / "pack.parquet") in line and "rewrite pack" in line and "--conditions" in line, out.err


@pytest.mark.parametrize("dictionary", [False, True], ids=["plain", "dictionary"])
def test_a_parquet_file_that_expands_past_the_cap_is_refused(capsys, tmp_path, monkeypatch, dictionary):
    "A ~10 KB Parquet file of 8 MiB of repeated text, cap 1 MiB: exit 2 naming the file, before it is decoded whole."
    f = tmp_path / "big.parquet"
    text = "All work and no play. " * 190  # ~4 KiB
    t = pa.table({"prompt": [f"q{i}" for i in range(2000)], "chosen": [text] * 2000, "rejected": ["no"] * 2000})
    pq.write_table(t, f, use_dictionary=dictionary, compression="zstd")
    assert f.stat().st_size < 200_000
    monkeypatch.setenv("REWARD_AUDITOR_MAX_INPUT_MB", "1")
    rc, out = _run(capsys, "audit", "--data", f, "--perturbations", "EF", "--out", tmp_path / "run", *B)
    line = _one_line(out.err)
    assert rc == 2 and str(f) in line and "more than 1 MiB" in line, out.err
    assert not (tmp_path / "run").exists()
    monkeypatch.setenv("REWARD_AUDITOR_MAX_INPUT_MB", "64")
    rc, out = _run(capsys, "perturb", "--data", f, "--perturbations", "EF", "--out", tmp_path / "c.jsonl", "-q")
    assert rc == 0, out.err                             # under the cap it reads as before


def test_a_dictionary_bomb_is_refused_before_it_is_decoded(tmp_path):
    "958 bytes on disk, one 900 KiB text in 1024 rows, cap 1 MiB: refused with Arrow's peak under 8 MiB, not 1.1 GiB."
    import subprocess
    import sys
    f = tmp_path / "bomb.parquet"
    pq.write_table(pa.table({"prompt": ["y" * (900 << 10)] * 1024}), f, compression="zstd")
    assert f.stat().st_size < 10_000
    code = ("import resource, sys, pyarrow as pa\n"
            "from reward_auditor.guards import InputTooLarge, read_parquet_capped\n"
            "rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "try:\n    read_parquet_capped(sys.argv[1], cap=1 << 20); print('read')\n"
            "except InputTooLarge as e:\n    print('refused:', e)\n"
            "print(pa.default_memory_pool().max_memory(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss)\n")
    out = subprocess.run([sys.executable, "-c", code, str(f)], capture_output=True, text=True, timeout=300)
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 0 and lines[0].startswith("refused:") and "more than 1 MiB" in lines[0], out
    peak, rss_kib = map(int, lines[-1].split())
    assert peak < 8 << 20 and rss_kib < 64 << 10, (peak, rss_kib)   # a small multiple of the 1 MiB cap


@pytest.mark.parametrize("command", ["scorer", "heterogeneity", "meta", "calibration"])
def test_every_parquet_file_a_user_names_is_capped(capsys, tmp_path, monkeypatch, command):
    "A score file, results file or audit table of 2 MiB of rows (a few KB on disk), cap 1 MiB: exit 2 naming it."
    f = tmp_path / "scores.parquet"
    n = 512
    pq.write_table(pa.table({"id": [str(i) for i in range(n)], "prompt": ["p" * 4096] * n,
                             "chosen": ["c" * 4096] * n, "rejected": ["r"] * n, "score_chosen": [1.0] * n,
                             "score_rejected": [0.0] * n, "results": [1] * n, "subset": ["chat"] * n}), f)
    assert f.stat().st_size < 100_000
    data = _data(tmp_path / "d.jsonl", range(10))
    argv = {"scorer": ("audit", "--data", data, "--scorer", f, "--out", tmp_path / "run", "--no-report", "-q"),
            "heterogeneity": ("heterogeneity", f, "-q"), "meta": ("meta", f, "-q"),
            "calibration": ("calibration", f, "--out", tmp_path / "cal", "--no-report", "-q")}[command]
    monkeypatch.setenv("REWARD_AUDITOR_MAX_INPUT_MB", "1")
    rc, out = _run(capsys, *argv)
    line = _one_line(out.err)
    assert rc == 2 and str(f) in line and "more than 1 MiB" in line, out.err


def test_a_pack_that_expands_past_the_cap_is_refused(capsys, packs, tmp_path, monkeypatch):
    big = _tamper(packs / "a.parquet", tmp_path / "big.parquet",
                  lambda f: f.assign(original_chosen=[c + " pad" * 30_000 for c in f["original_chosen"]]))
    monkeypatch.setenv("REWARD_AUDITOR_MAX_INPUT_MB", "1")
    rc, out = _run(capsys, "audit", "--conditions", big, "--out", tmp_path / "run", *B)
    line = _one_line(out.err)
    assert rc == 2 and f"rewrite pack {big}" in line and "more than 1 MiB" in line, out.err


# a refused command changes nothing on disk: no --out folder (nor its parents) appears

def test_refused_audit_makes_no_folder(capsys, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "p", "chosen": "a"}\n')
    rc, out = _run(capsys, "audit", "--data", bad, "--out", tmp_path / "new" / "run", *B)
    assert rc == 2 and str(bad) in _one_line(out.err), out.err
    assert not (tmp_path / "new").exists()


def test_refused_audit_from_python_makes_no_folder(tmp_path):
    "audit() refusing its data (a pair without rejected) leaves neither the new --out folder nor its parent."
    from reward_auditor.audit import audit
    from reward_auditor.data import DataError
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "p", "chosen": "a"}\n')
    with pytest.raises(DataError, match="bad.jsonl"):
        audit(str(bad), "length", ["EF"], permutations=200, out=tmp_path / "new" / "run", progress=False)
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    with pytest.raises(DataError):
        audit(str(bad), "length", ["EF"], permutations=200, out=kept, progress=False)
    assert list(kept.iterdir()) == []                    # an existing folder: not even the lock file stays


def test_refused_compare_makes_no_folder(capsys, tmp_path):
    run = tmp_path / "not-a-run"
    run.mkdir()
    rc, out = _run(capsys, "compare", run, "--out", tmp_path / "new" / "cmp", "-q")
    assert rc == 2, out.err
    assert not (tmp_path / "new").exists()


def test_refused_calibration_makes_no_folder(capsys, tmp_path):
    bad = tmp_path / "scores.csv"
    bad.write_text("nothing,useful\n1,2\n")
    rc, out = _run(capsys, "calibration", bad, "--out", tmp_path / "new" / "cal", "--no-report", "-q")
    assert rc == 2, out.err
    assert not (tmp_path / "new").exists()


def test_refused_perturb_makes_no_folder(capsys, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "p", "chosen": "a"}\n')
    rc, out = _run(capsys, "perturb", "--data", bad, "--perturbations", "EF", "--out", tmp_path / "new" / "c.jsonl")
    assert rc == 2 and str(bad) in _one_line(out.err), out.err
    assert not (tmp_path / "new").exists()


def test_refused_audit_leaves_an_existing_folder_as_it_was(capsys, tmp_path):
    "--out an existing empty folder: a refused audit leaves no lock file behind there either."
    bad, run = tmp_path / "bad.jsonl", tmp_path / "run"
    bad.write_text('{"prompt": "p", "chosen": "a"}\n')
    run.mkdir()
    rc, out = _run(capsys, "audit", "--data", bad, "--out", run, *B)
    assert rc == 2 and str(bad) in _one_line(out.err), out.err
    assert list(run.iterdir()) == []


def test_audit_refuses_a_condition_named_orig_from_python():
    "audit(conditions={'orig': ...}): the name of the original pairs is not a condition's, whatever the source."
    from reward_auditor.audit import AuditError, audit, make_conditions
    data = load_sample().head(8)
    conds, _ = make_conditions(data, ["EF"], seed=0)
    with pytest.raises(AuditError, match="named 'orig'"):
        audit(data, "length", None, conditions={"orig": conds["EF"]}, permutations=50, progress=False)
