"""Each notebook's closing "What we found", rendered from its summary: the numbers it states are the summary's,
and its reading rules hold at their boundaries."""
import json
from math import comb

import pytest

from helpers.results import conclusions
from helpers.results.documents import ROOT

MANIFEST = json.loads((ROOT / "figures" / "manifest.json").read_text(encoding="utf-8"))
SUMMARIES = {run["name"]: run["summary"] for run in MANIFEST["runs"]}


def committed(name):
    if name not in SUMMARIES:
        pytest.fail(f"{name} is missing from figures/manifest.json: regenerate it before running this test")
    return SUMMARIES[name]


def test_the_chance_of_kept_receptors_is_a_binomial_tail():
    assert conclusions.chance_of_at_least(4, 4, 0.3) == pytest.approx(0.3 ** 4)
    assert conclusions.chance_of_at_least(0, 4, 0.3) == pytest.approx(1.0)
    assert conclusions.chance_of_at_least(3, 4, 0.5) == pytest.approx((comb(4, 3) + 1) / 16)


def test_contiguity_hardly_matters_below_a_tenth_of_the_lead_over_random_directions():
    assert "hardly matters" in conclusions.contiguity_reading(0.5, 0.0499)
    assert "contiguity matters" in conclusions.contiguity_reading(0.5, 0.05)
    assert "contiguity matters" in conclusions.contiguity_reading(0.5, -0.06)


def test_the_masking_conclusion_states_the_sweep_and_the_verdict():
    summary = committed("02_masking-ioi-smollm2-135m")
    text = conclusions.masking(summary)
    assert text.startswith("## What we found")
    assert "**not reproduced**" in text and "72.2 % kept at held-out KL 0.08" in text
    for point in summary["alpha_sweep"]:
        assert f"| {point['alpha']:g} | {100 * point['kept_fraction']:.1f} % | {point['kl']:.3f} |" in text
    assert "fast run" not in text and "fast run" in conclusions.masking(summary, fast=True)


def test_the_tiled_conclusion_names_the_checks_that_separate_the_model():
    text = conclusions.tiled(committed("04_tiled_svd-gemma-3-270m"))
    assert "31/126 pass" in text and "| Check B1 |" in text
    assert "Only Check B1 separates the trained model" in text


def test_the_steering_conclusion_gives_the_chance_rate_of_the_kept_receptors():
    summary = committed("06_steering-smollm2-135m")
    text = conclusions.steering(summary)
    n, kept, base = len(summary["receptors"]), summary["receptors_in_circuit"], summary["circuit_ov_kept_fraction"]
    assert f"{kept} of {n} are kept" in text
    assert f"probability {conclusions.chance_of_at_least(kept, n, base):.2g}" in text
    assert "**reproduced**" in text


def test_the_identities_and_coverage_conclusions_read_their_summaries():
    text = conclusions.augmented_matrices(committed("01_augmented_matrices-smollm2-135m"))
    assert "**reproduced**" in text and "qk 84.9 %" in text and "the fewest for qk" in text
    text = conclusions.coverage(committed("05_coverage_curves-gemma-3-270m"))
    assert "higher by 0.362" in text and "hardly matters" in text


def test_the_head_case_study_conclusion_gives_each_subfunctions_verdict():
    summary = committed("03_head_case_study-smollm2-135m")
    text = conclusions.head_case_study(summary)
    for row in summary["subfunction_verdicts"]:
        assert row["subfunction"] in text
    assert text.count("**reproduced**") + text.count("**not reproduced**") + text.count("**uninformative") == len(
        summary["subfunction_verdicts"])
