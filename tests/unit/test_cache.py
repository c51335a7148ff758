"""Cached artefacts are verified before they are trusted: recorded sha256, damage detected and recomputed."""

import pytest
import torch

from helpers.core.cache import (CacheError, DamagedCacheWarning, atomic_file, checksum_path, load_verified, save_verified,
                           verify_checksum)


def test_an_interrupted_file_write_leaves_the_old_file(tmp_path):
    path = tmp_path / "figure.png"
    with atomic_file(path, suffix=".png") as tmp:
        assert tmp.suffix == ".png" and tmp.parent == tmp_path
        tmp.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_file(path) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("interrupted")
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["figure.png"]


def test_a_saved_object_loads_back_after_its_check(tmp_path):
    path = tmp_path / "entry.pt"
    digest = save_verified({"x": torch.arange(5)}, path)
    assert checksum_path(path).read_text().strip() == digest
    assert torch.equal(load_verified(path)["x"], torch.arange(5))
    assert load_verified(tmp_path / "absent.pt") is None


@pytest.mark.parametrize("damage", ["zeroed", "truncated", "no record"])
def test_a_damaged_cache_file_is_not_trusted_and_the_warning_names_it(tmp_path, damage):
    path = tmp_path / "entry.pt"
    save_verified({"x": torch.randn(1000)}, path)
    data = bytearray(path.read_bytes())
    if damage == "zeroed":
        data[len(data) // 2: len(data) // 2 + 256] = bytes(256)  # same size, as a disk error would leave it
        path.write_bytes(bytes(data))
    elif damage == "truncated":
        path.write_bytes(bytes(data[: len(data) // 2]))
    else:
        checksum_path(path).unlink()
    with pytest.warns(DamagedCacheWarning, match=str(path)):
        assert load_verified(path, "trained masks") is None


def test_a_verified_file_that_cannot_be_read_is_an_error_naming_it_and_the_fix(tmp_path):
    path = tmp_path / "entry.pt"
    path.write_bytes(b"not a torch file")
    checksum_path(path).write_text(__import__("hashlib").sha256(b"not a torch file").hexdigest())
    assert verify_checksum(path) is not None
    with pytest.raises(CacheError, match=f"{path}.*delete it"):
        load_verified(path)


def test_damaged_trained_masks_are_retrained_not_loaded(tmp_path, monkeypatch):
    from helpers.singular.masking.training import TrainConfig, masking_run
    from helpers.singular.masking.masks import AblationRule, MaskedModel
    from helpers.core.models import load_model

    monkeypatch.setenv("SVDIRS_CACHE", str(tmp_path))
    masked = MaskedModel(load_model("tiny-llama"))
    config = TrainConfig(steps=3, batch=4, log_every=1)
    _, _, first, _ = masking_run(masked, "ioi", 8, AblationRule.uniform(), config, progress=False)
    (saved,) = (tmp_path / "masks").glob("*.pt")
    saved.write_bytes(saved.read_bytes()[:100])  # truncated
    with pytest.warns(DamagedCacheWarning, match=str(saved)):
        _, _, again, _ = masking_run(masked, "ioi", 8, AblationRule.uniform(), config, progress=False)
    for a, b in zip(first.parameters(), again.parameters()):
        assert torch.equal(a, b)  # retrained: seeded, so the same masks
    assert verify_checksum(saved) is not None


def test_a_damaged_corpus_sample_is_resampled(tmp_path, monkeypatch):
    from helpers.tiled.corpus import sample_tokens
    from helpers.core.models import gpt2_tokenizer

    monkeypatch.setenv("SVDIRS_CACHE", str(tmp_path))
    text = tmp_path / "text.txt"
    text.write_text("\n\n".join(f"Paragraph {i} " + "about the weights of a model, and more words. " * 3
                                for i in range(6)))
    first = sample_tokens(gpt2_tokenizer(), str(text), n_tokens=50, max_tokens=32)
    (saved,) = (tmp_path / "corpus").glob("*.pt")
    data = bytearray(saved.read_bytes())
    data[-200:] = bytes(200)
    saved.write_bytes(bytes(data))
    with pytest.warns(DamagedCacheWarning, match=str(saved)):
        again = sample_tokens(gpt2_tokenizer(), str(text), n_tokens=50, max_tokens=32)
    assert torch.equal(first.positions, again.positions)


