"""Corpora: offline default, local files, the hub's error; the seeded token sample and its two halves."""
import pytest
import torch

from helpers.tiled.corpus import MIN_CHARS, corpus_paragraphs, sample_tokens
from helpers.core.models import gpt2_tokenizer


def test_offline_default_is_prose_paragraphs_from_cpython_docs():
    paragraphs = corpus_paragraphs("python-docs")
    assert len(paragraphs) > 300 and sum(map(len, paragraphs)) > 150_000
    assert all(len(p) >= MIN_CHARS and "\n" not in p for p in paragraphs)
    assert not any(p.startswith((">>>", " ")) for p in paragraphs)


def test_local_file_and_folder_are_read_as_paragraphs(tmp_path):
    long = "This sentence is long enough to be kept as one paragraph of real prose by the filter here."
    (tmp_path / "a.txt").write_text(f"{long}\nand it continues here.\n\nshort\n\n    indented code block\n")
    (tmp_path / "b.md").write_text(f"Title\n=====\n\n{long}\n")
    (tmp_path / "ignored.bin").write_text(long)
    assert corpus_paragraphs(str(tmp_path / "a.txt")) == [f"{long} and it continues here."]
    assert len(corpus_paragraphs(str(tmp_path))) == 2
    with pytest.raises(FileNotFoundError, match="neither a registered corpus"):
        corpus_paragraphs(str(tmp_path / "missing"))


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
