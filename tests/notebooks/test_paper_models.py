"""The paper-models profile, offline, at the papers' models' real shapes: its whole --fast pipeline through
stand-in folders (random weights at GPT-2 small's shapes, and at Gemma-2-2B's widths cut to 2 of its 26
layers, declared), offline: the hub switched off for the notebooks' kernels, every connection refused in the
test's own process. Nothing it writes is kept."""
from pathlib import Path

import pytest

from helpers.core.models import STAND_IN_WORDS, load_model
from helpers.core.stand_ins import write_stand_in
from helpers.results.paper_models import PAPER_MODELS, real_summaries
from helpers.pipeline.runs import load_runs
from helpers.pipeline.scheduler import run_pipeline
from helpers.pipeline.runs import OWN_RUNS

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
GEMMA_LAYERS = 2  # its 01 computes 161 s of SVDs per layer on 2 cores: 2 of 26 keep the test near 45 min


@pytest.mark.slow
def test_the_paper_models_profile_runs_every_notebook_at_the_real_shapes_offline(tmp_path, monkeypatch):
    folders = {"gpt2-small": write_stand_in("gpt2-small", tmp_path / "gpt2-small"),
               "gemma-2-2b": write_stand_in("gemma-2-2b", tmp_path / "gemma-2-2b", n_layers=GEMMA_LAYERS)}
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("SVDIRS_WEIGHTS_GPT2_SMALL", str(folders["gpt2-small"]))
    monkeypatch.setenv("SVDIRS_WEIGHTS_GEMMA_2_2B", str(folders["gemma-2-2b"]))
    monkeypatch.setenv("SVDIRS_LAYERS_GEMMA_2_2B", str(GEMMA_LAYERS))
    manifest = run_pipeline(NOTEBOOKS / "runs.toml", figures_dir=tmp_path / "figures-paper-models",
                            build_dir=tmp_path / "build", profile="paper-models", fast=True, log=print)

    declared = [r.name for r in load_runs(NOTEBOOKS / OWN_RUNS["paper-models"])]
    assert [r["name"] for r in manifest["runs"]] == declared  # every notebook of the profile ran
    fingerprints = {}
    for name, folder in folders.items():
        model = load_model(name, truncated_layers=GEMMA_LAYERS if name == "gemma-2-2b" else None)
        fingerprints[name] = (model.weights_sha256, model.tokenizer_sha256)
        del model
    for run in manifest["runs"]:
        summary = run["summary"]
        name = summary["model"]
        assert name in PAPER_MODELS, run["name"]
        assert summary["weights_source"] == f"{folders[name]} ({STAND_IN_WORDS})", run["name"]
        assert (summary["weights_sha256"], summary["tokenizer_sha256"]) == fingerprints[name], run["name"]
        if name == "gemma-2-2b":
            assert summary["truncation"] == f"first {GEMMA_LAYERS} of 26 layers" and summary["n_layers"] == GEMMA_LAYERS
            assert summary["d_model"] == 2304 and summary["n_kv_heads"] == 4
        else:
            assert "truncation" not in summary and summary["n_layers"] == 12 and summary["d_model"] == 768

    identities = manifest["runs"][declared.index("01_augmented_matrices-gpt2-small")]["summary"]
    assert min(identities["largest_bias"].values()) > 0.1  # every kind of bias is there, and folded
    assert identities["worst_identity_error"] < 1e-4 < identities["misfolded_ov_error"]

    shown, left_out = real_summaries(manifest)
    assert shown == {} and left_out == declared  # RESULTS.md never shows a run on stand-in weights
