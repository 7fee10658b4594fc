"The meaning check tokenizes each compared text once: the encoder takes the ids `same_tokens` made."
from collections import Counter

import numpy as np
import pytest

from reward_auditor import meaning_check as MC
from reward_auditor import store

pytestmark = pytest.mark.skipif(MC.sentence_embedder() is None, reason="the MiniLM weights package is not installed")


class CountingTokenizer:
    "The real tokenizer, counting every text it is asked to encode."
    def __init__(self, tok):
        self.tok, self.seen = tok, Counter()

    def encode_batch(self, texts):
        self.seen.update(texts)
        return self.tok.encode_batch(texts)


BEFORE = ["Boil the water for twelve minutes, then drain the pasta.", "Kind regards, Maria from the orchard.",
          "It is final.", "Sort the list of 417 integers before printing them."]
AFTER = ["Boil the water for twelve minutes, then strain the pasta.", "Kind considers, Maria from the orchard.",
         "It  is FINAL.", "Order the list of 417 integers before printing them."]


def _filter(monkeypatch, memo: bool):
    "semantic_filter on fresh texts with an empty vector memory and no store, counting what is tokenized."
    monkeypatch.setenv("REWARD_AUDITOR_STORE", "off")
    emb = MC.semantic_embeddings()
    emb.forget()
    monkeypatch.setattr(emb, "_store", None, raising=False)
    counting = CountingTokenizer(MC.minilm_tokenizer(MC.minilm_folder()))
    monkeypatch.setattr(MC, "minilm_tokenizer", lambda folder: counting)
    monkeypatch.setattr(emb.model, "tok", counting)
    if not memo:  # the encoder tokenizes on its own, as before
        same = MC.same_tokens
        monkeypatch.setattr(MC, "same_tokens", lambda *a: (same(*a), MC._TOKENIZED.clear())[0])
    computed = emb.stats["computed"]
    out = MC.semantic_filter("ST", BEFORE, AFTER)
    return out, counting.seen, emb.stats["computed"] - computed


def test_compared_texts_are_tokenized_once_with_the_same_verdicts(monkeypatch):
    (kept, rec), seen, computed = _filter(monkeypatch, memo=True)
    assert computed == 6   # three differing pairs embedded; the spacing-and-case pair is not
    assert max(seen.values()) == 1, seen.most_common(3)
    assert sum(seen.values()) == 8   # the four pairs, each side once, and nothing again for the encoder
    monkeypatch.undo()
    (kept0, rec0), seen0, computed0 = _filter(monkeypatch, memo=False)
    assert max(seen0.values()) == 2 and computed0 == 6   # the old way: the embedded texts a second time
    assert kept == kept0 and rec == rec0
    assert kept[1] == BEFORE[1] and kept[0] == AFTER[0]   # the broken closing is undone, the paraphrase kept


def test_vectors_from_kept_ids_equal_fresh_ones(monkeypatch):
    monkeypatch.setenv("REWARD_AUDITOR_STORE", "off")
    emb = MC.semantic_embeddings()
    emb.forget()
    monkeypatch.setattr(emb, "_store", None, raising=False)
    same = MC.same_tokens(MC.minilm_folder(), BEFORE, AFTER)
    assert same.tolist() == [False, False, True, False]
    differ = [BEFORE[i] for i in (0, 1, 3)] + [AFTER[i] for i in (0, 1, 3)]
    kept = emb.vectors(differ)
    emb.forget()
    MC._TOKENIZED.clear()
    fresh = emb.vectors(differ)
    assert np.array_equal(kept, fresh)
    store.release_embedders()
