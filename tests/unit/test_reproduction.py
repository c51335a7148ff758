"""The README's "Does it reproduce?" table: generated from the manifest, in sync with it, and its cells
read from the ledgers of notebooks 02 and 04."""
import json
from pathlib import Path

import pytest

from helpers.reproduction import BEGIN, END, ROOT, paper_1_row, paper_2_row, table, with_table


def test_the_readme_holds_the_table_of_the_committed_manifest():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    manifest = json.loads((ROOT / "figures" / "manifest.json").read_text(encoding="utf-8"))
    assert with_table(readme, manifest) == readme, "run `python -m helpers.reproduction` and commit README.md"


def ledger_summary(kept_percent, kl, move_step="ours"):
    rows = [dict(step=s, kept_percent=k, kl=l, random_kl=2.0) for s, k, l in zip(
        ("paper", "binarised", "hard_concrete", "ours"), kept_percent, kl)]
    return dict(model="smollm2-135m", paper_kl=0.21, ledger=rows,
                at_paper_kl=dict(kept_fraction=0.7223, kl=0.0786, random_kl=0.9816),
                ledger_largest_move=dict(step=move_step, before=30.0, after=72.2))


def test_a_paper_1_row_reads_the_ledger_and_the_point_at_the_papers_kl():
    row = paper_1_row("ioi", ledger_summary([55.5, 55.5, 30.0, 72.2], [0.05, 1.2, 0.3, 0.08]))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1].startswith("≈ 9 %")
    assert cells[2] == "55.5 % kept (m ≥ 1e-3) at soft-mask KL 0.05"
    with_run = ledger_summary([55.5, 55.5, 30.0, 72.2], [0.05, 1.2, 0.3, 0.08]) | {"paper_recipe_run": dict(steps=600, batch=16)}
    assert paper_1_row("ioi", with_run).split("|")[3].strip().endswith("KL 0.05, 600 steps of 16")
    assert cells[3] == "72.2 % kept at held-out KL 0.08" and cells[4] == "same count at random: KL 0.98"
    at_alpha = ledger_summary([55.5, 55.5, 30.0, 72.2], [0.05, 1.2, 0.3, 0.08])
    at_alpha["at_paper_kl"]["alpha"] = 0.00078
    counted = at_alpha | {"total_directions": 86730, "at_paper_kl": at_alpha["at_paper_kl"] | dict(kept=9670, kept_fraction=0.1115)}
    assert paper_1_row("gender", counted).split("|")[4].strip().startswith("11.1 % kept")  # 11.149 %, not 11.15
    assert paper_1_row("gender", at_alpha).split("|")[4].strip() == (
        "72.2 % kept at held-out KL 0.08 (α 0.00078, sparsest within KL 0.21)")
    assert cells[5] == "ours: 30.0 % → 72.2 % kept"
    no_point = ledger_summary([55.5, 55.5, 30.0, 72.2], [0.05, 1.2, 0.3, 0.08]) | {"at_paper_kl": None}
    assert "no circuit reaches KL 0.21" in paper_1_row("ioi", no_point)
    assert "not reported" in paper_1_row("gender", ledger_summary([1, 1, 1, 1], [0, 0, 0, 0]))
    assert "not yet regenerated" in paper_1_row("gender", {"at_paper_kl": None}) and "not yet" in paper_1_row("ioi", None)


def test_a_paper_2_row_reads_the_judges_factor_table():
    def row(judge, model, changed, random, permuted):
        return {"judge": judge, "model": model, "model_of": 126, "random-init": random, "random-init_of": 126,
                "permuted": permuted, "permuted_of": 126, "model_changed": changed}
    factors = [row("ours", 31, 0, 5, 20), row("rounding", 31, 0, 5, 20), row("b1_window", 60, 29, 30, 50),
               row("lens", 30, 1, 5, 20), row("c_mounts", 33, 2, 6, 21), row("paper (all four rules)", 62, 31, 31, 52),
               row("paper + width search", 80, 49, 40, 70)]
    cells = [c.strip() for c in paper_2_row(dict(model="gemma-3-270m", paper_judge=dict(factor_table=factors)))
             .strip("|").split("|")]
    assert cells[1] == "182/182 site-layers pass, Gemma-2-2B"
    assert cells[2] == "80/126 pass (paper + width search)" and cells[3] == "31/126 pass"
    assert cells[4] == "random-init 40/126 (paper's), 5/126 (ours); permuted 70/126 (paper's), 20/126 (ours)"
    assert cells[5] == "b1_window: 29 verdicts change"
    assert "not yet regenerated" in paper_2_row({"check_a": []})


def test_the_table_needs_its_markers_and_replaces_only_what_lies_between_them():
    manifest = {"runs": []}
    text = f"intro\n{BEGIN}\nold\n{END}\nrest\n"
    new = with_table(text, manifest)
    assert new.startswith("intro\n") and new.endswith(f"{END}\nrest\n") and "old" not in new
    assert table(manifest) in new and with_table(new, manifest) == new
    with pytest.raises(ValueError, match="markers"):
        with_table("no markers", manifest)
