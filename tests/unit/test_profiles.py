"""Workshop sizes chosen from a notebook's parameters cell: the runs.toml tables, matched by the run's
identity, and clear refusals."""
import pytest

from helpers.profiles import profile_parameters


def test_the_full_profile_changes_nothing_and_the_workshop_one_takes_the_runs_table():
    assert profile_parameters("02_masking.ipynb", "full", model_name="smollm2-135m", task_name="ioi") == {}
    ioi = profile_parameters("02_masking.ipynb", "workshop", model_name="smollm2-135m", task_name="ioi")
    gender = profile_parameters("02_masking.ipynb", "workshop", model_name="smollm2-135m", task_name="gender")
    assert ioi["masking"]["steps"] == 80 and gender["masking"]["steps"] == 40 and ioi["run_ledger"] is False
    assert profile_parameters("01_augmented_matrices.ipynb", "workshop", model_name="smollm2-135m") == {}


def test_a_run_outside_the_profile_an_unknown_profile_and_fast_together_are_refused():
    with pytest.raises(ValueError, match="02_masking-ioi-smollm2-135m"):  # names the runs that are in it
        profile_parameters("02_masking.ipynb", "workshop", model_name="smollm2-135m", task_name="greater_than")
    with pytest.raises(ValueError, match="choose one of"):
        profile_parameters("02_masking.ipynb", "worksop", model_name="smollm2-135m")
    with pytest.raises(ValueError, match="each set the sizes"):
        profile_parameters("02_masking.ipynb", "workshop", fast=True, model_name="smollm2-135m", task_name="ioi")
