"""The figure pipeline on a tiny model: outputs, manifest, reuse after a finished run, failure report."""
import json
import re
import shutil
from pathlib import Path

import pytest

from helpers.pipeline.runs import PipelineError, load_runs
from helpers.pipeline.scheduler import run_pipeline

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


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


@pytest.mark.parametrize("model", ["tiny-gpt2", "tiny-gemma3", "tiny-gemma2"])
def test_notebook_01_runs_on_every_architecture(tmp_path, model):
    runs = make_runs(tmp_path, f'[[runs]]\nname = "nb01"\nnotebook = "01_augmented_matrices.ipynb"\n'
                               f'parameters = {{ model_name = "{model}" }}\n')
    manifest = run_pipeline(runs, figures_dir=tmp_path / "figures", build_dir=tmp_path / "build", fast=True,
                            log=print)
    assert manifest["runs"][0]["summary"]["worst_identity_error"] < 1e-4


def test_pipeline_stops_at_first_failure_naming_notebook_and_cell(tmp_path):
    runs = make_runs(tmp_path, '[[runs]]\nname = "broken"\nnotebook = "01_augmented_matrices.ipynb"\n'
                               'parameters = { model_name = "tiny-llama", processing = "folded" }\n'
                               '[[runs]]\nname = "never"\nnotebook = "01_augmented_matrices.ipynb"\n')
    with pytest.raises(PipelineError, match=r"broken.*cell \d+ .*01_augmented_matrices.ipynb.*folded"):
        run_pipeline(runs, figures_dir=tmp_path / "figures", build_dir=tmp_path / "build", fast=True, log=print)
    assert not (tmp_path / "figures" / "never").exists()


def test_a_model_that_cannot_be_loaded_is_refused_before_any_run_starts(tmp_path):
    runs = make_runs(tmp_path, '[[runs]]\nname = "fine"\nnotebook = "01_augmented_matrices.ipynb"\n'
                               'parameters = { model_name = "tiny-llama" }\n'
                               '[[runs]]\nname = "mistyped"\nnotebook = "01_augmented_matrices.ipynb"\n'
                               'parameters = { model_name = "no-such-model" }\n')
    with pytest.raises(PipelineError, match=r"(?s)no run started: 1 of the models.*no-such-model: unknown model.*tiny-gpt2"):
        run_pipeline(runs, figures_dir=tmp_path / "figures", build_dir=tmp_path / "build", fast=True, log=print)
    assert not (tmp_path / "figures").exists() and not (tmp_path / "build" / "notebooks").exists()


def test_the_paper_models_profile_refuses_without_weights_naming_how_to_get_them(tmp_path, monkeypatch):
    for name in ("GPT2_SMALL", "GEMMA_2_2B"):
        monkeypatch.delenv(f"SVDIRS_WEIGHTS_{name}", raising=False)
        monkeypatch.delenv(f"SVDIRS_LAYERS_{name}", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hub-cache"))
    with pytest.raises(PipelineError) as err:
        run_pipeline(NOTEBOOKS / "runs.toml", figures_dir=tmp_path / "figures-paper-models",
                     build_dir=tmp_path / "build", profile="paper-models", fast=True, log=print)
    message = str(err.value)
    assert message.startswith("no run started: 2 of the models")
    assert "gpt2-small: 'gpt2-small' (hub id gpt2)" in message and "$SVDIRS_WEIGHTS_GPT2_SMALL=/path" in message
    assert "gemma-2-2b: 'gemma-2-2b' (hub id google/gemma-2-2b)" in message and "$SVDIRS_WEIGHTS_GEMMA_2_2B" in message
    assert "accept Google's Gemma licence" in message and "huggingface-cli login" in message
    assert message.count("licence") == 1  # the gated licence is Gemma's alone
    assert not (tmp_path / "figures-paper-models").exists()


def test_the_paper_models_profile_declares_the_issues_runs_on_the_papers_models():
    from helpers.pipeline.runs import OWN_RUNS

    runs = load_runs(NOTEBOOKS / OWN_RUNS["paper-models"])
    by_model = {}
    for run in runs:
        by_model.setdefault(run.parameters["model_name"], []).append(run.notebook[:2])
        assert run.name.endswith(run.parameters["model_name"])  # notebooks find 02's circuits by this name
    assert by_model == {"gpt2-small": ["01", "02", "02", "02", "03", "06", "07", "07", "07"],
                        "gemma-2-2b": ["01", "04", "05"]}
    assert sorted(r.parameters.get("task_name") for r in runs if r.notebook.startswith("02")) == \
        ["gender", "greater_than", "ioi"]
    assert all(r.parameters.get("try_gemma_2_2b") is False for r in runs if r.notebook.startswith("04"))


@pytest.mark.slow
def test_every_declared_run_executes_in_fast_mode_on_its_real_model(tmp_path):
    """The whole figure sequence (notebooks/runs.toml) on the embedded models, short: what CI can afford."""
    manifest = run_pipeline(NOTEBOOKS / "runs.toml", figures_dir=tmp_path / "figures", build_dir=tmp_path / "build",
                            fast=True, log=print)
    declared = [r.name for r in load_runs(NOTEBOOKS / "runs.toml") if r.sweep is None]  # sweeps run when asked
    assert [r["name"] for r in manifest["runs"]] == declared
    for record in manifest["runs"]:
        assert record["figures"], record["name"]
        assert record["summary"]["model"] == record["parameters"]["model_name"]


# --- a minimal notebook, to test the pipeline's rules in seconds -----------------------------------------

def tiny_notebook(folder: Path, body: str = "") -> Path:
    """Parameters cell, a cell that may fail, a figure per name in ``figures``, a summary."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    params = nbformat.v4.new_code_cell('figures = ["a"]\nfail = False\nx = 1.5\nlabel = "z"\ndata_file = None\n'
                                       'wait = 0.0\nfast = False\nout_dir = "."')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# tiny"), params,
                nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nfrom helpers.figures.style import save_figure\n"
                                          "from helpers.pipeline.summaries import write_summary" + body),
                nbformat.v4.new_markdown_cell("a note"),
                nbformat.v4.new_code_cell("if fail:\n    raise ValueError('asked to fail')\n"
                                          "import time; time.sleep(wait)"),
                nbformat.v4.new_code_cell("for name in figures:\n    fig = plt.figure(); save_figure(fig, out_dir, name)\n"
                                          "write_summary(out_dir, {'model': 'none', 'x': x, 'label': label}, device='cpu')")]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tiny.ipynb"
    nbformat.write(nb, path)
    return path


def tiny_runs(tmp_path: Path, runs: str) -> tuple[Path, dict]:
    tiny_notebook(tmp_path / "notebooks")
    path = tmp_path / "notebooks" / "runs.toml"
    path.write_text(runs)
    return path, dict(figures_dir=tmp_path / "figures", build_dir=tmp_path / "build")


ONE_RUN = '[[runs]]\nname = "t"\nnotebook = "tiny.ipynb"\nparameters = {{ {} }}\n'


def test_a_failed_rerun_leaves_the_previous_result_whole_and_unlisted(tmp_path):
    runs, kwargs = tiny_runs(tmp_path, ONE_RUN.format('figures = ["a", "b"]'))
    run_pipeline(runs, log=print, **kwargs)
    folder = tmp_path / "figures" / "t"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert set(before) == {"a.png", "b.png", "summary.json", "notebook.ipynb"}
    runs.write_text(ONE_RUN.format('figures = ["a", "c"], fail = true'))
    with pytest.raises(PipelineError):
        run_pipeline(runs, log=print, **kwargs)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # nothing mixed in
    assert json.loads((tmp_path / "figures" / "manifest.json").read_text())["runs"] == []  # not current any more
    assert not [p for p in (tmp_path / "figures").iterdir() if p.name.startswith(".")]  # no staging left


def test_a_rerun_removes_figures_the_run_no_longer_makes(tmp_path):
    runs, kwargs = tiny_runs(tmp_path, ONE_RUN.format('figures = ["a", "b"]'))
    run_pipeline(runs, log=print, **kwargs)
    runs.write_text(ONE_RUN.format('figures = ["a", "c"]'))
    manifest = run_pipeline(runs, log=print, **kwargs)
    assert sorted(p.name for p in (tmp_path / "figures" / "t").iterdir()) == ["a.png", "c.png", "notebook.ipynb", "summary.json"]
    assert manifest["runs"][0]["figures"] == ["a.png", "c.png"]
    assert manifest["runs"][0]["summary"]["torch_threads"] >= 1


def test_a_killed_pipeline_leaves_no_staging_folder_and_the_old_result_whole(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    runs, kwargs = tiny_runs(tmp_path, ONE_RUN.format('figures = ["a"]'))
    run_pipeline(runs, log=print, **kwargs)
    before = (tmp_path / "figures" / "t" / "a.png").read_bytes()
    runs.write_text(ONE_RUN.format('figures = ["b"], wait = 60.0'))
    command = [sys.executable, "-m", "helpers.pipeline", "--runs", str(runs), "--figures", str(tmp_path / "figures"),
               "--build", str(tmp_path / "build"), "--no-yardstick"]  # nothing timed is kept
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.time() + 120
    while time.time() < deadline and not list((tmp_path / "figures").glob(".tmp-t-*")):
        time.sleep(0.2)
    time.sleep(3)  # the kernel is running the notebook now
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)
    assert process.returncode != 0
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == ["manifest.json", "t"]
    assert (tmp_path / "figures" / "t" / "a.png").read_bytes() == before
    assert json.loads((tmp_path / "figures" / "manifest.json").read_text())["runs"] == []


def test_the_error_names_the_source_notebooks_cell(tmp_path):
    runs, kwargs = tiny_runs(tmp_path, ONE_RUN.format('fail = true'))
    # source cells: 0 markdown, 1 parameters, 2 imports, 3 markdown, 4 the failing cell (5 in papermill's copy)
    with pytest.raises(PipelineError, match=r"cell 4 \(counting from 0.*tiny.ipynb, which begins 'if fail:'.*"
                                            r"execution count 4 in the executed copy\).*asked to fail"):
        run_pipeline(runs, log=print, **kwargs)


@pytest.mark.parametrize("parameters,message", [
    ('fial = true', r"no parameter 'fial'; did you mean 'fail'\?"),
    ('x = "0.5"', r"x='0.5' is a str, but tiny.ipynb expects a float"),
    ('figures = "a"', r"figures='a' is a str, but tiny.ipynb expects a list of str"),
    ('figures = [1]', r"figures=\[1\] is a list, but tiny.ipynb expects a list of str"),
    ('fail = 1', r"fail=1 is a int, but tiny.ipynb expects a bool"),
])
def test_a_mistyped_parameter_is_refused_before_anything_runs(tmp_path, parameters, message):
    runs, kwargs = tiny_runs(tmp_path, ONE_RUN.format(parameters))
    with pytest.raises(PipelineError, match=message):
        run_pipeline(runs, log=print, **kwargs)
    assert not (tmp_path / "build" / "notebooks").exists()  # refused before executing


def test_declared_parameters_of_every_notebook_accept_their_runs():
    from helpers.pipeline.scheduler import check_parameters

    for run in load_runs(NOTEBOOKS / "runs.toml"):
        for fast in (False, True):
            check_parameters(NOTEBOOKS / run.notebook, run.effective_parameters(fast, Path("out")), run.name)
        if run.workshop is not None:
            check_parameters(NOTEBOOKS / run.notebook, run.effective_parameters(False, Path("out"), "workshop"), run.name)
    with pytest.raises(PipelineError, match="no parameter 'procesing'; did you mean 'processing'"):
        check_parameters(NOTEBOOKS / "01_augmented_matrices.ipynb", {"procesing": "raw"})
    with pytest.raises(PipelineError, match="seed='0' is a str.*expects a int"):
        check_parameters(NOTEBOOKS / "02_masking.ipynb", {"seed": "0"})
    with pytest.raises(PipelineError, match="alphas=0.001 is a float.*expects a list of float"):
        check_parameters(NOTEBOOKS / "02_masking.ipynb", {"alphas": 0.001})
    with pytest.raises(PipelineError, match=r"scales=\['2'\] is a list.*expects a list of numbers"):
        check_parameters(NOTEBOOKS / "06_steering.ipynb", {"scales": ["2"]})  # default [1, 1.5, 2, ...]
    check_parameters(NOTEBOOKS / "06_steering.ipynb", {"scales": [1, 2.5]})


def test_a_run_is_reused_only_while_every_input_is_unchanged(tmp_path):
    (tmp_path / "data.txt").write_text("one")
    (tmp_path / "corpus.txt").write_text("text")
    runs, kwargs = tiny_runs(tmp_path, ONE_RUN.format('data_file = "../corpus.txt"') +
                             'inputs = ["../data.txt"]\n'
                             '[[runs]]\nname = "reader"\nnotebook = "tiny.ipynb"\nafter = ["t"]\n')
    logs = []
    run_pipeline(runs, log=logs.append, **kwargs)

    def rerun(**options) -> list[str]:
        logs.clear()
        run_pipeline(runs, log=logs.append, **options, **kwargs)
        return [line.split(":")[0].split()[-1] for line in logs if "running" in line]

    assert rerun() == []  # nothing changed
    (tmp_path / "data.txt").write_text("two")  # a declared input
    assert rerun() == ["t", "reader"]  # and the run that reads t's result
    (tmp_path / "corpus.txt").write_text("more text")  # a file a parameter names
    assert rerun() == ["t", "reader"]
    assert rerun(only=["reader"]) == []
    assert rerun(force=True) == ["t", "reader"]


def test_the_fingerprint_covers_imported_helpers_packages_and_upstream_results(tmp_path):
    from helpers.pipeline.fingerprints import PACKAGE_ROOT, environment_record, fingerprint, helper_modules
    from helpers.pipeline.runs import Run

    root = tmp_path / "helpers"
    shutil.copytree(PACKAGE_ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(PACKAGE_ROOT.parent / "data", tmp_path / "data")
    notebook = tmp_path / "04_tiled_svd.ipynb"
    shutil.copy(NOTEBOOKS / notebook.name, notebook)
    run = Run("r", notebook.name, after=["up"])
    environment = environment_record()

    def digest(env=environment, upstream="u1", params=None):
        return fingerprint(run, notebook, params or {"seed": 0}, NOTEBOOKS / "runs.toml", {"up": upstream}, env, root)

    first = digest()
    assert digest() == first
    assert digest(params={"seed": 1}) != first
    assert digest(params={"seed": 0, "out_dir": "/elsewhere"}) == first  # where it writes is not an input
    notebook.write_text(notebook.read_text().replace("sampled tokens", "sampled  tokens"))
    assert digest() != first
    shutil.copy(NOTEBOOKS / notebook.name, notebook)
    assert digest() == first
    imported = {p.relative_to(root).as_posix() for p in helper_modules(notebook, root)}
    assert {"tiled/sweep.py", "tiled/verdicts.py", "tiled/steer.py", "tiled/plans.py", "tiled/tiling.py", "tiled/sites.py", "tiled/statistics.py", "tiled/corpus.py",
            "core/models.py", "__init__.py", "tiled/__init__.py", "core/__init__.py"} <= imported
    assert not [name for name in imported if name.startswith("singular/")]  # paper 1's code
    with open(root / "singular" / "masks.py", "a") as handle:
        handle.write("\n# an unrelated change\n")
    assert digest() == first
    with open(root / "tiled" / "tiling.py", "a") as handle:
        handle.write("\n# a change to code the notebook runs\n")
    second = digest()
    assert second != first
    changed = {**environment, "packages": environment["packages"] + ["newpackage==1.0"]}
    assert digest(env=changed) != second
    assert digest(env={**environment, "torch_threads": environment["torch_threads"] + 1}) != second
    assert digest(upstream="u2") != second
    with open(tmp_path / "data" / "planted_mechanisms.toml", "a") as handle:  # no module of notebook 04 reads it
        handle.write("\n# another notebook's rules\n")
    assert digest() == second
    with open(tmp_path / "data" / "tiled_svd_thresholds.toml", "a") as handle:  # tiled.thresholds reads it; 04's run
        handle.write("\n# a changed threshold\n")                            # does not declare it
    assert digest() != second


def test_the_executed_notebook_beside_the_figures_is_readable_and_the_same_on_a_rerun(tmp_path):
    """The copy a reader opens holds the figure and printed output, but no progress bars, no papermill
    timings and no staging path, so two identical runs differ only in the wall times the notebook prints."""
    runs = make_runs(tmp_path, '[[runs]]\nname = "nb01"\nnotebook = "01_augmented_matrices.ipynb"\n'
                               'parameters = { model_name = "tiny-llama" }\n')
    kwargs = dict(figures_dir=tmp_path / "figures", build_dir=tmp_path / "build", fast=True, log=print)
    run_pipeline(runs, **kwargs)
    path = tmp_path / "figures" / "nb01" / "notebook.ipynb"
    text = path.read_text()
    notebook = json.loads(text)
    outputs = [o for c in notebook["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the spectra figure, inline
    assert any(o["output_type"] == "stream" and o["name"] == "stdout" for o in outputs)
    assert "papermill" not in notebook["metadata"] and "widget-view" not in text
    sources = "".join("".join(c["source"]) for c in notebook["cells"])
    assert ".tmp-" not in text and str(tmp_path) not in text and 'out_dir = "figures/nb01"' in sources  # as committed
    assert not any(o["output_type"] == "stream" and o["name"] == "stderr" and "it/s" in "".join(o["text"])
                   for o in outputs)
    run_pipeline(runs, force=True, **kwargs)
    timed = re.compile(r"seconds|\bin \d+(\.\d+)? s\b")  # wall times: "..._seconds": 0.1, "SVDs in 0.1 s"
    untimed = lambda s: [line for line in s.splitlines() if not timed.search(line)]  # noqa: E731
    assert untimed(path.read_text()) == untimed(text)


WORKSHOP_RUNS = (ONE_RUN.format('x = 2.0') + '[runs.workshop]\nx = 3.0\n'
                 + '[[runs]]\nname = "not-in-it"\nnotebook = "tiny.ipynb"\n')


def test_the_workshop_profile_runs_its_runs_at_their_sizes_into_its_own_folder_and_says_so(tmp_path):
    runs, _ = tiny_runs(tmp_path, WORKSHOP_RUNS)
    folders = dict(figures_dir=tmp_path / "figures-workshop", build_dir=tmp_path / "build" / "workshop")
    manifest = run_pipeline(runs, log=print, profile="workshop", **folders)
    assert [r["name"] for r in manifest["runs"]] == ["t"]  # only the runs with a [runs.workshop] table
    record = manifest["runs"][0]
    assert record["profile"] == "workshop" and record["parameters"]["x"] == 3.0
    summary = json.loads((tmp_path / "figures-workshop" / "t" / "summary.json").read_text())
    assert summary["profile"] == "workshop" and "not the reference results" in summary["profile_note"]
    assert summary["x"] == 3.0
    executed = json.loads((tmp_path / "figures-workshop" / "t" / "notebook.ipynb").read_text())
    assert "Workshop run" in "".join(executed["cells"][0]["source"])
    assert not (tmp_path / "figures").exists()  # the reference figures are not touched
    full = run_pipeline(runs, log=print, figures_dir=tmp_path / "figures", build_dir=tmp_path / "build")
    assert [r["name"] for r in full["runs"]] == ["t", "not-in-it"] and full["runs"][0]["parameters"]["x"] == 2.0
    assert "profile" not in json.loads((tmp_path / "figures" / "t" / "summary.json").read_text())


def test_a_workshop_profile_that_cannot_run_is_refused_before_anything_runs(tmp_path):
    runs, kwargs = tiny_runs(tmp_path, WORKSHOP_RUNS)
    with pytest.raises(PipelineError, match="choose one"):
        run_pipeline(runs, log=print, fast=True, profile="workshop", **kwargs)
    with pytest.raises(PipelineError, match="not one of"):
        run_pipeline(runs, log=print, profile="workshops", **kwargs)
    runs.write_text(ONE_RUN.format('x = 2.0') + '[runs.workshop]\nx = "3"\n')
    with pytest.raises(PipelineError, match="x='3' is a str"):
        run_pipeline(runs, log=print, profile="workshop", **kwargs)
    runs.write_text(ONE_RUN.format('') + '[[runs]]\nname = "reader"\nnotebook = "tiny.ipynb"\nafter = ["t"]\n'
                    '[runs.workshop]\n')
    with pytest.raises(PipelineError, match="reads the results of \\['t'\\], which are not"):
        run_pipeline(runs, log=print, profile="workshop", **kwargs)
    runs.write_text(ONE_RUN.format(''))
    with pytest.raises(PipelineError, match="no run declares"):
        run_pipeline(runs, log=print, profile="workshop", **kwargs)
    assert not (tmp_path / "build" / "notebooks").exists()


def test_summary_values_are_rounded_once_for_every_notebook():
    import numpy as np
    import pandas as pd
    import torch

    from helpers.pipeline.summaries import summary_value

    table = pd.DataFrame({"kl": [0.123456789, float("nan")], "n": [1, 2]})
    out = summary_value({"alpha": 1.95e-4, "tiny": 0.000123456, "kl": 0.2123456, "big": 12345.678912,
                         "nan": float("nan"), "inf": float("inf"), "flag": np.bool_(True), "count": np.int64(3),
                         "vector": torch.tensor([0.5, 0.1234567]), "table": table, 2.0: "key", "zero": 0.0})
    assert out["alpha"] == 1.95e-4 and out["tiny"] == 0.0001235  # 4 significant digits below 1e-3
    assert out["kl"] == 0.21235 and out["big"] == 12345.67891 and out["zero"] == 0.0  # 5 decimals
    assert out["nan"] is None and out["inf"] is None
    assert out["flag"] is True and out["count"] == 3 and type(out["count"]) is int
    assert out["vector"] == [0.5, 0.12346]
    assert out["table"] == [{"kl": 0.12346, "n": 1}, {"kl": None, "n": 2}]
    assert out["2.0"] == "key"
    with pytest.raises(TypeError, match="object"):
        summary_value({"x": object()})


def test_the_source_notebooks_hold_no_outputs():
    """Outputs belong to the executed copies in figures/<run>/; the sources stay clean for diffs."""
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        dirty = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and (c["outputs"] or c["execution_count"])]
        assert not dirty, f"{path.name}: cells {dirty} hold outputs; clear them (the pipeline writes executed copies)"


def test_every_source_notebook_cell_has_a_unique_id():
    """nbformat 4.5 cell ids: without one, every save draws a random id and the executed copies differ from
    one identical run to the next."""
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        ids = [c.get("id") for c in json.loads(path.read_text())["cells"]]
        missing = [i for i, cell_id in enumerate(ids) if not cell_id]
        assert not missing, f"{path.name}: cells {missing} have no id; give each a stable, unique one"
        assert len(set(ids)) == len(ids), f"{path.name}: repeated cell ids {sorted({i for i in ids if ids.count(i) > 1})}"


TINY_RUNS = Path(__file__).resolve().parents[1] / "tiny_runs.toml"  # shared with benchmarks/gpu_check.py
TINY_CIRCUIT_RUNS = ["02_masking-ioi-tiny-llama", "02_masking-gender-tiny-llama", "03_head_case_study-tiny-llama",
                     "06_steering-tiny-llama", "07_circuit_validation-ioi-tiny-llama",
                     "07_circuit_validation-ioi-tiny-llama-attack-alone"]


@pytest.mark.slow
def test_notebook_02_writes_circuit_files_that_03_06_07_and_the_evaluator_read(tmp_path):
    """With and without the ledger (the gender run: ``run_ledger = false``, as in the workshop profile)."""
    from helpers.singular.masking.circuit_evaluation import evaluate_file

    folder = tmp_path / "notebooks"
    folder.mkdir()
    for notebook in NOTEBOOKS.glob("0*.ipynb"):  # the runs file names them all
        shutil.copy(notebook, folder)
    (tmp_path / "data").symlink_to(NOTEBOOKS.parent / "data")
    (folder / "runs.toml").write_text(TINY_RUNS.read_text())
    figures = tmp_path / "figures"
    manifest = run_pipeline(folder / "runs.toml", figures_dir=figures, build_dir=tmp_path / "build", fast=True, log=print,
                            only=TINY_CIRCUIT_RUNS)
    summaries = {r["name"]: r["summary"] for r in manifest["runs"]}
    validated = summaries["07_circuit_validation-ioi-tiny-llama"]
    assert validated["circuits_from"]["files"] == {"ioi-ours-alpha0.000195": next(
        c["sha256"] for c in summaries["02_masking-ioi-tiny-llama"]["circuit_files"] if c["label"] == "ioi-ours-alpha0.000195")}
    assert [(r["circuit"], r["label"]) for r in validated["attack_table"]] == [("circuit", "ioi-ours-alpha0.000195"),
                                                                               ("random", "ioi-ours-alpha0.000195")]
    assert [s["seed"] for s in validated["seeds"]] == [0, 1] and len(validated["seed_jaccards"]) == 1
    assert [n["kind"] for n in validated["nonsense"]] == ["shuffled", "random_tokens"]
    assert [w["control"] for w in validated["weight_controls"]] == ["random-init", "permuted"]
    assert set(validated["verdicts"]) >= {"survives", "task_specific", "weights_matter"}
    alone = summaries["07_circuit_validation-ioi-tiny-llama-attack-alone"]  # the workshop's shape
    assert {r["start"] for r in alone["attack_curves"]} == {"rule"} and [s["seed"] for s in alone["seeds"]] == [0]
    assert alone["nonsense"] == [] and alone["weight_controls"] == [] and alone["seed_jaccards"] == []
    assert alone["verdicts"]["task_specific"] is None and alone["verdicts"]["weights_matter"] is None
    written = summaries["02_masking-ioi-tiny-llama"]["circuit_files"]
    assert [c["label"] for c in written] == ["ioi-ours-alpha0.000195", "ioi-ours-alpha0.00039", "ioi-ours-alpha0.00078",
                                             "ioi-paper-recipe", "ioi-ours-paper-rule"]
    assert len(summaries["02_masking-ioi-tiny-llama"]["faithfulness_scores"]) == len(written)
    read = summaries["03_head_case_study-tiny-llama"]["circuit_file"]
    assert read["path"] == "02_masking-ioi-tiny-llama/circuits/ioi-ours-alpha0.000195.safetensors"
    assert read["sha256"] == written[0]["sha256"]
    assert summaries["06_steering-tiny-llama"]["circuit_file"]["label"] == "gender-ours-alpha0.000195"
    gender = summaries["02_masking-gender-tiny-llama"]  # run_ledger = false: no paper recipe, ledger or their circuits
    assert [c["label"] for c in gender["circuit_files"]] == ["gender-ours-alpha0.000195", "gender-ours-alpha0.00039",
                                                             "gender-ours-alpha0.00078"]
    assert gender["run_ledger"] is False and gender["ledger"] is None and gender["paper_recipe_run"] is None
    assert summaries["02_masking-ioi-tiny-llama"]["run_ledger"] is True
    assert len(summaries["02_masking-ioi-tiny-llama"]["ledger"]) == 4
    for record in written:
        result = evaluate_file(figures / "02_masking-ioi-tiny-llama" / "circuits" / record["file"], n_prompts=8,
                               control_seeds=1, percents=(10, 100))
        assert result["circuit"]["kept"] == record["kept"] and result["curve"]["faithfulness"].iloc[-1] == 1.0


def test_notebook_kernels_run_quietly_over_unix_sockets_and_leave_no_socket_folder(tmp_path, capfd):
    import tempfile

    before = set(Path(tempfile.gettempdir()).glob("svdirs-kernels-*"))
    runs, kwargs = tiny_runs(tmp_path, ONE_RUN.format('figures = ["a"]'))
    run_pipeline(runs, log=print, **kwargs)
    out, err = capfd.readouterr()
    assert "running over TCP" not in out + err  # ipykernel's warning for every TCP kernel
    assert set(Path(tempfile.gettempdir()).glob("svdirs-kernels-*")) == before
    assert not list((tmp_path / "notebooks").glob("kernel*"))


# --- devices ---------------------------------------------------------------------------------------------

def test_the_resolved_device_reaches_notebooks_that_declare_one_and_enters_the_fingerprint(tmp_path, monkeypatch):
    import helpers.core.device as devices
    from helpers.pipeline.executors import SerialExecutor
    from helpers.pipeline.fingerprints import environment_record
    from helpers.pipeline.scheduler import run_device, run_parameters

    runs = load_runs(NOTEBOOKS / "runs.toml")
    declared = next(r for r in runs if r.notebook == "02_masking.ipynb")
    params = run_parameters(declared, NOTEBOOKS / "runs.toml", False, tmp_path / "out", "full", "cuda")
    assert params["device"] == "cuda"  # over the notebook's "auto": the kernel cannot resolve otherwise
    tiny_notebook(tmp_path / "nb")
    plain = run_parameters(load_runs(_write(tmp_path / "nb" / "runs.toml", ONE_RUN.format("")))[0],
                           tmp_path / "nb" / "runs.toml", False, tmp_path / "out", "full", "cuda")
    assert "device" not in plain  # a notebook without a device parameter is not given one
    monkeypatch.setattr(devices.torch.cuda, "is_available", lambda: False)
    assert run_device("auto", SerialExecutor()) == ("cpu", None)
    with pytest.raises(PipelineError, match=r"--device cuda: .*no CUDA GPU"):
        run_device("cuda", SerialExecutor())
    cpu, cuda = environment_record(2, "cpu"), environment_record(2, "cuda", where="SLURM nodes")
    assert cpu["numerics"]["device"] == "cpu" and cuda["numerics"] == {"device": "cuda", "on": "SLURM nodes"}
    assert json.dumps(cpu, sort_keys=True) != json.dumps(cuda, sort_keys=True)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_run_that_computed_on_another_device_than_its_fingerprint_says_is_not_recorded(tmp_path, monkeypatch):
    import helpers.pipeline.scheduler as scheduler

    runs, kwargs = tiny_runs(tmp_path, ONE_RUN.format(""))
    monkeypatch.setattr(scheduler, "run_device", lambda device, executor: ("cuda", "test nodes"))
    with pytest.raises(PipelineError, match=r"run 't' computed on 'cpu', but its fingerprint assumed 'cuda'"):
        run_pipeline(runs, log=print, **kwargs)
    manifest = json.loads((tmp_path / "figures" / "manifest.json").read_text()) if \
        (tmp_path / "figures" / "manifest.json").exists() else {"runs": []}
    assert manifest["runs"] == [] and not (tmp_path / "figures" / "t").exists()


def test_the_paper_profile_is_refused_on_the_cpu_with_what_it_would_cost(tmp_path, monkeypatch):
    import helpers.core.device as devices

    monkeypatch.setattr(devices.torch.cuda, "is_available", lambda: False)
    runs, kwargs = tiny_runs(tmp_path, ONE_RUN.format("x = 2.0") + "[runs.paper]\nx = 3.0\n")
    with pytest.raises(PipelineError, match=r"--profile paper on the CPU: .*13 hours for the three.*--device cuda"):
        run_pipeline(runs, log=print, profile="paper", **kwargs)
    paper = [r for r in load_runs(NOTEBOOKS / "runs.toml") if r.paper is not None]
    assert [r.name for r in paper] == [f"02_masking-{t}-smollm2-135m" for t in ("ioi", "gender", "greater_than")]
    assert all(r.paper == {"paper_masking": {"batch": 64, "steps": 3000}} for r in paper)
