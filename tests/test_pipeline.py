"""The figure pipeline on a tiny model: outputs, manifest, reuse after a finished run, failure report."""
import json
import shutil
from pathlib import Path

import pytest

from helpers.pipeline import PipelineError, load_runs, run_pipeline

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def make_runs(tmp_path: Path, body: str) -> Path:
    folder = tmp_path / "notebooks"
    folder.mkdir()
    shutil.copy(NOTEBOOKS / "01_augmented_matrices.ipynb", folder)
    (folder / "runs.toml").write_text(body)
    return folder / "runs.toml"


def test_declared_runs_name_existing_notebooks():
    runs = load_runs(NOTEBOOKS / "runs.toml")
    assert runs and all((NOTEBOOKS / r.notebook).exists() for r in runs)


def test_pipeline_writes_figures_summary_manifest_and_reuses_finished_runs(tmp_path):
    runs = make_runs(tmp_path, '[[runs]]\nname = "nb01-tiny"\nnotebook = "01_augmented_matrices.ipynb"\n'
                               'parameters = { model_name = "tiny-llama", processing = "fold_norm" }\n')
    logs = []
    kwargs = dict(figures_dir=tmp_path / "figures", build_dir=tmp_path / "build", fast=True, log=logs.append)
    manifest = run_pipeline(runs, **kwargs)
    record = manifest["runs"][0]
    assert record["figures"] == ["spectra.png"]
    assert record["summary"]["model"] == "tiny-llama" and record["summary"]["worst_identity_error"] < 1e-4
    assert record["parameters"]["fast"] is True and manifest["packages"]["torch"].startswith("2.13")
    assert json.loads((tmp_path / "figures" / "manifest.json").read_text()) == manifest
    image = (tmp_path / "figures" / "nb01-tiny" / "spectra.png").read_bytes()
    run_pipeline(runs, **kwargs)
    assert "reused" in logs[-1]
    run_pipeline(runs, force=True, **kwargs)
    assert (tmp_path / "figures" / "nb01-tiny" / "spectra.png").read_bytes() == image  # deterministic figure


def test_pipeline_stops_at_first_failure_naming_notebook_and_cell(tmp_path):
    runs = make_runs(tmp_path, '[[runs]]\nname = "broken"\nnotebook = "01_augmented_matrices.ipynb"\n'
                               'parameters = { model_name = "no-such-model" }\n'
                               '[[runs]]\nname = "never"\nnotebook = "01_augmented_matrices.ipynb"\n')
    with pytest.raises(PipelineError, match=r"broken.*01_augmented_matrices.ipynb, cell \d+.*no-such-model"):
        run_pipeline(runs, figures_dir=tmp_path / "figures", build_dir=tmp_path / "build", fast=True, log=print)
    assert not (tmp_path / "figures" / "never").exists()


@pytest.mark.slow
def test_every_declared_run_executes_in_fast_mode_on_its_real_model(tmp_path):
    """The whole figure sequence (notebooks/runs.toml) on the embedded models, short: what CI can afford."""
    manifest = run_pipeline(NOTEBOOKS / "runs.toml", figures_dir=tmp_path / "figures", build_dir=tmp_path / "build",
                            fast=True, log=print)
    declared = [r.name for r in load_runs(NOTEBOOKS / "runs.toml")]
    assert [r["name"] for r in manifest["runs"]] == declared
    for record in manifest["runs"]:
        assert record["figures"], record["name"]
        assert record["summary"]["model"] == record["parameters"]["model_name"]
