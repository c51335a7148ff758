"""Where a masking run's masks came from (helpers.singular.masking.training_time), on a tiny model."""
import json

import pytest
import torch

from helpers.core.cache import DamagedCacheWarning, checksum_path
from helpers.singular.masking.masks import MaskedModel
from helpers.singular.masking.training import MaskingRun, masking_prompts
from helpers.singular.masking.training_time import mask_cache_path, time_path, timed_masking_run
from tests.conftest import cached_model

RUN = MaskingRun(n_prompts=16, steps=2, batch=4)


def setup(tmp_path, monkeypatch):
    monkeypatch.setenv("SVDIRS_CACHE", str(tmp_path))
    return MaskedModel(cached_model("tiny-llama", "fold_norm"))


def test_the_path_is_the_file_train_masks_writes(tmp_path, monkeypatch):
    masked = setup(tmp_path, monkeypatch)
    RUN.run(masked, "ioi", progress=False)
    train, _ = masking_prompts(masked.model, "ioi", RUN.n_prompts, RUN.seed)
    assert list((tmp_path / "masks").glob("*.pt")) == [mask_cache_path(masked, train, RUN.rule(), RUN.train_config())]


def test_a_training_is_timed_then_reported_with_its_own_time_when_loaded(tmp_path, monkeypatch):
    masked = setup(tmp_path, monkeypatch)
    *_, masks, _, first = timed_masking_run(RUN, masked, "ioi", progress=False)
    assert not first.from_cache and first.seconds > 0 and first.describe().startswith("masks trained in")
    *_, again, history, second = timed_masking_run(RUN, masked, "ioi", progress=False)
    assert second.from_cache and second.seconds == round(first.seconds, 1) and second.trained_on == first.trained_on
    assert f"trained in {second.seconds:.0f} s on {first.trained_on}" in second.describe()
    _, _, reference, reference_history = RUN.run(masked, "ioi", progress=False)
    assert all(torch.equal(again.logits[name], reference.logits[name]) for name in reference.logits)
    assert history.equals(reference_history)


def test_masks_cached_without_a_time_say_so_instead_of_zero_seconds(tmp_path, monkeypatch):
    masked = setup(tmp_path, monkeypatch)
    RUN.run(masked, "ioi", progress=False)  # cached the way older runs cached them: no time beside them
    *_, timing = timed_masking_run(RUN, masked, "ioi", progress=False)
    assert timing.from_cache and timing.seconds is None and "not recorded" in timing.describe()
    assert " s" not in timing.describe()  # no time at all, rather than the load time read as a training time


def test_a_time_recorded_for_other_masks_is_not_reported(tmp_path, monkeypatch):
    masked = setup(tmp_path, monkeypatch)
    *_, first = timed_masking_run(RUN, masked, "ioi", progress=False)
    path = next((tmp_path / "masks").glob("*.pt"))
    record = json.loads(time_path(path).read_text())
    time_path(path).write_text(json.dumps({**record, "masks_sha256": "0" * 64}))
    *_, timing = timed_masking_run(RUN, masked, "ioi", progress=False)
    assert timing.from_cache and timing.seconds is None


def test_masks_that_fail_their_check_are_retrained_and_timed_again(tmp_path, monkeypatch):
    masked = setup(tmp_path, monkeypatch)
    timed_masking_run(RUN, masked, "ioi", progress=False)
    path = next((tmp_path / "masks").glob("*.pt"))
    checksum_path(path).write_text("0" * 64 + "\n")  # as if the file were damaged
    with pytest.warns(DamagedCacheWarning, match="is damaged"):
        *_, timing = timed_masking_run(RUN, masked, "ioi", progress=False)
    assert not timing.from_cache and timing.seconds > 0
    assert json.loads(time_path(path).read_text())["masks_sha256"] == checksum_path(path).read_text().strip()
