"""RESULTS.md, the README's verdicts and the summary figures: generated from the manifest and in sync with
the committed one; the README free of commit hashes."""
import json
import re

import pytest

from helpers.results import claims as C
from helpers.figures import summary as figs
from helpers.results.documents import (BEGIN, END, FIGURES, ROOT, findings, results_page, summaries_of, verdict_table,
                                  with_verdicts)

MANIFEST = json.loads((ROOT / "figures" / "manifest.json").read_text(encoding="utf-8"))


def test_the_readme_holds_the_verdicts_of_the_committed_manifest():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert with_verdicts(readme, MANIFEST) == readme, "run `python -m helpers.reproduction` and commit README.md"


def test_results_md_is_the_page_of_the_committed_manifest():
    page = (ROOT / "RESULTS.md").read_text(encoding="utf-8")
    assert results_page(MANIFEST) == page, "run `python -m helpers.reproduction` and commit RESULTS.md"


def test_results_md_has_a_row_for_every_claim_and_both_summary_figures():
    page = (ROOT / "RESULTS.md").read_text(encoding="utf-8")
    for claim in C.all_claims(summaries_of(MANIFEST)):
        assert f"| {claim.claim} |" in page and f"**{claim.verdict.replace('|', chr(92) + '|')}**" in page
    for path in FIGURES.values():
        assert f"]({path})" in page and (ROOT / path).stat().st_size > 10_000


def test_the_readme_is_free_of_commit_hashes():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commits = set()
    import subprocess
    log = subprocess.run(["git", "log", "--format=%H"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    for word in set(re.findall(r"\b[0-9a-f]{7,40}\b", readme)):
        commits |= {word for full in log if full.startswith(word)}
    assert not commits, f"README.md names commits {sorted(commits)}: history belongs in CHANGELOG.md"
    assert not re.search(r"\bon [0-9a-f]{7}\b", readme)


def test_the_readme_opens_with_the_papers_and_what_we_found():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_screen = readme[: readme.index(END)]
    assert "arxiv.org/abs/2511.20273" in first_screen and "arxiv.org/abs/2608.06969" in first_screen
    assert first_screen.index("## What we found") < readme.index("make figures")
    found = first_screen[first_screen.index("## What we found"):]
    findings_part, attacked = found.split("Paper 1's circuits under attack and against nonsense")
    assert findings_part.count("\n- **") == 5  # the five findings
    assert attacked.count("\n- **") == 3  # then one line per task of paper 1


def test_the_readme_verdict_block_is_replaced_between_its_markers():
    text = f"intro\n{BEGIN}\nold table\n{END}\nrest\n"
    out = with_verdicts(text, MANIFEST)
    assert out.startswith(f"intro\n{BEGIN}\n- **") and out.endswith(f"{END}\nrest\n") and "old table" not in out
    with pytest.raises(ValueError, match="markers"):
        with_verdicts("no markers", MANIFEST)


def claim(paper, key, text, verdict, ours="o", control="", caveat="c"):
    return C.Claim(paper, text, "", ours, control, verdict, caveat, "[n](n)", key=key)


def test_findings_name_each_verdict_with_our_number_and_the_uninformative_checks():
    claims = [claim(1, "sparsity/ioi", "≈ 8.68 % of directions keep IOI at KL 0.21", C.NOT_REPRODUCED, "72 % kept",
                    "random KL 0.98"),
              claim(1, "sparsity/gender", "A sparse set keeps gender (mentions IOI)", C.REPRODUCED),
              claim(1, "subfunction/salience", "A name mover's directions carry salience (head 9.6)", C.REPRODUCED),
              claim(1, "subfunction/BOS", "A name mover's directions carry BOS (head 9.6)", C.NOT_REPRODUCED),
              claim(2, "mounts", "Tile-SVD mounts pass: 182/182", C.UNINFORMATIVE, "31/126 pass"),
              claim(2, "check/A1", "Check A1: lift", C.UNINFORMATIVE),
              claim(2, "check/C1", "Check C1: steer", C.UNINFORMATIVE),
              claim(2, "check/B1", "Check B1: coverage", C.NOT_REPRODUCED)]
    lines = findings(claims).splitlines()
    assert lines[0] == ("- **Paper 1's sparse IOI circuit: not reproduced.** 72 % kept; random KL 0.98. Caveat: c. "
                        "Shown in [n](n).")
    assert lines[1].startswith("- **Paper 1's name-mover subfunctions:** salience: reproduced; BOS: not reproduced.")
    assert lines[2].endswith("Checks A1 and C1 pass as often on random or permuted weights as on the real model.")
    table = verdict_table(claims)
    assert table.splitlines()[2] == "| 1 | ≈ 8.68 % of directions keep IOI at KL 0.21 | 72 % kept | **not reproduced** |"


def test_the_summary_figures_read_the_ledger_and_the_judges():
    summaries = {C.RUNS["ioi"]: dict(
        total_directions=1000, at_paper_kl=dict(kept=720, kl=0.08, random_kl=0.98),
        ledger=[dict(step="paper", kept_percent=100.0, kl=0.41), dict(step="hard_concrete", kept_percent=42.5, kl=0.04)])}
    bars = figs.paper_1_bars(summaries)
    assert bars["IOI"]["kept"] == {"paper (GPT-2 small)": pytest.approx(8.68), "paper's recipe, our model": 100.0,
                                   "paper's recipe, longer budget": None, "ours, under the paper's rule": 42.5,
                                   "ours": 72.0}
    budget = {f"{C.PAPER_BUDGET_SWEEP}-paper_maskingsteps_3000": dict(
        paper_recipe_run=dict(steps=3000), ledger=[dict(step="paper", kept_percent=9.5, kl=0.49)])}
    longer = figs.paper_1_bars({**summaries, **budget})
    assert longer["IOI"]["kept"]["paper's recipe, longer budget"] == 9.5 and longer["IOI"]["budget_steps"] == 3000
    assert longer["IOI"]["kl"]["paper's recipe, longer budget"] == 0.49
    assert longer["gender pronoun"]["kept"]["paper's recipe, longer budget"] is None  # IOI's sweep only
    assert bars["IOI"]["kl"]["ours"] == 0.08 and bars["IOI"]["random_kl"] == 0.98
    assert bars["gender pronoun"]["kept"]["ours"] is None and bars["gender pronoun"]["kept"]["paper (GPT-2 small)"] is None
    assert figs.paper_1_title(bars, C.NOT_REPRODUCED) == (
        "Paper 1's ≈ 9 % IOI circuit: not reproduced; ours keeps 72 % within KL 0.21")

    def row(judge, model, random, permuted):
        return {"judge": judge, "model": model, "model_of": 126, "random-init": random, "random-init_of": 126,
                "permuted": permuted, "permuted_of": 126}
    two = figs.paper_2_bars(dict(paper_judge=dict(factor_table=[row("ours", 31, 6, 2),
                                                               row("paper + width search", 84, 40, 29)])))
    assert two == {"our judge": {"model": (31, 126), "random-init": (6, 126), "permuted": (2, 126)},
                   "released judge + width search": {"model": (84, 126), "random-init": (40, 126), "permuted": (29, 126)}}
    assert figs.paper_2_title(two, C.NOT_REPRODUCED).endswith("its judge passes 40/126 random-init site-layers")


def test_no_committed_executed_notebook_shows_a_progress_bar():
    from helpers.pipeline.notebook_job import PROGRESS_BAR

    for path in sorted((ROOT / "figures").glob("*/notebook.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        for cell in notebook["cells"]:
            for output in cell.get("outputs", []):
                text = "".join(output.get("data", {}).get("text/plain", "")) + "".join(output.get("text", ""))
                assert not any(PROGRESS_BAR.match(line) for line in text.splitlines()), (
                    f"{path.relative_to(ROOT)} shows a progress bar: run python tools/tidy_executed_copies.py")


def test_the_readable_copy_drops_progress_bars_and_keeps_what_the_notebook_printed(tmp_path):
    from helpers.pipeline.notebook_job import write_readable_copy

    bar = {"output_type": "display_data", "metadata": {},
           "data": {"text/plain": ["faithfulness curve:   0%|          | 0/12 [00:00<?, ?it/s]"]}}
    widget = {"output_type": "display_data", "metadata": {},
              "data": {"text/plain": ["HBox(children=(...))"], "application/vnd.jupyter.widget-view+json": {}}}
    table = {"output_type": "display_data", "metadata": {}, "data": {"text/plain": ["   kept   kl\n0  12%|  0.1"]}}
    printed = {"output_type": "stream", "name": "stdout", "text": ["86,730 directions; 3 s\n"]}
    cell = {"cell_type": "code", "id": "a", "metadata": {}, "source": [], "execution_count": 1,
            "outputs": [bar, widget, table, printed]}
    executed = tmp_path / "executed.ipynb"
    executed.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    write_readable_copy(executed, tmp_path / "copy.ipynb", {})
    outputs = json.loads((tmp_path / "copy.ipynb").read_text())["cells"][0]["outputs"]
    assert outputs == [table, printed]
    write_readable_copy(tmp_path / "copy.ipynb", tmp_path / "again.ipynb", {})
    assert (tmp_path / "again.ipynb").read_text() == (tmp_path / "copy.ipynb").read_text()


def test_grouped_bars_centre_each_group_and_label_each_series_once():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    heights = {("a", "g1"): 3.0, ("b", "g1"): 5.0, ("c", "g1"): 7.0, ("a", "g2"): 1.0, ("c", "g2"): 2.0}
    figs.grouped_bars(ax, ["g1", "g2"], ("a", "b", "c"),
                      lambda s, g: (heights.get((s, g)), f"{s}{g}" if (s, g) in heights else "missing"),
                      width=0.25, fontsize=10)
    centres = sorted((round(p.get_x() + p.get_width() / 2, 6), p.get_height()) for p in ax.patches)
    assert centres == [(-0.25, 3.0), (0.0, 5.0), (0.25, 7.0), (0.75, 1.0), (1.25, 2.0)]
    assert ax.get_legend_handles_labels()[1] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.texts if t.get_text() == "missing"] == ["missing"]  # b has no bar in g2
    assert [t.get_text() for t in ax.get_xticklabels()] == ["g1", "g2"]
    plt.close(fig)


def test_the_runs_table_names_each_runs_device_and_flags_a_mix():
    from helpers.results.documents import device_of, results_page

    cpu = dict(name="a", wall_time_s=60, summary={"numerics": {"device": "cpu", "accelerator": None}})
    gpu = dict(name="b", wall_time_s=6, summary={"numerics": {"device": "cuda", "accelerator": "NVIDIA H200"}})
    assert device_of(cpu) == "cpu" and device_of(gpu) == "NVIDIA H200" and device_of(dict(name="old")) == "cpu"
    page = results_page({"runs": [cpu]})
    assert "| [a](figures/a/notebook.ipynb) | full | cpu | 1.0 min |" in page and "different devices" not in page
    assert "different devices (NVIDIA H200, cpu)" in results_page({"runs": [cpu, gpu]})


def test_each_task_gets_one_line_on_its_circuit_under_attack_or_says_it_has_not_run():
    from helpers.results.documents import circuit_checks
    from tests.unit.test_validation import seven_summary

    text, calibration = circuit_checks({"07_circuit_validation-ioi-smollm2-135m": seven_summary()}).split("\n\n")
    lines = text.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("- **IOI:** survives an adversary of 160 steps") and "task-specific: yes" in lines[0]
    assert lines[0].endswith("Shown in [07_circuit_validation-ioi-smollm2-135m]"
                             "(figures/07_circuit_validation-ioi-smollm2-135m/notebook.ipynb).")
    assert lines[1] == ("- **Gender pronoun:** not run yet (`python -m helpers.pipeline --only "
                        "07_circuit_validation-gender-smollm2-135m`).")
    # one of the two attacked circuits (each beside its random control) holds the bound: the attack can say yes
    assert calibration.startswith("1 of the 4 attacked circuits that leave directions out hold the bound")
    broken = seven_summary(survives=(False, False))
    assert "**None of the 4 attacked circuits" in circuit_checks({"07_circuit_validation-ioi-smollm2-135m": broken})


def test_the_paper_budget_sentence_reads_the_ledgers_first_two_rows():
    from helpers.results.documents import paper_budget

    assert paper_budget({"02_masking-ioi-smollm2-135m": {}}) is None
    ledger = [dict(kept_percent=41.25, kl=0.034, random_kl=0.9), dict(kl=1.234, random_kl=2.5)]
    summary = dict(paper_recipe_run=dict(steps=3000, batch=16), ledger=ledger)
    name = "02_masking-ioi-paper-budget-paper_maskingsteps_3000"
    text = paper_budget({name: summary})
    assert text.startswith("Paper 1's recipe given 3,000 steps of 16 (the reference run: 600) keeps 41.2 % of the "
                           "directions (m ≥ 1e-3) at soft-mask KL 0.03 (the paper: 8.68 % at KL 0.21); by the sparsity "
                           "rule, counted the paper's way: **not reproduced**. Binarised, its circuit has held-out KL "
                           "1.23 against 2.50")
    sparse = dict(summary, ledger=[dict(ledger[0], kept_percent=17.0), ledger[1]])  # within 2 × 8.68 %, the rule's limit
    assert "**reproduced**" in paper_budget({name: sparse})


def test_the_comparative_rules_say_no_on_cases_known_to_be_no():
    """A second seed of the task posed as its nonsense overlaps as much as seeds do, and the trained model posed as
    its own weight control needs the same count: both rules must say no, whatever the run."""
    from helpers.results.documents import known_no
    from helpers.singular.validation.adversary import load_attack_rules
    from tests.unit.test_validation import seven_summary

    rules = load_attack_rules()
    assert known_no(seven_summary(), rules) == (False, False)
    no_circuit = seven_summary()
    no_circuit["seeds"] = [dict(no_circuit["seeds"][0], at_bound_kept=None)]
    assert known_no(no_circuit, rules) == (False, None)


def test_the_results_page_has_one_reachability_row_per_verdict_rule():
    from helpers.results.documents import results_page

    page = results_page(MANIFEST)
    section = page.split("## Can each verdict say yes?", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Verdict rule")]
    assert [row.split(" | ")[0][2:] for row in rows] == [
        "Identities (01)", "Sparse circuit within the KL bound (02)", "Survives the attack (07)", "Task-specific by overlap (07)",
        "Trained weights matter (07)", "Task-specific by transfer (07, 08)", "Masking recovers a planted mechanism (08)",
        "Ablating the recovered directions removes the mechanism (08)", "A circuit beats its random control (02, 08)",
        "Logit receptors flip the pronoun (06)", "A head's subfunctions (03)",
        "Paper 2's checks A, B, C (04)"]
    assert "IOI: no, decided by set sizes" in section  # the committed random-token circuits keep 93-95 %


def planted_summary():
    from helpers.singular.validation.planted_recovery import load_plant_rules

    rules = {k: v for k, v in load_plant_rules().items() if k != "sites"}
    share = lambda low, high: dict(share=(low + high) / 2, low=low, high=high, gain=2.0)  # noqa: E731
    strong = dict(site="late", strength=2.0, drives_task=True, recovered=True, necessary=True, circuit_beats_random=True,
                  recovery=dict(n_planted=8, total=1000, recall=1.0, auroc=0.99),
                  random_recovery=dict(n_planted=8, total=1000, recall=1.0, auroc=0.6),
                  remaining=dict(planted=share(-0.05, 0.1), random=share(0.9, 1.05)))
    weak = dict(strong, strength=0.25, drives_task=False, recovered=False, necessary=False, circuit_beats_random=False,
                recovery=dict(n_planted=1, total=1000, recall=0.0, auroc=0.4))
    unplanted = dict(circuit_beats_random=False, circuit=dict(kl=-1e-6, random_kl=0.0))
    return dict(rules=rules, plants=[weak, strong], unplanted=unplanted)


def test_planted_rows_judge_only_the_plants_that_drive_the_task():
    from helpers.results.documents import PLANTED_RUN, planted_reach

    recover, ablate, beats = planted_reach({PLANTED_RUN: planted_summary()})
    assert "recovered at 1 of 1 (AUROC 0.99–0.99)" in recover and "scored as the plant: recovered at 0 of 1" in recover
    assert "the ground truth is 8 of 1000 directions" in recover
    assert "falls to ≤ 0.2 at 1 of 1" in ablate and "stays ≥ 0.8 at 1 of 1" in ablate
    assert "beats it at 1 of 1" in beats and "the unplanted model on the planted task: does not (KL 0.000" in beats
    missing = planted_reach({})
    assert len(missing) == 3 and all(f"--only {PLANTED_RUN}" in row for row in missing)


def test_planted_check_reports_the_positive_control_or_how_to_run_it():
    from helpers.results.documents import PLANTED_RUN, planted_check

    summary = planted_summary()
    summary["unplanted"].update(accuracy=0.07, chance=0.125)
    summary["unplanted"]["circuit"].update(kept_fraction=0.5)
    text = planted_check({PLANTED_RUN: summary})
    assert "drives the task (held-out accuracy ≥ 0.5) at 1 of 2 declared strengths" in text
    assert "recovers it by the declared rule at 1 (AUROC 0.99–0.99)" in text and "removes it at 1" in text
    summary["plants"][1]["kept_by_kind"] = dict(ov=dict(kept=6, of=6), qk=dict(kept=0, of=1))
    assert "keep 6 of the 6 ground-truth OV directions there and 0 of the 1 QK" in planted_check({PLANTED_RUN: summary})
    assert "keeps 50.0 % at held-out KL 0.000 against 0.000 at random: it does not beat" in text
    assert f"--only {PLANTED_RUN}" in planted_check({})
