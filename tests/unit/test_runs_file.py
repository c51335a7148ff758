"""The runs file: declared runs and sweeps that expand into runs of their own (helpers.pipeline.runs)."""
from pathlib import Path

import pytest

from helpers.pipeline.runs import PipelineError, load_runs, sweep_run_name

NOTEBOOK = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'


def runs_file(tmp_path: Path, text: str) -> Path:
    (tmp_path / "nb.ipynb").write_text(NOTEBOOK)
    path = tmp_path / "runs.toml"
    path.write_text(text)
    return path


SWEEP = """
[[runs]]
name = "base"
notebook = "nb.ipynb"

[[sweeps]]
name = "seeds"
notebook = "nb.ipynb"
parameters = { task_name = "ioi", alpha = 0.5 }
parameter_sets = [ { seed = 1 }, { seed = 2, alpha = 7.8e-4 }, { seed = 3, masking = { lr = 0.02 } } ]
after = ["base"]
"""


def test_a_sweep_expands_into_named_runs_with_the_shared_parameters_under_each_set():
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        runs = load_runs(runs_file(Path(folder), SWEEP))
    assert [r.name for r in runs] == ["base", "seeds-seed1", "seeds-alpha0.00078-seed2", "seeds-maskinglr_0.02-seed3"]
    assert [r.sweep for r in runs] == [None, "seeds", "seeds", "seeds"]
    assert runs[1].parameters == {"task_name": "ioi", "alpha": 0.5, "seed": 1}
    assert runs[2].parameters == {"task_name": "ioi", "alpha": 7.8e-4, "seed": 2}  # the set wins over the shared value
    assert all(r.after == ["base"] for r in runs[1:]) and runs[1].after is not runs[2].after


def test_sweep_names_are_sorted_by_parameter_and_safe_as_folder_names():
    assert sweep_run_name("s", {"seed": 2, "alpha": 0.001}) == "s-alpha0.001-seed2"
    assert sweep_run_name("s", {"label": "a/b c"}) == "s-labela_b_c"
    assert sweep_run_name("s", {"flag": True}) == "s-flagtrue"


@pytest.mark.parametrize("sweep, message", [
    ('name = "s"\nnotebook = "nb.ipynb"\nparameter_sets = []', "non-empty list of non-empty tables"),
    ('name = "s"\nnotebook = "nb.ipynb"\nparameter_sets = [{}]', "non-empty list of non-empty tables"),
    ('name = "s"\nnotebook = "nb.ipynb"', r"lacks \['parameter_sets'\]"),
    ('name = "s"\nnotebook = "nb.ipynb"\nparameter_sets = [{ seed = 1 }]\nseeds = [1]', r"unknown keys \['seeds'\]"),
    ('name = "s"\nnotebook = "nb.ipynb"\nparameter_sets = [{ seed = 1 }, { seed = 1 }]', "repeated: .'s-seed1'."),
    ('name = "s"\nnotebook = "nb.ipynb"\nparameter_sets = [{ seed = 1 }]\nafter = ["later"]', "not a run declared before it"),
])
def test_a_malformed_sweep_is_refused_with_what_to_write(tmp_path, sweep, message):
    with pytest.raises(PipelineError, match=message):
        load_runs(runs_file(tmp_path, f"[[sweeps]]\n{sweep}\n"))


def test_a_run_may_not_set_the_sweep_key_itself(tmp_path):
    with pytest.raises(PipelineError, match=r"unknown keys \['sweep'\]"):
        load_runs(runs_file(tmp_path, '[[runs]]\nname = "a"\nnotebook = "nb.ipynb"\nsweep = "x"\n'))


def test_the_declared_sweeps_expand():
    runs = load_runs(Path(__file__).resolve().parents[2] / "notebooks" / "runs.toml")
    sweeps = [r for r in runs if r.sweep]
    assert sweeps and all(r.name.startswith(r.sweep + "-") for r in sweeps)
