"""Loaders, validation and real benchmark files for reward_auditor.data."""
import builtins
import gzip
import json
import warnings

import numpy as np
import pandas as pd
import pytest

from conftest import shared_file
from reward_auditor.data import (CANONICAL_COLUMNS, PAPER_RESPONSE_LABELS, RMBENCH_STYLES, DataError, DataWarning,
                                 detect_format, load_perturbed, load_preferences, load_sample, read_records,
                                 rmbench_pair, rmbench_style_matrix, rmbench_style_rewards, rmbench_styles,
                                 sample_path, split_hh, validate)

PAIRS = [
    {"id": "a", "subset": "chat", "prompt": "Say hi.", "chosen": "Hi there!", "rejected": "No."},
    {"id": "b", "subset": "math", "prompt": "What is $2+2$?", "chosen": "$4$", "rejected": "$5$"},
    {"id": "c", "subset": "code", "prompt": "Reverse `s`.", "chosen": "```python\ns[::-1]\n```", "rejected": "s"},
]


def jsonl(rows):
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def canonical(frame):
    return frame[list(CANONICAL_COLUMNS)].reset_index(drop=True)


@pytest.fixture
def expected():
    return pd.DataFrame(PAIRS)


# ---------------------------------------------------------------- sample

def test_sample_is_valid_and_balanced():
    s = load_sample()
    assert sample_path().name == "preferences.jsonl" and sample_path().exists()
    assert (sample_path().parent / "LICENSE").exists()
    assert len(s) == 80 and s["id"].is_unique
    assert s["subset"].value_counts().to_dict() == {k: 16 for k in
                                                    ["chat", "math", "code", "safety-refuse", "safety-response"]}
    assert (s["chosen"] != s["rejected"]).all()


def test_sample_covers_hard_cases():
    s = load_sample()
    text = s["prompt"] + "\n" + s["chosen"]
    for pattern in [r"```", r"`[^`]+`", r"\$[^$]+\$", r"\\\[", r"\\boxed", r"1,200\.50", r"2\.5e3", r"https?://",
                    r"[\w.]+@[\w-]+\.\w+", r"\|.*\|.*\|", r"\n\s*[-*\d]"]:
        assert text.str.contains(pattern, regex=True).any(), pattern
    assert s["prompt"].str.contains("\n").sum() >= 4


def test_sample_overlap_control_beats_chance():
    s = load_sample()
    def words(t): return set(__import__("re").findall(r"\w+", t.lower()))
    wins = [len(words(p) & words(c)) > len(words(p) & words(r)) for p, c, r in zip(s["prompt"], s["chosen"], s["rejected"])]
    assert 0.65 < np.mean(wins) < 1.0  # informative but not trivially perfect


# ---------------------------------------------------------------- containers

def test_every_container_gives_the_same_frame(tmp_path, expected):
    (tmp_path / "p.jsonl").write_text(jsonl(PAIRS))
    (tmp_path / "p.json").write_text(json.dumps(PAIRS))
    (tmp_path / "wrapped.json").write_text(json.dumps({"data": PAIRS}))
    (tmp_path / "columns.json").write_text(json.dumps({k: [r[k] for r in PAIRS] for k in PAIRS[0]}))
    (tmp_path / "lines.json").write_text(jsonl(PAIRS))
    expected.to_csv(tmp_path / "p.csv", index=False)
    expected.to_parquet(tmp_path / "p.parquet")
    (tmp_path / "p.jsonl.gz").write_bytes(gzip.compress(jsonl(PAIRS).encode()))
    (tmp_path / "noext").write_text(jsonl(PAIRS))
    for name in ["p.jsonl", "p.json", "wrapped.json", "columns.json", "lines.json", "p.csv", "p.parquet",
                 "p.jsonl.gz", "noext"]:
        got = load_preferences(tmp_path / name)
        pd.testing.assert_frame_equal(canonical(got), expected, check_dtype=False, obj=name)
        assert got.attrs["format"] == "preferences" and got.attrs["source"] == str(tmp_path / name)
    for src in (expected, PAIRS):
        pd.testing.assert_frame_equal(canonical(load_preferences(src)), expected, check_dtype=False)


def test_missing_id_and_subset_are_filled_and_extras_kept(tmp_path):
    rows = [{"prompt": "p", "chosen": "c", "rejected": "r", "meta": 1}, {"prompt": "q", "chosen": "d", "rejected": "s", "meta": 2}]
    (tmp_path / "x.jsonl").write_text("\n" + jsonl(rows))
    f = load_preferences(tmp_path / "x.jsonl", subset="toy")
    assert f["id"].tolist() == ["2", "3"]  # line numbers
    assert f["subset"].tolist() == ["toy", "toy"] and f["meta"].tolist() == [1, 2]


def test_columns_rename_and_format_override(tmp_path):
    (tmp_path / "weird.txt").write_text("q,good,bad\nHi?,Hello!,Go.\n")
    f = load_preferences(tmp_path / "weird.txt", format="csv", columns={"q": "prompt", "good": "chosen", "bad": "rejected"})
    assert f.loc[0, ["prompt", "chosen", "rejected"]].tolist() == ["Hi?", "Hello!", "Go."]
    with pytest.raises(DataError, match=r"weird\.txt, field 'question': is not in the data, so it cannot be renamed"):
        load_preferences(tmp_path / "weird.txt", format="csv", columns={"question": "prompt"})
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        load_preferences(tmp_path / "weird.txt", format="xml")


def test_ids_become_text_and_rewardbench_v1_rows_keep_models():
    rows = [{"prompt": "p", "chosen": "c", "chosen_model": "m1", "rejected": "r", "rejected_model": "m2",
             "subset": "alpacaeval-easy", "id": 30}]
    f = load_preferences(rows, format="rewardbench")
    assert f["id"].tolist() == ["30"] and f.loc[0, "chosen_model"] == "m1" and f.loc[0, "rejected_model"] == "m2"
    assert load_preferences(rows).attrs["format"] == "preferences"


def test_validate_drop_mode():
    frame = pd.DataFrame(PAIRS + [{"id": "d", "subset": "chat", "prompt": "x", "chosen": "same", "rejected": "same"},
                                  {"id": "a", "subset": "chat", "prompt": "y", "chosen": "1", "rejected": "2"}])
    with pytest.warns(DataWarning, match="dropped 2 invalid row"):
        v = validate(frame, errors="drop")
    assert v["id"].tolist() == ["a", "b", "c"]
    assert v.attrs["dropped"] == [(4, "rejected", "is identical to 'chosen'"),
                                  (5, "id", "duplicates id 'a' first seen at row 1")]


# ---------------------------------------------------------------- Hugging Face datasets

def test_hf_dataset_dir_and_object(tmp_path, expected):
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    ds = datasets.Dataset.from_pandas(expected, preserve_index=False)
    ds.save_to_disk(str(tmp_path / "one"))
    pd.testing.assert_frame_equal(canonical(load_preferences(tmp_path / "one")), expected, check_dtype=False)
    pd.testing.assert_frame_equal(canonical(load_preferences(ds)), expected, check_dtype=False)
    datasets.DatasetDict({"train": ds, "test": ds.select([0])}).save_to_disk(str(tmp_path / "two"))
    with pytest.raises(DataError, match=r"field 'split': has splits train, test \(choose one with split='...'\)"):
        load_preferences(tmp_path / "two")
    assert load_preferences(tmp_path / "two", split="test")["id"].tolist() == ["a"]
    assert load_preferences(str(tmp_path / "one"), format="hf")["id"].tolist() == ["a", "b", "c"]


def test_hf_hub_id_goes_through_load_dataset(monkeypatch, expected):
    datasets = pytest.importorskip("datasets")
    calls = []

    def fake_load_dataset(path, name=None, split=None, **kw):
        calls.append((path, name, split))
        ds = datasets.Dataset.from_pandas(expected, preserve_index=False)
        return ds if split else datasets.DatasetDict({"filtered": ds})
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    f = load_preferences("allenai/reward-bench", split="filtered")
    assert calls == [("allenai/reward-bench", None, "filtered")] and f["id"].tolist() == ["a", "b", "c"]
    assert load_preferences("allenai/reward-bench")["id"].tolist() == ["a", "b", "c"]  # the only split is used

    def offline(*a, **k): raise ConnectionError("hub unreachable")
    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match=r"some/dataset: could not be loaded with `datasets` \(ConnectionError: hub unreachable\)"):
        load_preferences("some/dataset")


def test_hf_without_datasets_names_the_install(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *a, **k):
        if name == "datasets": raise ImportError("no datasets")
        return real_import(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", fake_import)
    (tmp_path / "hf").mkdir(); (tmp_path / "hf" / "state.json").write_text("{}")
    for src in (tmp_path / "hf", "someone/some-dataset"):
        with pytest.raises(DataError, match=r"needs the optional `datasets` package.*pip install datasets"):
            load_preferences(src)


# ---------------------------------------------------------------- benchmark schemas

RMB = [{"id": 8, "subset": "alpacaeval", "prompt": "Name a prime.", "extra": "kept",
        "chosen": ["2.", "2 is a prime number.", "**2** is a prime number."],
        "rejected": ["9.", "9 is a prime number.", "**9** is a prime number."]},
       {"id": 9, "subset": "alpacaeval", "prompt": "Capital of Italy?",
        "chosen": ["Rome.", "The capital of Italy is Rome.", "The capital of Italy is **Rome**."],
        "rejected": ["Milan.", "The capital of Italy is Milan, a long one.", "# Milan\nThe capital of Italy is **Milan**."]}]


def test_rmbench_loader_styles_and_ids(tmp_path):
    (tmp_path / "code_filtered.json").write_text(json.dumps(RMB))
    f = load_preferences(tmp_path / "code_filtered.json")
    assert f.attrs["format"] == "rmbench"
    assert f["id"].tolist() == ["code-8", "code-9"] and f["subset"].unique().tolist() == ["code"]
    assert f["source_id"].tolist() == [8, 9] and f["source_subset"].tolist() == ["alpacaeval"] * 2
    assert f.loc[0, "extra"] == "kept"
    assert f.loc[0, ["chosen", "rejected"]].tolist() == ["2.", "9."]
    for k, s in enumerate(RMBENCH_STYLES):
        assert f[f"chosen_{s}"].tolist() == [r["chosen"][k] for r in RMB]
        assert f[f"rejected_{s}"].tolist() == [r["rejected"][k] for r in RMB]
    g = load_preferences(tmp_path / "code_filtered.json", domain="mycode", chosen_style="detailed_plain",
                         rejected_style="detailed_markdown")
    assert g["id"].tolist() == ["mycode-8", "mycode-9"] and g.loc[1, "rejected"].startswith("# Milan")
    plain = load_preferences(RMB)  # no file name: ids and subsets as in the rows
    assert plain["id"].tolist() == ["8", "9"] and plain["subset"].tolist() == ["alpacaeval"] * 2
    mixed = load_preferences(RMB + [{**RMB[0], "subset": "refusals-dangerous"}])  # ids repeat across domains
    assert mixed["id"].tolist() == ["alpacaeval-8", "alpacaeval-9", "refusals-dangerous-8"]
    assert mixed["source_id"].tolist() == [8, 9, 8]
    pair = rmbench_pair(f, "detailed_markdown", "concise")
    assert pair["id"].tolist() == f["id"].tolist() and pair["chosen"].tolist() == f["chosen_detailed_markdown"].tolist()
    assert list(rmbench_styles(f)) == list(RMBENCH_STYLES)
    with pytest.raises(ValueError, match="unknown style 'fancy'"):
        rmbench_pair(f, "fancy")
    with pytest.raises(DataError, match="field 'chosen_concise': column is missing"):
        rmbench_pair(load_preferences(PAIRS))


def test_style_matrix_against_loop_and_inputs(tmp_path):
    rng = np.random.default_rng(1)
    c, r = rng.integers(0, 3, (40, 3)).astype(float), rng.integers(0, 3, (40, 3)).astype(float)  # ties happen
    m = rmbench_style_matrix(c, r)
    loop = np.array([[sum(c[k, i] > r[k, j] for k in range(40)) / 40 for j in range(3)] for i in range(3)])
    np.testing.assert_allclose(m.matrix.to_numpy(), loop)
    assert m.hard == pytest.approx(np.mean([loop[0, 1], loop[0, 2], loop[1, 2]]))
    assert m.easy == pytest.approx(np.mean([loop[1, 0], loop[2, 0], loop[2, 1]]))
    assert m.normal == pytest.approx(np.trace(loop) / 3) and m.n == 40
    cf = pd.DataFrame(c[:, ::-1], columns=[f"chosen_{s}" for s in RMBENCH_STYLES[::-1]])
    rf = pd.DataFrame(r, columns=list(RMBENCH_STYLES))
    np.testing.assert_allclose(rmbench_style_matrix(cf, rf).matrix.to_numpy(), loop)
    with pytest.raises(ValueError, match=r"rewards_chosen has shape \(40, 2\)"):
        rmbench_style_matrix(c[:, :2], r)
    assert "hard=" in repr(m)
    (tmp_path / "chat_filtered.json").write_text(json.dumps(RMB))
    lm = rmbench_style_matrix(*rmbench_style_rewards(load_preferences(tmp_path / "chat_filtered.json"), lambda p, t: len(t)))
    assert lm.matrix.loc["concise", "concise"] == 0.0 and lm.matrix.loc["detailed_markdown", "concise"] == 1.0


def test_rewardbench2_expansion_and_ties():
    rows = [{"id": "1", "prompt": "p", "chosen": ["good"], "rejected": ["b1", "b2", "b3"], "subset": "Factuality",
             "num_correct": 1, "total_completions": 4},
            {"id": 2, "prompt": "q", "chosen": ["x", "y"], "rejected": ["z", "w"], "subset": "Ties",
             "num_correct": 2, "total_completions": 4}]
    f = load_preferences(rows)
    assert f.attrs["format"] == "rewardbench2"
    assert f["id"].tolist() == ["1-r0", "1-r1", "1-r2", "2-c0-r0", "2-c0-r1", "2-c1-r0", "2-c1-r1"]
    assert f["group_id"].tolist() == ["1"] * 3 + ["2"] * 4
    assert f["is_tie"].tolist() == [False] * 3 + [True] * 4
    assert f["rejected"].tolist()[:3] == ["b1", "b2", "b3"] and f["num_correct"].tolist()[0] == 1
    assert f.loc[5, ["chosen", "rejected", "chosen_index", "rejected_index"]].tolist() == ["y", "z", 1, 0]


def test_hh_transcripts(tmp_path):
    rows = [
        {"chosen": "\n\nHuman: How do I boil an egg?\n\nAssistant: Simmer it for 9 minutes.",
         "rejected": "\n\nHuman: How do I boil an egg?\n\nAssistant: Microwave it in the shell."},
        {"chosen": "\n\nHuman: hi\n\nAssistant: Hello!\n\nHuman: a joke?\n\nAssistant: Why did the chicken cross the road?",
         "rejected": "\n\nHuman: hi\n\nAssistant: Hello!\n\nHuman: a joke?\n\nAssistant: No."},
        # transcripts that part before the last turn
        {"chosen": "\n\nHuman: q1\n\nAssistant: A1\n\nHuman: q2\n\nAssistant: A2",
         "rejected": "\n\nHuman: q1\n\nAssistant: B1"},
    ]
    d = tmp_path / "harmless-base"; d.mkdir()
    (d / "test.jsonl.gz").write_bytes(gzip.compress(jsonl(rows).encode()))
    f = load_preferences(d / "test.jsonl.gz")
    assert f.attrs["format"] == "hh" and f["subset"].unique().tolist() == ["harmless-base"]
    assert f["id"].tolist() == ["1", "2", "3"]
    assert f.loc[0, ["prompt", "chosen", "rejected"]].tolist() == ["How do I boil an egg?", "Simmer it for 9 minutes.",
                                                                   "Microwave it in the shell."]
    # a multi-turn transcript is split into turns: the last human turn is the prompt, the earlier ones the history
    assert f.loc[1, "prompt"] == "a joke?" and f.loc[1, "hh_turns"] == 2
    assert f.loc[1, "history"] == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}]
    assert f.loc[0, "history"] == [] and f.loc[2, "history"] == []
    assert f.loc[2, ["prompt", "chosen", "rejected"]].tolist() == ["q1", "A1\n\nHuman: q2\n\nAssistant: A2", "B1"]
    assert load_preferences(rows, subset="hh-test")["subset"].unique().tolist() == ["hh-test"]
    assert split_hh(rows[0]["chosen"], rows[0]["rejected"])[0] == "How do I boil an egg?"


def _perturbed_files(tmp_path):
    prompt_rows = [{"id": i, "subset": "alpacaeval", "prompt": [f"Q{i}?", f'""""""Q{i}?""""""', f"Q{i} ?",
                                                                 f"Q{i}? @user", f"Q{i}? https://t.co/x", f"Qq{i}?"],
                    "chosen": f"good {i}", "rejected": f"bad {i}"} for i in (3, 4)]
    resp_rows = [{"id": i, "subset": "xstest-should-respond", "prompt": f"Q{i}?",
                  "chosen": [f"good {i} v{k}" for k in range(6)], "rejected": [f"bad {i} v{k}" for k in range(6)]}
                 for i in (3, 4)]
    (tmp_path / "chat_filtered_prompt_disturbance.json").write_text(json.dumps(prompt_rows))
    (tmp_path / "safety-accept_filtered_response_disturbance.json").write_text(json.dumps(resp_rows))
    return prompt_rows, resp_rows


def test_perturbed_prompt_and_response_files(tmp_path):
    prompt_rows, resp_rows = _perturbed_files(tmp_path)
    pc = load_perturbed(tmp_path / "chat_filtered_prompt_disturbance.json")
    assert list(pc) == ["orig", "EF", "PH", "IU", "IW", "CN"]
    for k, (name, f) in enumerate(pc.items()):
        assert f["id"].tolist() == ["chat-3", "chat-4"]
        assert f["prompt"].tolist() == [r["prompt"][k] for r in prompt_rows]
        assert f["chosen"].tolist() == ["good 3", "good 4"] and f.attrs["condition"] == name
        assert list(f.columns[:5]) == list(CANONICAL_COLUMNS) and not any(c.startswith("prompt_") for c in f.columns)
    rc = load_perturbed(tmp_path / "safety-accept_filtered_response_disturbance.json")
    assert list(rc) == ["orig", "detailed_plain", "detailed_markdown", "paraphrase", "zh_concise", "zh_detailed"]
    assert rc["orig"]["subset"].unique().tolist() == ["safety-response"]
    assert rc["paraphrase"]["chosen"].tolist() == ["good 3 v3", "good 4 v3"]
    assert rc["zh_detailed"]["rejected"].tolist() == ["bad 3 v5", "bad 4 v5"]
    paper = load_perturbed(tmp_path / "safety-accept_filtered_response_disturbance.json", mapping=PAPER_RESPONSE_LABELS)
    assert list(paper) == ["orig", "ST", "LE", "SP", "LC", "SLC"]
    assert paper["LC"]["chosen"].tolist() == rc["zh_concise"]["chosen"].tolist()
    with pytest.raises(ValueError, match="mapping key 7"):
        load_perturbed(tmp_path / "safety-accept_filtered_response_disturbance.json", mapping={7: "X"})
    with pytest.raises(ValueError, match="distinct and not 'orig'"):
        load_perturbed(tmp_path / "chat_filtered_prompt_disturbance.json", mapping={1: "PH"})
    # as a single frame, the variants ride along as columns
    single = load_preferences(tmp_path / "chat_filtered_prompt_disturbance.json")
    assert single.attrs["format"] == "perturbed-prompt" and single["prompt_CN"].tolist() == ["Qq3?", "Qq4?"]
    with pytest.raises(DataError, match=r"is not a perturbed file \(its rows look like 'preferences'\)"):
        load_perturbed(PAIRS)


def test_perturbed_identical_variant_allowed_orig_not(tmp_path):
    rows = [{"id": 1, "prompt": "Q?", "chosen": ["a", "b", "c", "d", "same", "f"], "rejected": ["z", "y", "x", "w", "same", "u"]},
            {"id": 2, "prompt": "R?", "chosen": ["same"] + list("bcdef"), "rejected": ["same"] + list("yxwvu")},
            {"id": 3, "prompt": "S?", "chosen": list("abcdef"), "rejected": list("zyxwvu")}]
    p = tmp_path / "chat_filtered_response_disturbance.json"
    p.write_text(json.dumps(rows))
    with pytest.raises(DataError, match=r"row 2, field 'rejected': is identical to 'chosen'"):
        load_perturbed(p)
    with pytest.warns(DataWarning, match="dropped 1 item"):
        c = load_perturbed(p, errors="drop")
    assert all(f["id"].tolist() == ["chat-1", "chat-3"] for f in c.values())
    assert c["zh_concise"].attrs["identical_pairs"] == 1 and c["orig"].attrs["identical_pairs"] == 0


# ---------------------------------------------------------------- malformed inputs: the exact error each gets

def _ok(**kw):
    return json.dumps({"id": "x", "subset": "s", "prompt": "p", "chosen": "c", "rejected": "r", **kw}, ensure_ascii=False)


MALFORMED = [
    # (case, file name, content, load kwargs, message after the path)
    ("missing field", "m.jsonl", _ok() + "\n" + json.dumps({"id": "y", "subset": "s", "prompt": "p", "rejected": "r"}), {},
     ", line 2, field 'chosen': is missing (fill it in or drop the row; or skip invalid rows: errors='drop' in Python, --drop-invalid on the command line)"),
    ("empty field", "e.jsonl", _ok(chosen="   "), {},
     ", line 1, field 'chosen': is empty (fill it in or drop the row; or skip invalid rows: errors='drop' in Python, --drop-invalid on the command line)"),
    ("number as prompt", "n.jsonl", _ok(prompt=42), {},
     ", line 1, field 'prompt': is not text (got int: 42) (is the file in another format? pass format=...; "
     "or skip invalid rows: errors='drop' in Python, --drop-invalid on the command line)"),
    ("object as answer", "o.json", "[" + _ok(rejected={"a": 1}) + "]", {},
     ", row 1, field 'rejected': is not text (got dict: {'a': 1})"),
    ("null id", "i.jsonl", _ok(id=None), {}, ", line 1, field 'id': is missing"),
    ("fractional id", "f.jsonl", _ok(id=1.5), {}, ", line 1, field 'id': is not text or an integer (got float: 1.5)"),
    ("duplicate id", "d.jsonl", _ok() + "\n\n" + _ok(chosen="c2"), {},
     ", line 3, field 'id': duplicates id 'x' first seen at line 1 (ids must be unique within a dataset"),
    ("chosen equals rejected", "same.csv", "id,subset,prompt,chosen,rejected\n1,s,p,c,r\n2,s,p,same,same\n", {},
     ", line 3, field 'rejected': is identical to 'chosen' (a pair needs two different answers"),
    ("undecodable bytes", "u.jsonl", (_ok() + "\n" + _ok(id="y", chosen="caf\u00e9")).encode("latin-1"), {},
     ", line 2, field 'chosen': holds bytes that are not UTF-8 (0xe9 at byte offset 130) (re-save the file as UTF-8)"),
    ("undecodable CSV", "u.csv", "id,subset,prompt,chosen,rejected\n1,s,p,c,r\n2,s,p,na\u00efve,r\n".encode("latin-1"), {},
     ", line 3, field 'chosen': holds bytes that are not UTF-8"),
    ("broken JSON line", "b.jsonl", _ok() + '\n{"id": "y", "prompt" "p"}', {},
     ", line 2: is not valid JSON (Expecting ':' delimiter at column 22) (each line of a JSONL file must be one JSON object)"),
    ("JSONL line not an object", "l.jsonl", '["p", "c", "r"]', {}, ", line 1: is a JSON list, not an object"),
    ("broken JSON document", "b.json", '[\n' + _ok() + ',\n{"id": }\n]', {}, ", line 3: is not valid JSON (Expecting value at column 8)"),
    ("JSON object without rows", "cfg.json", '{"name": "x", "version": 2}', {}, ": is a JSON object that holds no list of rows"),
    ("Parquet that is JSON", "fake.parquet", "[" + _ok() + "]", {},
     ": is not Parquet although its name says so (it looks like JSON) (rename it or pass format='json')"),
    ("CSV that is JSON Lines", "fake.csv", _ok() + "\n" + _ok(id="y"), {},
     ": is not CSV although its name says so (it looks like JSON Lines) (rename it or pass format='jsonl')"),
    ("JSON that is CSV", "fake.json", "id,prompt,chosen,rejected\n1,p,c,r\n", {},
     ": is not JSON although its name says so (it looks like CSV) (rename it or pass format='csv')"),
    ("JSONL that is binary", "bin.jsonl", b"\x00\x01\x02binary", {},
     ": is not JSON Lines although its name says so (it looks like binary data) (check that it is the right file)"),
    ("gz that is not gzip", "plain.jsonl.gz", _ok(), {}, ": is not gzip data although its name ends in .gz"),
    ("damaged Parquet", "bad.parquet", b"PAR1 this is not really parquet PAR1", {}, ": cannot be read as Parquet ("),
    ("ragged CSV row", "r.csv", "id,subset,prompt,chosen,rejected\n1,s,p,c,r\n2,s,p,c,r,extra\n", {},
     ", line 3: has 6 fields but the header has 5 (quote fields that contain commas or line breaks)"),
    ("missing column", "mc.csv", "id,prompt,chosen\n1,p,c\n", {},
     ", field 'rejected': column is missing (columns found: id, prompt, chosen)"),
    ("empty file", "empty.jsonl", "", {}, ": holds no rows"),
    ("blank file", "blank.csv", "\n\n", {}, ": holds no rows"),
    ("empty list", "empty.json", "[]", {}, ": holds no rows"),
    ("RM-Bench list too short", "chat_filtered.json", json.dumps([{**RMB[0], "chosen": ["a", "b"]}]), {"format": "rmbench"},
     ", row 1, field 'chosen': has 2 answers, expected 3"),
    ("RM-Bench answer missing", "chat_filtered.json", json.dumps([{**RMB[0], "rejected": ["a", None, "b"]}]), {},
     ", row 1, field 'rejected[1]': is missing"),
    ("RM-Bench answer empty", "chat_filtered.json", json.dumps([RMB[1], {**RMB[0], "rejected": ["a", "b", " "]}]), {},
     ", row 2, field 'rejected[2]': is empty"),
    ("RM-Bench style on plain file", "p.jsonl", _ok(), {"format": "rmbench"},
     ", line 1, field 'chosen': is not a list (got str: 'c') (pass the right format=)"),
    ("HH without assistant turn", "hh.jsonl", json.dumps({"chosen": "\n\nHuman: hi\n\nAssistant: a", "rejected": "just text"}), {},
     ", line 1, field 'chosen': a transcript has no '\\n\\nAssistant:' turn"),
    ("RewardBench 2 without id", "rb2.json", json.dumps([{"prompt": "p", "chosen": ["a"], "rejected": ["b"], "num_correct": 1}]), {},
     ", row 1, field 'id': is missing or not text"),
]


@pytest.mark.parametrize("case,name,content,kw,message", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_input_table(tmp_path, case, name, content, kw, message):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(DataError) as info:
        load_preferences(path, **kw)
    assert str(info.value).startswith(str(path) + message), str(info.value)


def test_sources_that_are_not_files(tmp_path):
    with pytest.raises(DataError, match=r"nope\.jsonl: does not exist \(check the path\)"):
        load_preferences(tmp_path / "nope.jsonl")
    (tmp_path / "folder").mkdir()
    with pytest.raises(DataError, match="is a folder, not a data file"):
        load_preferences(tmp_path / "folder")
    with pytest.raises(DataError, match=r"<list>, row 2: is a int, not a dict"):
        load_preferences([PAIRS[0], 3])
    with pytest.raises(DataError, match="cannot load preference data from a int"):
        load_preferences(3)
    with pytest.raises(DataError, match=r"<frame>: expected a pandas DataFrame, got list"):
        validate(PAIRS)
    with pytest.raises(DataError, match=r"<frame>, row 2, field 'subset': is missing"):
        load_preferences(pd.DataFrame(PAIRS).assign(subset=["a", None, "c"]))


def test_error_attributes(tmp_path):
    (tmp_path / "e.jsonl").write_text(_ok() + "\n" + _ok(id="y", chosen=""))
    with pytest.raises(DataError) as info:
        load_preferences(tmp_path / "e.jsonl")
    e = info.value
    assert (e.source, e.row, e.field, e.row_label) == (str(tmp_path / "e.jsonl"), 2, "chosen", "line")
    assert isinstance(e, ValueError)


def test_read_records_and_detect_format(tmp_path):
    (tmp_path / "a.csv").write_text('prompt,chosen,rejected\n"multi\nline",c,r\n\nq,d,s\n')
    recs, rows, label = read_records(tmp_path / "a.csv")
    assert rows == [2, 5] and label == "line" and recs[0]["prompt"] == "multi\nline"
    assert detect_format(pd.DataFrame(PAIRS)) == "preferences"
    assert detect_format(RMB) == "rmbench"


# ---------------------------------------------------------------- real files in ../shared/data

RMBENCH_FILES = {"chat": 129, "code": 228, "safety-refuse": 284, "safety-response": 157}


@pytest.mark.parametrize("domain,n", RMBENCH_FILES.items())
def test_real_rmbench_file(domain, n):
    path = shared_file("rm-bench", f"{domain}_filtered.json")
    f = load_preferences(path)
    assert len(f) == n and f.attrs["format"] == "rmbench"
    assert f["id"].str.startswith(domain + "-").all() and f["id"].is_unique
    assert (f["subset"] == domain).all()
    raw = json.loads(path.read_text())
    assert f["chosen_detailed_markdown"].tolist() == [r["chosen"][2] for r in raw]
    assert f["source_subset"].tolist() == [r["subset"] for r in raw]


def test_real_rmbench_ids_unique_across_domains():
    frames = [load_preferences(shared_file("rm-bench", f"{d}_filtered.json")) for d in RMBENCH_FILES]
    ids = pd.concat(frames)["id"]
    assert ids.is_unique and len(ids) == sum(RMBENCH_FILES.values())
    raw_ids = pd.concat([f["source_id"] for f in frames])
    assert not raw_ids.is_unique  # the raw ids do collide, which is why they are prefixed


LENGTH_ANCHORS = {"chat": (0.026, 0.284, 0.811), "code": (0.254, 0.519, 0.775),
                  "safety-refuse": (0.023, 0.158, 0.890), "safety-response": (0.238, 0.777, 0.987)}


@pytest.mark.parametrize("domain,anchor", LENGTH_ANCHORS.items())
def test_real_rmbench_length_scorer_anchor(domain, anchor):
    # "longer answer wins" = strict > on character length; chat's numbers are the published sanity fixture
    f = load_preferences(shared_file("rm-bench", f"{domain}_filtered.json"))
    m = rmbench_style_matrix(*rmbench_style_rewards(f, lambda p, t: len(t)))
    assert (round(m.hard, 3), round(m.normal, 3), round(m.easy, 3)) == anchor
    assert m.n == RMBENCH_FILES[domain]


PERTURBED = ["chat_filtered_prompt_disturbance.json", "code_filtered_prompt_disturbance.json",
             "safety-accept_filtered_prompt_disturbance.json", "safety-refuse_filtered_prompt_disturbance.json",
             "chat_filtered_response_disturbance.json", "safety-accept_filtered_response_disturbance.json",
             "safety-refuse_filtered_response_disturbance.json"]


@pytest.mark.parametrize("name", PERTURBED)
def test_real_perturbed_file(name):
    path = shared_file("reward-auditor", name)
    conds = load_perturbed(path)
    raw = json.loads(path.read_text())
    kind = "prompt" if "_prompt_" in name else "response"
    assert list(conds) == ["orig", "EF", "PH", "IU", "IW", "CN"] if kind == "prompt" else len(conds) == 6
    ids = conds["orig"]["id"].tolist()
    assert len(ids) == len(raw) and all(f["id"].tolist() == ids for f in conds.values())
    if kind == "prompt":
        assert conds["EF"]["prompt"].str.startswith('""""""').all()
        assert conds["IW"]["prompt"].str.contains("https://t.co/").all()
        assert (conds["EF"]["chosen"] == conds["orig"]["chosen"]).all()
    else:
        assert conds["zh_concise"]["chosen"].str.contains(r"[\u4e00-\u9fff]", regex=True).mean() > 0.9
        assert (conds["paraphrase"]["prompt"] == conds["orig"]["prompt"]).all()


def test_real_perturbed_files_pair_with_rmbench():
    pc = load_perturbed(shared_file("reward-auditor", "chat_filtered_prompt_disturbance.json"))
    rc = load_perturbed(shared_file("reward-auditor", "safety-accept_filtered_response_disturbance.json"))
    chat = load_preferences(shared_file("rm-bench", "chat_filtered.json")).set_index("id")
    resp = load_preferences(shared_file("rm-bench", "safety-response_filtered.json")).set_index("id")
    o = pc["orig"].set_index("id")
    assert o.index.isin(chat.index).all()
    assert (o["prompt"] == chat.loc[o.index, "prompt"]).all() and (o["chosen"] == chat.loc[o.index, "chosen"]).all()
    d = rc["detailed_markdown"].set_index("id")
    assert d.index.isin(resp.index).all()
    assert (d["chosen"] == resp.loc[d.index, "chosen_detailed_markdown"]).all()


def test_real_perturbed_math_has_one_identical_pair():
    path = shared_file("reward-auditor", "math_filtered_prompt_disturbance.json")
    raw = json.loads(path.read_text())
    bad = next(k for k, r in enumerate(raw, 1) if r["chosen"] == r["rejected"])
    with pytest.raises(DataError, match=fr"row {bad}, field 'rejected': is identical to 'chosen'"):
        load_perturbed(path)
    with pytest.warns(DataWarning):
        conds = load_perturbed(path, errors="drop")
    assert len(conds["orig"]) == len(raw) - 1 and len(conds["CN"]) == len(raw) - 1


def test_real_hh_harmless():
    path = shared_file("hh-rlhf-harmless-base", "test.jsonl.gz")
    with pytest.raises(DataError, match=r"test\.jsonl\.gz, line \d+, field '(chosen|rejected)': is empty"):
        load_preferences(path)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        f = load_preferences(path, errors="drop")
    assert any(issubclass(x.category, DataWarning) for x in w)
    assert f.attrs["format"] == "hh" and 2300 <= len(f) < 2312 and f["id"].is_unique
    assert (f["subset"] == "hh-rlhf-harmless-base").all()
    assert (f["hh_turns"] > 1).mean() > 0.3  # most of the red-team dialogues are multi-turn
    assert not f["prompt"].str.endswith("Assistant:").any() and not f["chosen"].str.startswith("Assistant:").any()
    raw = [json.loads(x) for x in gzip.open(path, "rt")]
    first = raw[int(f["id"].iloc[0]) - 1]
    assert first["chosen"].endswith(f["chosen"].iloc[0]) and first["rejected"].endswith(f["rejected"].iloc[0])
