"""Corpora: offline default, local files, the hub's error; the seeded token sample and its two halves."""
import hashlib
import sys
import types
from collections import Counter

import pytest
import torch

from helpers.tiled import corpus
from helpers.tiled.corpus import (MIN_CHARS, PYTHON_DOCS, PYTHON_DOCS_SHA256, corpus_paragraphs,
                                  python_docs_from_interpreter, sample_tokens)
from helpers.core.models import gpt2_tokenizer


def test_offline_default_is_prose_paragraphs_from_cpython_docs():
    paragraphs = corpus_paragraphs("python-docs")
    assert len(paragraphs) > 300 and sum(map(len, paragraphs)) > 150_000
    assert all(len(p) >= MIN_CHARS and "\n" not in p for p in paragraphs)
    assert not any(p.startswith((">>>", " ")) for p in paragraphs)
    # the interpreter's own pydoc_data keeps the rules (its text differs between releases)
    own = python_docs_from_interpreter(Counter())
    assert own and all(len(p) >= MIN_CHARS and "\n" not in p for p in own)


def test_python_docs_is_the_pinned_file_whatever_the_interpreter_ships(monkeypatch, tmp_path):
    paragraphs = corpus_paragraphs("python-docs")
    assert len(paragraphs) == 740
    assert hashlib.sha256("\n\n".join(paragraphs).encode()).hexdigest() == PYTHON_DOCS_SHA256
    monkeypatch.setitem(sys.modules, "pydoc_data.topics", types.SimpleNamespace(topics={"x": "another release " * 20}))
    assert corpus_paragraphs("python-docs") == paragraphs
    changed = tmp_path / "python-docs.txt"
    changed.write_text(PYTHON_DOCS.read_text(encoding="utf-8").replace("Assert", "Asserts", 1), encoding="utf-8")
    monkeypatch.setattr(corpus, "PYTHON_DOCS", changed)
    with pytest.raises(ValueError, match="not the pinned .*git checkout -- data/python-docs.txt"):
        corpus_paragraphs("python-docs")


def test_local_file_and_folder_are_read_as_paragraphs(tmp_path):
    long = "This sentence is long enough to be kept as one paragraph of real prose by the filter here."
    (tmp_path / "a.txt").write_text(f"{long}\nand it continues here.\n\nshort\n\n    indented code block\n")
    (tmp_path / "b.md").write_text(f"Title\n=====\n\n{long}\n")
    (tmp_path / "ignored.bin").write_text(long)
    assert corpus_paragraphs(str(tmp_path / "a.txt")) == [f"{long} and it continues here."]
    assert len(corpus_paragraphs(str(tmp_path))) == 2
    with pytest.raises(FileNotFoundError, match="neither a registered corpus"):
        corpus_paragraphs(str(tmp_path / "missing"))


WIKITEXT_RAW = (  # the layout of wiki.train.raw: every line starts with a space, blank lines are " "
    " \n"
    " = Valkyria Chronicles III = \n"
    " \n"
    " Senjō no Valkyria 3 : Unrecorded Chronicles is a tactical role @-@ playing video game developed by Sega . \n"
    " The game began development in 2010 , carrying over a large portion of the work done on its predecessor . \n"
    " \n"
    " = = Gameplay = = \n"
    " = = A section title long enough to pass the eighty character filter on its own , as some do = = \n"
    " \n"
    " Too short to keep . \n"
    " As with previous Valkyira Chronicles games , it is a tactical role @-@ playing game with real-time play . \n"
)
WIKITEXT_KEPT = [
    "Senjō no Valkyria 3 : Unrecorded Chronicles is a tactical role @-@ playing video game developed by Sega .",
    "The game began development in 2010 , carrying over a large portion of the work done on its predecessor .",
    "As with previous Valkyira Chronicles games , it is a tactical role @-@ playing game with real-time play .",
]


@pytest.mark.parametrize("name", ["wiki.train.raw", "wikitext_copy.txt"])
def test_a_local_wikitext_file_gives_the_papers_filtering(tmp_path, name):
    """One paragraph per line, " = Title = " headers dropped, lines under 80 characters dropped; found by
    the file name (.raw) or by its header lines (a .txt copy)."""
    (tmp_path / name).write_text(WIKITEXT_RAW, encoding="utf-8")
    assert corpus_paragraphs(str(tmp_path / name)) == WIKITEXT_KEPT
    assert all(len(p) >= MIN_CHARS for p in WIKITEXT_KEPT) and len("Too short to keep .") < MIN_CHARS
    assert max(len(line.strip()) for line in WIKITEXT_RAW.splitlines() if "= =" in line) >= MIN_CHARS


def test_an_empty_corpus_error_says_what_was_dropped_and_why(tmp_path):
    (tmp_path / "headers.raw").write_text(" = Title = \n \n = = Section = = \n Too short . \n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"dropped 2 \" = Title = \" headers, 1 paragraphs shorter than 80"):
        corpus_paragraphs(str(tmp_path / "headers.raw"))
    (tmp_path / "code.txt").write_text("    x = 1\n    y = 2\n\nshort\n", encoding="utf-8")
    with pytest.raises(ValueError, match="dropped 1 indented blocks .*, 1 paragraphs shorter than 80"):
        corpus_paragraphs(str(tmp_path / "code.txt"))
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="the text is empty"):
        corpus_paragraphs(str(tmp_path / "empty.txt"))


def test_wikitext_without_the_hub_fails_with_the_offline_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(RuntimeError, match="python-docs"):
        corpus_paragraphs("wikitext-2")


def test_sample_is_seeded_cached_excludes_bos_and_splits_by_sequence(monkeypatch, tmp_path):
    monkeypatch.setenv("SVDIRS_CACHE", str(tmp_path))
    tok = gpt2_tokenizer()
    a = sample_tokens(tok, n_tokens=500, seed=1, max_tokens=48, tokenizer_name="gpt2")
    assert len(list(tmp_path.rglob("*.pt"))) == 1
    b = sample_tokens(tok, n_tokens=500, seed=1, max_tokens=48, tokenizer_name="gpt2")  # from the cache
    c = sample_tokens(tok, n_tokens=500, seed=2, max_tokens=48, tokenizer_name="gpt2")
    assert torch.equal(a.positions, b.positions) and not torch.equal(a.positions, c.positions)
    assert len(a.positions) == 500 and len(set(map(tuple, a.positions.tolist()))) == 500
    assert bool((a.positions[:, 1] >= 1).all())  # never the BOS
    assert all(int(p) < len(a.sequences[int(s)]) for s, p in a.positions)
    halves = a.halves()
    assert set(halves["fit"]).isdisjoint(halves["score"])
    # the declared rule: even sequences fit, odd ones score, every sampled position in its sequence's half
    assert all(s % 2 == 0 for s in halves["fit"]) and all(s % 2 == 1 for s in halves["score"])
    for seq, pos in a.positions.tolist():
        assert pos in halves["fit" if seq % 2 == 0 else "score"][seq]
    assert sum(len(v) for h in halves.values() for v in h.values()) == 500
    assert a.record()["sha256"] == b.record()["sha256"]
    with pytest.raises(ValueError, match="exceeds the corpus"):
        sample_tokens(tok, n_tokens=10**7, tokenizer_name="gpt2")
