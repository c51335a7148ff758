"""RESULTS.md's section on the papers' own models: what it says before any run, that it never shows a run on
stand-in weights, and that it judges real runs by the same claims, linked into figures-paper-models/."""
import json

from helpers.results.claims import RUNS, VALIDATION_RUNS, on_models
from helpers.core.models import STAND_IN_WORDS
from helpers.results.paper_models import (PAPER_MODEL_RUNS, PAPER_MODEL_VALIDATION_RUNS, declared_runs, paper_model_claims,
                                  real_summaries, section)
from helpers.results.documents import PAPER_MODELS_BEGIN, ROOT, with_paper_models


def test_every_run_the_claims_read_is_a_declared_run_of_the_profile():
    declared = {r.name for r in declared_runs(ROOT)}
    named = {n for v in PAPER_MODEL_RUNS.values() for n in (v if isinstance(v, tuple) else (v,))}
    named |= set(PAPER_MODEL_VALIDATION_RUNS.values())
    assert named <= declared, named - declared
    assert PAPER_MODEL_RUNS["ioi"] == "02_masking-ioi-gpt2-small" and PAPER_MODEL_RUNS["tiled"] == "04_tiled_svd-gemma-2-2b"
    assert on_models(RUNS, "smollm2-135m", "gemma-3-270m") == RUNS  # the identity on the embedded models
    assert on_models(VALIDATION_RUNS, "a", "b")["gender"] == "07_circuit_validation-gender-a"


def test_before_any_run_the_section_says_what_to_run_what_it_needs_and_costs(tmp_path):
    for folder in ("notebooks", "data"):  # the repository without figures-paper-models/
        (tmp_path / folder).symlink_to(ROOT / folder)
    text = section(tmp_path)
    assert text.startswith("No run on the papers' own models is recorded yet")
    assert "`make figures PROFILE=paper-models`" in text and "SVDIRS_WEIGHTS_GEMMA_2_2B" in text
    assert "accept Google's Gemma licence" in text
    for run in declared_runs(ROOT):
        assert run.cost and run.cost["cpu"] and run.cost["gpu"] and run.cost["basis"], run.name
        assert f"| {run.name} | {run.cost['cpu']} |" in text


def test_runs_on_stand_in_weights_are_never_shown():
    stand_in = {"name": "01_augmented_matrices-gpt2-small",
                "summary": {"model": "gpt2-small", "weights_source": f"/tmp/x ({STAND_IN_WORDS})"}}
    assert real_summaries({"runs": [stand_in]}) == ({}, ["01_augmented_matrices-gpt2-small"])


def test_a_run_on_real_weights_is_judged_by_the_same_claim_and_linked_into_the_profiles_folder():
    summary = json.loads((ROOT / "figures" / "01_augmented_matrices-smollm2-135m" / "summary.json").read_text())
    summary = dict(summary, model="gpt2-small", weights_source="/weights/gpt2")
    claims = paper_model_claims({"01_augmented_matrices-gpt2-small": summary})
    identities = next(c for c in claims if c.key == "identities")
    assert identities.shown_in == "[01_augmented_matrices-gpt2-small](figures-paper-models/01_augmented_matrices-gpt2-small/notebook.ipynb)"
    assert identities.verdict.split(":")[0] in ("reproduced", "not reproduced", "uninformative")
    ioi = next(c for c in claims if c.key == "sparsity/ioi")
    assert ioi.verdict == ("not testable here: run `python -m helpers.pipeline --profile paper-models --only "
                           "02_masking-ioi-gpt2-small` first")
    assert "8.68 %" in ioi.claim  # the paper's own number, beside which the run will stand


def test_the_readme_holds_what_the_profile_needs_and_costs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert PAPER_MODELS_BEGIN in readme
    assert with_paper_models(readme) == readme, "run `python -m helpers.reproduction` and commit README.md"
