"""The notebooks as a student runs them in JupyterLab: no pipeline, ``out_dir`` left at its default, the
kernel's working directory the notebooks' folder. Notebook 07 must attack the circuit that the student's own
notebook 02 wrote, not the reference run's in figures/ (helpers.pipeline.runs.BY_HAND).

CI sizes (``fast``, one α, a one-step attack, no controls: the path is what is tested, in as little time as
CI allows); the workshop's sizes take the same path with the parameters ``profile = "workshop"`` chooses."""
import json
from pathlib import Path

import papermill
import pytest

from helpers.core.cache import sha256_file

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"

pytestmark = pytest.mark.slow


def run_by_hand(notebook: str, where: Path, **parameters) -> None:
    """Execute ``notebook`` as JupyterLab would: from the notebooks' folder (a copy's, under ``where``), with
    only ``parameters`` changed from the notebook's own; ``out_dir`` is never given."""
    assert "out_dir" not in parameters
    papermill.execute_notebook(str(NOTEBOOKS / notebook), str(where / notebook), parameters=parameters,
                               cwd=str(where), kernel_name="python3", progress_bar=False)


def test_07_run_by_hand_attacks_the_circuit_of_the_students_own_02(tmp_path):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    student = dict(model_name="smollm2-135m", task_name="ioi", fast=True)
    run_by_hand("02_masking.ipynb", notebooks, **student, run_ledger=False, alphas=[1.95e-4])
    mine = tmp_path / "figures-mine"
    masking = mine / "02_masking-ioi-smollm2-135m"
    assert (masking / "summary.json").is_file(), sorted(p.name for p in mine.iterdir())

    run_by_hand("07_circuit_validation.ipynb", notebooks, **student, nested_shares=[], n_seeds=1,
                nonsense_kinds=[], weight_controls=[], attack={"checkpoints": [1], "starts": ["rule"]})
    validation = json.loads((mine / "07_circuit_validation-ioi-smollm2-135m" / "summary.json").read_text())
    read = validation["circuits_from"]
    assert read["run"] == masking.name
    assert read["files"], read
    for label, sha in read["files"].items():  # the student's files, byte for byte, not figures/' reference ones
        assert sha == sha256_file(masking / "circuits" / f"{label}.safetensors"), label
    assert not (tmp_path / "figures").exists()  # nothing written where the pipeline's reference runs live
