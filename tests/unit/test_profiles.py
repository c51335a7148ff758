"""Workshop sizes chosen from a notebook's parameters cell: the runs.toml tables, matched by the run's
identity, and clear refusals."""
from pathlib import Path

import pytest

from helpers.pipeline.profiles import profile_parameters
from helpers.pipeline.runs import BY_HAND, load_runs, out_folder, run_name
from helpers.singular.masking.circuit_files import default_circuit, masking_run_folder


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


# --- where a notebook writes: the pipeline's folder, or, run by hand, figures-mine/ -------------------------

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@pytest.mark.parametrize("runs_file", ["runs.toml", "paper_models.toml"])
def test_every_declared_run_is_named_as_a_notebook_run_by_hand_names_itself(runs_file):
    """By hand, 07 finds 02's run by ``run_name``; the pipeline's runs must be named the same way, or the two
    paths would read different folders."""
    runs = [r for r in load_runs(NOTEBOOKS / runs_file) if r.sweep is None]
    assert runs
    for run in runs:
        assert run.name == run_name(run.notebook, run.parameters["model_name"], run.parameters.get("task_name"))


def test_out_dir_is_the_pipelines_when_given_and_figures_mine_by_hand():
    assert out_folder("/x/figures/02_masking-ioi-smollm2-135m", "02_masking.ipynb", "smollm2-135m", "ioi") == \
        "/x/figures/02_masking-ioi-smollm2-135m"
    assert out_folder(None, "02_masking.ipynb", "smollm2-135m", "ioi") == str(
        Path("..") / "figures-mine" / "02_masking-ioi-smollm2-135m")
    assert out_folder(None, "01_augmented_matrices.ipynb", "gemma-3-270m") == str(
        BY_HAND / "01_augmented_matrices-gemma-3-270m")
    assert BY_HAND.name == "figures-mine"  # git-ignored, never figures/, whose runs are the reference
    ignored = (NOTEBOOKS.parent / ".gitignore").read_text().split()
    assert "figures-mine/" in ignored


def test_a_reading_notebook_finds_02s_run_beside_its_own_and_refuses_one_that_is_missing_or_unfinished(tmp_path):
    mine = tmp_path / "figures-mine"
    with pytest.raises(FileNotFoundError, match=r"task_name='gender', model_name='smollm2-135m'.*02_masking\.ipynb"):
        masking_run_folder(mine, "gender", "smollm2-135m")
    folder = mine / "02_masking-gender-smollm2-135m"
    (folder / "circuits").mkdir(parents=True)  # started, killed before its summary
    with pytest.raises(FileNotFoundError, match="no finished notebook 02 run"):
        default_circuit("gender", "smollm2-135m", runs=mine)
    (folder / "summary.json").write_text("{}")
    assert masking_run_folder(mine, "gender", "smollm2-135m") == folder
    assert default_circuit("gender", "smollm2-135m", runs=mine).parent == folder / "circuits"
    with pytest.raises(FileNotFoundError):  # another task's run is not this one's
        masking_run_folder(mine, "ioi", "smollm2-135m")
