"""Cross-cutting properties of the perturbations: protected spans, rate 0, determinism across processes,
independent per-item draws, the SP certificate, resource errors and file-based conditions."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, HealthCheck, strategies as st

from conftest import REPO, shared_file
from reward_auditor import perturbations as P
from reward_auditor import synonyms  # where WordNet is looked for

HAS_APERTIUM = shutil.which("apertium") is not None
OFFLINE = [n for n in P.BUILTINS if HAS_APERTIUM or n not in ("LC", "SLC")]

HARD = [
    "How do I fix this?\n```python\ndef f(x):\n    return x.strip()  # keep, this!\n```\nPlease explain.",
    "Why does `arr.sort()` return None? I expected a list.",
    "Solve $x^2 + 3x = 10$ and give \\boxed{\\frac{1}{2}} as the answer. Is that right?",
    "Explain \\[ \\int_0^1 x\\,dx = \\tfrac12 \\] in words, then check it with \\(x=1\\).",
    "Email me at jane.doe@example.org or visit https://example.com/a_b?c=1, ok? Thanks @bob_99 #help",
    "The total was 1,200.50 dollars, about 2.5e3 yen or 3/4 of 50% more. Is that correct?",
    "Write a list:\n- first item here\n- second item, please\n1. numbered one\n2. numbered two",
    "| name | value |\n|---|---|\n| alpha | 1.5 |\n| beta | 2 |\nSummarize this table briefly.",
    "Line one of the prompt.\n\nLine two asks: what is the capital of France?\nLine three ends here",
    "Use {placeholder} and <tag attr=1> in the template. Dr. Smith said e.g. this works.",
    "\\begin{align} a &= b \\\\ c &= d \\end{align} Prove the identity; do not use induction.",
    "Never delete all files except the last one. Only each third item is kept, at least 10 km away.",
    "",
    "   \n",
    "ok",
]


def pieces_survive(orig: str, out: str) -> bool:
    "Every content-bearing protected span of `orig` occurs in `out`."
    return all(p in out for p in P.protected_pieces(orig))


def run_all(texts, names, seed=0):
    "Apply each perturbation to each text with per-item generators."
    out = {}
    for n in names:
        p = P.registry[n]
        rngs = [P.item_rng(seed, n, p.version, str(i), "x") for i in range(len(texts))]
        out[n] = p.apply_many(texts, rngs, **p.defaults)
    return out


def test_hard_corpus_protected_spans_survive():
    res = run_all(HARD, OFFLINE)
    for name, outs in res.items():
        for src, out in zip(HARD, outs):
            assert pieces_survive(src, out), (name, src, out)


def test_hard_corpus_rate_zero_is_identity():
    for n in OFFLINE:
        p = P.registry[n]
        kw = {**p.defaults, "rate": 0.0}
        rngs = [np.random.default_rng(i) for i in range(len(HARD))]
        assert p.apply_many(HARD, rngs, **kw) == HARD, n


def test_specific_protections():
    src = HARD[5]
    for n in ("PH", "CN", "ST", "EF"):
        for i in range(30):
            out = P.registry[n].apply(src, np.random.default_rng(i), **P.registry[n].defaults)
            for piece in ("1,200.50", "2.5e3", "3/4", "50%"):
                assert piece in out, (n, out)
    code = HARD[0]
    for n in OFFLINE:
        out = run_all([code], [n])[n][0]
        assert "```python\ndef f(x):\n    return x.strip()  # keep, this!\n```" in out, n


FRAGMENTS = [h for h in HARD if h.strip()] + [
    "`x_1`", "$a+b$", "$$\\sum_i i$$", "https://t.co/abc123", "me@site.net", "1,200.50", "2.5e3", "\\boxed{{7}}",
    "\n", "\n\n", " ", ". ", "? ", ", ", "Dr. ", "e.g. ", "Hello there", "The quick brown fox jumps",
    "running quickly toward buildings", "not", "every", "- item\n", "| a | b |\n",
]
text_st = st.lists(st.one_of(st.sampled_from(FRAGMENTS),
                             st.text(alphabet="abcdefghij KLMNOP.,;:!?'", max_size=25)),
                   min_size=1, max_size=8).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=text_st, seed=st.integers(0, 2**32 - 1))
def test_property_offline_rules(text, seed):
    for n in ("EF", "PH", "IU", "IW", "CN", "ST", "LE", "SP"):
        p = P.registry[n]
        out = p.apply(text, np.random.default_rng(seed), **p.defaults)
        assert pieces_survive(text, out), (n, text, out)
        assert p.apply(text, np.random.default_rng(seed), **{**p.defaults, "rate": 0.0}) == text
        again = p.apply(text, np.random.default_rng(seed), **p.defaults)
        assert again == out


@settings(max_examples=60, deadline=None)
@given(text=text_st, seed=st.integers(0, 2**32 - 1))
def test_property_sp_certificate(text, seed):
    out = P.registry["SP"].apply(text, np.random.default_rng(seed))
    assert P.unstructure(out).split() == text.split() if out != text else True


@pytest.mark.skipif(not HAS_APERTIUM, reason="apertium is not installed (apt-get install apertium apertium-eng-spa)")
@settings(max_examples=3, deadline=None)
@given(texts=st.lists(text_st, min_size=10, max_size=20))
def test_property_translation_protects(texts):
    for n in ("LC", "SLC"):
        rngs = [np.random.default_rng(i) for i in range(len(texts))]
        outs = P.registry[n].apply_many(texts, rngs)
        for src, out in zip(texts, outs):
            assert pieces_survive(src, out), (n, src, out)


@pytest.mark.skipif(not HAS_APERTIUM, reason="apertium is not installed (apt-get install apertium apertium-eng-spa)")
def test_translation_ignores_order_processes_and_lc_slc_sequence():
    from reward_auditor.data import load_sample
    from reward_auditor.rewriters import ApertiumTranslator
    df = load_sample().head(40)[["id", "subset", "prompt", "chosen", "rejected"]]
    fresh = lambda jobs, chunk: ApertiumTranslator("eng-spa", jobs=jobs, chunk=chunk)
    a = P.perturb(df, ["LC", "SLC"], seed=0, translator=fresh(1, 60))
    b = P.perturb(df.iloc[::-1], ["SLC", "LC"], seed=0, translator=fresh(3, 7))
    for n in ("LC", "SLC"):
        x = a[n].frame.set_index("id").sort_index()
        y = b[n].frame.set_index("id").sort_index()
        pd.testing.assert_frame_equal(x, y)
    assert a["LC"].n_changed > 30 and a["SLC"].record["version"] == "3"
    assert a["LC"].record["resources"]["stream"] == "isolated-1"


@pytest.mark.skipif(not HAS_APERTIUM, reason="apertium is not installed (apt-get install apertium apertium-eng-spa)")
def test_every_translated_segment_is_isolated_from_its_batch():
    "Each segment LC and SLC send translates byte-identically alone (plain `apertium -u`) and inside a shuffled batch."
    import random
    from conftest import SHARED_DATA
    from reward_auditor.data import load_preferences, load_sample
    from reward_auditor.rewriters import ApertiumTranslator, apertium_deformat, apertium_reformat
    sent = []

    class Recording(ApertiumTranslator):
        def _generate(self, texts, instruction):
            sent.extend(texts)
            return super()._generate(texts, instruction)

    frames = [load_sample()]
    chat = SHARED_DATA / "rm-bench" / "chat_filtered.json"
    if chat.exists():  # real answers when the shared data is beside the checkout (the sample alone otherwise)
        frames.append(load_preferences(chat).head(50))
    rec = Recording("eng-spa")
    for f in frames:
        P.perturb(f, ["LC", "SLC"], seed=0, translator=rec)
    segs = list(dict.fromkeys(" ".join(s.split("\n")) for s in sent))
    assert len(segs) > 150
    whole = ApertiumTranslator("eng-spa", jobs=1).translate(segs)
    assert whole == rec.translate(segs)          # the perturbations' own batches gave the same translations
    shuffled = random.Random(0).sample(segs, len(segs))
    other = ApertiumTranslator("eng-spa", jobs=2, chunk=97)
    by_seg = dict(zip(shuffled, other.translate(shuffled)))
    assert [by_seg[s] for s in segs] == whole
    assert other.isolated_taggings > 0           # the data holds segments that change the tagger's model
    alone = lambda s: subprocess.run(["apertium", "-u", "eng-spa"], input=s, capture_output=True, text=True).stdout
    for i in random.Random(1).sample(range(len(segs)), 12):
        assert alone(segs[i]) == whole[i], segs[i]
    # fed one line per segment, this sentence changes how apertium translates the next (sorted either way)
    trigger = "Mars appears reddish due to iron oxide, commonly known as rust, in its soil."
    victim = ("The northern lights are caused by volcanic activity, guided by the planet's magnetic field, producing "
              "colorful light displays near the magnetic poles.")
    assert ApertiumTranslator("eng-spa").translate([victim, trigger])[0] == alone(victim)
    for s in random.Random(2).sample(segs, 40) + ["a  b\tc ~d", " lead", "trail  ", "$5 /x @y <z> {w} [v] ^u \\t", ""]:
        destxt = subprocess.run(["apertium-destxt"], input=s.encode(), capture_output=True).stdout.decode()
        assert apertium_deformat(s) == destxt, s
        assert apertium_reformat(destxt) == s


def test_critical_words_untouched():
    src = HARD[11]
    crit = ["Never", "all", "except", "last", "one", "Only", "each", "third", "least", "km"]
    for n in ("CN", "ST"):
        for i in range(40):
            out = P.registry[n].apply(src, np.random.default_rng(i), **P.registry[n].defaults)
            toks = re.findall(r"[A-Za-z]+", out)
            assert all(c in toks for c in crit), (n, out)


def frame(n=40):
    return pd.DataFrame({"id": [f"q{i}" for i in range(n)], "subset": ["chat"] * n,
                         "prompt": ["Could you explain briefly why the sky looks blue during the day?"] * n,
                         "chosen": ["Sunlight scatters off air molecules. Blue light scatters most strongly."] * n,
                         "rejected": ["Because the ocean reflects onto the sky. That is the whole story."] * n})


def test_items_get_independent_draws_and_order_does_not_matter():
    df = frame(60)
    conds = P.perturb(df, ["CN", "IU", "ST"], seed=3)
    assert conds["CN"].frame["prompt"].nunique() > 40
    assert conds["IU"].frame["prompt"].nunique() == 60
    shuffled = P.perturb(df.sample(frac=1, random_state=1), ["CN", "IU", "ST"], seed=3)
    for n in conds:
        a = conds[n].frame.set_index("id").sort_index()
        b = shuffled[n].frame.set_index("id").sort_index()
        pd.testing.assert_frame_equal(a, b)
    other = P.perturb(df, ["CN"], seed=4)["CN"].frame["prompt"]
    assert (other != conds["CN"].frame["prompt"]).mean() > 0.5


def test_response_side_changes_both_answers_and_records():
    conds = P.perturb(frame(10), ["ST", "SP", "EF"], seed=0)
    sp = conds["SP"].frame
    assert (sp["chosen"] != frame(10)["chosen"]).all() and (sp["rejected"] != frame(10)["rejected"]).all()
    assert (sp["prompt"] == frame(10)["prompt"]).all()
    assert (conds["EF"].frame["chosen"] == frame(10)["chosen"]).all()
    rec = conds["ST"].record
    assert rec["resources"]["wordnet"] == "3.0" and rec["version"] and rec["seed"] == 0
    assert json.dumps(rec)          # records are JSON-serialisable
    assert set(conds["SP"].frame.columns) >= {"id", "subset", "prompt", "chosen", "rejected", "changed", "edit_size"}


def test_noops_are_counted():
    df = frame(5)
    df["prompt"] = ["```\ncode only\n```"] * 5
    c = P.perturb(df, ["CN", "PH"])
    assert c["CN"].n_changed == 0 and c["PH"].n_changed == 0
    assert (c["CN"].frame["edit_size"] == 0).all()


def test_le_is_named_honestly_and_model_variant_needs_rewriter():
    c = P.perturb(frame(3), ["LE"])["LE"]
    assert c.record["variant"] == "length-control-template"
    with pytest.raises(P.MissingResourceError, match="needs a rewriter"):
        P.perturb(frame(3), ["LE-model"])


def test_register_user_perturbation_flows_through():
    @P.register(name="TEST_SHOUT", side="response", group="stylized", rate=1.0, replace=True)
    def shout(text, rng, rate=1.0):
        return text if rate == 0 else text.upper()
    try:
        c = P.perturb(frame(4), "all")["TEST_SHOUT"]
        assert c.frame["chosen"].str.isupper().all() and c.side == "response"
        with pytest.raises(P.PerturbationError, match="already registered"):
            P.register(shout, name="TEST_SHOUT", side="response", group="stylized")
    finally:
        del P.registry["TEST_SHOUT"]


def test_bad_inputs_raise_named_errors():
    with pytest.raises(P.PerturbationError, match="unknown perturbations"):
        P.perturb(frame(2), ["NOPE"])
    with pytest.raises(P.PerturbationError, match="rate must lie"):
        P.perturb(frame(2), ["CN"], params={"CN": {"rate": 2}})
    with pytest.raises(P.PerturbationError, match="unknown parameters"):
        P.perturb(frame(2), ["CN"], params={"CN": {"speed": 2}})
    df = frame(2); df.loc[1, "id"] = "q0"
    with pytest.raises(P.PerturbationError, match="unique"):
        P.perturb(df, ["CN"])


def test_missing_wordnet_error_names_both_ways(monkeypatch, tmp_path):
    import nltk
    monkeypatch.setattr(nltk.data, "find", lambda *a, **k: (_ for _ in ()).throw(LookupError("none")))
    monkeypatch.setattr(synonyms, "DEBIAN_WORDNET", tmp_path / "absent")
    with pytest.raises(P.MissingResourceError) as e:
        P.wordnet_reader.__wrapped__()
    assert "nltk.download('wordnet')" in str(e.value) and "apt-get install wordnet-base wordnet-sense-index" in str(e.value)


def test_missing_wordnet_for_st_names_both_ways(monkeypatch, tmp_path):
    monkeypatch.setattr(synonyms, "nltk_data_dirs", lambda: [tmp_path / "nltk_data"])
    monkeypatch.setattr(synonyms, "DEBIAN_WORDNET", tmp_path / "absent")
    with pytest.raises(P.MissingResourceError) as e:
        P.wordnet_lite.__wrapped__()
    assert "nltk.download('wordnet')" in str(e.value) and "apt-get install wordnet-base wordnet-sense-index" in str(e.value)


def test_wordnet_lite_reads_nltk_zip_layout(tmp_path):
    import zipfile
    lite = P.wordnet_lite()
    root = tmp_path / "nltk_data" / "corpora"
    root.mkdir(parents=True)
    with zipfile.ZipFile(root / "wordnet.zip", "w") as z:
        for f in ("index.noun", "noun.exc", "data.noun", "data.adj"):
            z.writestr(f"wordnet/{f}", lite.read(f))
    import unittest.mock as um
    with um.patch.object(synonyms, "nltk_data_dirs", lambda: [tmp_path / "nltk_data"]):
        read, source = P._wordnet_files()
    zl = P.WordNetLite(read, source)
    assert source == "nltk_data" and zl.first_sense("geese", "n") == lite.first_sense("geese", "n") == ("goose",)
    assert zl.version() == "3.0"


def test_wordnet_lite_matches_nltk_first_sense():
    import random
    lite, wn = P.wordnet_lite(), P.wordnet_reader()
    words = set(re.findall(r"[a-z]+", " ".join(HARD).lower())) | {"geese", "better", "ran", "studies", "fished", "mice"}
    for pos in "nvar":
        words |= set(random.Random(pos).sample(sorted(lite.index(pos)), 400))
    for w in sorted(words):
        for pos in "nvar":
            ref = wn.synsets(w, pos)
            assert lite.first_sense(w, pos) == (tuple(ref[0].lemma_names()) if ref else ()), (w, pos)


def test_edit_size_levenshtein_matches_table():
    rng = np.random.default_rng(7)
    for _ in range(300):
        a, b = ("".join(rng.choice(list("abc d\n"), size=rng.integers(0, 150))) for _ in range(2))
        assert P._levenshtein(a, b) == P._levenshtein_table(a, b)
        assert P.edit_size(a, b) >= (a != b)
    base = "Sort the list first, then print it. " * 30
    assert P.edit_size(base, base.replace("print", "prnit", 1).replace("Sort", "Srot", 1)) == 4
    assert P.edit_size(base, base + "!") == 1


def _difflib_gaps(ta, tb):
    "The changed runs of difflib's token diff as edit_size used it (popular-token rule over 2,000 tokens)."
    from difflib import SequenceMatcher
    sm = SequenceMatcher(None, ta, tb, autojunk=len(ta) + len(tb) > 2000)
    return [(i1, i2, j1, j2) for op, i1, i2, j1, j2 in sm.get_opcodes() if op != "equal"]


def _token_diff_both_ways(ta, tb):
    "The token diff's changed runs with the direct scan and with the hashed bisection forced everywhere."
    from reward_auditor import perturbation_base as pb
    popular = len(ta) + len(tb) > 2000
    scan = list(pb._TokenDiff(ta, tb, popular).gaps())
    forced = pb._TokenDiff(ta, tb, popular)
    forced.DIRECT_AREA, forced.DIRECT_PAIRS = -1, -1
    return scan, list(forced.gaps())


_TOKENS = st.sampled_from(["a", " a", " b", " the", ",", ".", " c", "\n", " x1", " y"])


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_TOKENS, max_size=160), st.lists(st.tuples(st.integers(0, 159), st.sampled_from(["", " z", " a", "."])),
                                                  max_size=30))
def test_token_diff_is_difflibs(ta, edits):
    tb = list(ta)
    for at, tok in edits:  # replace, drop or insert tokens: texts with many repeated tokens and shifted copies
        at = at % (len(tb) + 1)
        tb[at:at + (1 if tok else 2)] = [tok] if tok else []
    ref = _difflib_gaps(ta, tb)
    scan, hashed = _token_diff_both_ways(ta, tb)
    assert scan == ref and hashed == ref


def test_token_diff_is_difflibs_over_2000_tokens():
    rng = np.random.default_rng(11)
    vocab = np.array([" the", " a", ",", ".", " of", " and", " to"] + [f" w{i}" for i in range(120)])
    for n, p_common in ((1100, 0.6), (1500, 0.9), (2600, 0.3), (900, 0.95)):
        for _ in range(2):  # popular tokens (> 1 % of b's places) cannot start a match past 2,000 tokens
            ta = [vocab[rng.integers(7)] if rng.random() < p_common else vocab[rng.integers(len(vocab))]
                  for _ in range(n)]
            tb = [t if rng.random() > 0.05 else str(vocab[rng.integers(len(vocab))]) for t in ta]
            cut = int(rng.integers(0, n))
            tb = tb[:cut] + tb[cut + int(rng.integers(0, 60)):] + ta[:int(rng.integers(0, 300))]
            ref = _difflib_gaps(ta, tb)
            scan, hashed = _token_diff_both_ways(ta, tb)
            assert scan == ref and hashed == ref, (n, p_common)


def test_edit_size_equals_difflib_version_on_rmbench():
    import json
    from difflib import SequenceMatcher
    from reward_auditor import perturbation_base as pb

    def before(a, b):  # edit_size as it was with difflib's token diff
        if a == b:
            return 0
        p, s = pb._affixes(a, b)
        a, b = a[p:len(a) - s], b[p:len(b) - s]
        if len(a) <= 64 and len(b) <= 64:
            return pb._levenshtein(a, b)
        ta, tb = pb._TOKEN_RE.findall(a), pb._TOKEN_RE.findall(b)
        total = 0
        for op, i1, i2, j1, j2 in SequenceMatcher(None, ta, tb, autojunk=len(ta) + len(tb) > 2000).get_opcodes():
            if op != "equal":
                x, y = "".join(ta[i1:i2]), "".join(tb[j1:j2])
                total += pb._levenshtein(x, y) if len(x) <= 64 and len(y) <= 64 else max(len(x), len(y))
        return total
    folder = shared_file("rm-bench")
    n = 0
    for f in sorted(folder.glob("*_filtered.json")):
        for x in json.loads(f.read_text(encoding="utf-8")):
            # chosen against rejected in each style, and the concise against the detailed chosen answer
            for a, b in [*zip(x["chosen"], x["rejected"]), (x["chosen"][0], x["chosen"][1])]:
                assert pb.edit_size(a, b) == before(a, b), (f.name, x["id"])
                n += 1
    assert n > 3000


@pytest.mark.skipif(not P.DEBIAN_WORDNET.is_dir(), reason="Debian WordNet absent (apt-get install wordnet-base wordnet-sense-index)")
def test_debian_wordnet_folder_is_copied_with_lexnames(tmp_path):
    dest = P.build_wordnet_folder(dest=tmp_path)
    wn = dest / "corpora" / "wordnet"
    assert (wn / "lexnames").read_text().count("\n") == 45
    assert not any(f.is_symlink() for f in wn.iterdir())
    assert (wn / "data.noun").stat().st_size == (P.DEBIAN_WORDNET / "data.noun").stat().st_size


def test_missing_apertium_error_has_install_line(monkeypatch):
    from reward_auditor import rewriters as R
    monkeypatch.setattr(R.shutil, "which", lambda name: None)
    with pytest.raises(P.MissingResourceError, match="apt-get install apertium apertium-eng-spa"):
        R.ApertiumTranslator("eng-spa")


DETERMINISM_SCRIPT = r"""
import hashlib, json, sys
import pandas as pd
from reward_auditor import perturbations as P
texts = json.loads(sys.stdin.read())
df = pd.DataFrame({"id": [f"i{k}" for k in range(len(texts))], "subset": "s", "prompt": texts,
                   "chosen": texts, "rejected": texts[::-1]})
names = json.loads(sys.argv[1])
conds = P.perturb(df, names, seed=11)
blob = json.dumps({n: c.frame[["prompt", "chosen", "rejected"]].values.tolist() for n, c in conds.items()})
print(hashlib.sha256(blob.encode()).hexdigest())
"""


def test_same_seed_same_bytes_across_processes():
    names = json.dumps(OFFLINE)
    digests = []
    for hs in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hs, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        r = subprocess.run([sys.executable, "-c", DETERMINISM_SCRIPT, names], input=json.dumps(HARD),
                           capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        digests.append(r.stdout.strip())
    assert digests[0] == digests[1] and len(digests[0]) == 64


def test_conditions_from_paper_files():
    from reward_auditor.data import load_perturbed
    ppath = shared_file("reward-auditor", "chat_filtered_prompt_disturbance.json")
    pc = P.conditions_from_file(ppath)
    assert list(pc) == ["EF", "PH", "IU", "IW", "CN"]
    assert pc["EF"].frame["prompt"].str.startswith('""""""').all()
    assert pc["EF"].side == "prompt" and pc["EF"].group == "controlled"
    assert pc["EF"].frame["id"].tolist() == load_perturbed(ppath)["orig"]["id"].tolist()
    rpath = shared_file("reward-auditor", "chat_filtered_response_disturbance.json")
    by_content = P.conditions_from_file(rpath)
    assert list(by_content) == ["LE", "LE+SP", "ST", "LC", "LE+SLC"]
    rc = P.conditions_from_file(rpath, mapping=P.PAPER_RESPONSE_LABELS)
    assert list(rc) == ["ST", "LE", "SP", "LC", "SLC"] and rc["LC"].side == "response"
    orig = load_perturbed(rpath)["orig"]
    for c in rc.values():
        assert c.frame["id"].tolist() == orig["id"].tolist() and c.frame["id"].str.startswith("chat-").all()
        assert c.original["chosen"].tolist() == orig["chosen"].tolist()
    # the paper's "ST" column is RM-Bench's detailed plain answer, which the default calls LE
    assert rc["ST"].frame["chosen"].tolist() == by_content["LE"].frame["chosen"].tolist()
    assert rc["LC"].record["resources"]["content"] == "zh_concise"


def test_conditions_from_file_mapping_semantics():
    rpath = shared_file("reward-auditor", "chat_filtered_response_disturbance.json")
    c = P.conditions_from_file(rpath, mapping={"paraphrase": "ST", 4: "LC-zh", 1: None})
    assert list(c) == ["ST", "LC-zh"] and c["LC-zh"].record["resources"]["column"] == 4
    with pytest.raises(P.PerturbationError, match="mapping key 7"):
        P.conditions_from_file(rpath, mapping={7: "X"})
    with pytest.raises(P.PerturbationError, match="distinct"):
        P.conditions_from_file(rpath, mapping={1: "A", 2: "A"})
    with pytest.raises(P.PerturbationError, match="not a file of stored variants"):
        P.conditions_from_file(REPO / "reward_auditor" / "sample" / "preferences.jsonl")


def test_conditions_share_constants_with_data():
    from reward_auditor import data as D
    assert P.PAPER_RESPONSE_LABELS is D.PAPER_RESPONSE_LABELS
    assert P.PROMPT_PERTURBATION_LABELS is D.PROMPT_PERTURBATION_LABELS
    shared = {n for n in dir(P) if n.isupper() and not n.startswith("_")} & {n for n in dir(D) if n.isupper()}
    assert all(getattr(P, n) is getattr(D, n) for n in shared), shared


def test_conditions_from_rmbench_styles():
    from reward_auditor.data import load_preferences
    path = shared_file("rm-bench", "chat_filtered.json")
    c = P.conditions_from_file(path)
    assert list(c) == ["LE", "LE+SP"]
    f = c["LE+SP"].frame
    assert f["changed"].mean() > 0.9 and (f["chosen"].str.len() > c["LE"].original["chosen"].str.len()).mean() > 0.8
    full = load_preferences(path, format="rmbench")
    assert f["id"].tolist() == full["id"].tolist() and f["id"].str.startswith("chat-").all()
    assert c["LE"].frame["chosen"].tolist() == full["chosen_detailed_plain"].tolist()
    assert c["LE"].original["chosen"].tolist() == full["chosen_concise"].tolist()
    assert not any(col.startswith("chosen_") for col in f.columns)
    only = P.conditions_from_file(path, mapping={"detailed_markdown": "MD"})
    assert list(only) == ["MD"] and only["MD"].frame["chosen"].tolist() == f["chosen"].tolist()


def test_condition_from_frame_aligns_ids():
    orig = frame(4)
    pert = orig.iloc[::-1].copy()
    pert["prompt"] = pert["prompt"] + " !"
    c = P.condition_from_frame("MINE", orig, pert)
    assert c.side == "prompt" and c.group == "controlled" and c.frame["changed"].all()
    assert c.frame["id"].tolist() == orig["id"].tolist()
    with pytest.raises(P.PerturbationError, match="ids differ"):
        P.condition_from_frame("MINE", orig, pert.iloc[:2])
