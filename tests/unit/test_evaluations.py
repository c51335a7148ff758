"""The committed evaluator reports: written once per circuit file, reused only while current, and present and
current for every circuit file the committed figures hold."""
import dataclasses
import json
import re
from pathlib import Path

import pytest

from helpers import evaluations
from helpers.results import circuit_reports
from helpers.core.cache import sha256_file
from helpers.singular.masking.circuit_files import load_circuit, save_circuit
from tests.unit.test_circuit_files import trained_circuit

ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(n_prompts=16, seed=None, control_seeds=1, ranking="signed")


def figures_with_a_circuit(tmp_path: Path) -> tuple[Path, Path]:
    """A figures folder laid out as notebook 02 leaves it: a run with one circuit file listed in its summary."""
    run = tmp_path / "figures" / "02_masking-ioi-tiny-llama"
    _, _, _, circuit, _, _ = trained_circuit()
    path = save_circuit(circuit, run / "circuits" / "ioi-test.safetensors")
    (run / "summary.json").write_text(json.dumps(dict(circuit_files=[dict(file=path.name, sha256=sha256_file(path))])))
    return tmp_path / "figures", path


def test_reports_are_written_then_reused_and_redone_only_when_an_input_changes(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(circuit_reports, "SETTINGS", SMALL)
    figures, circuit = figures_with_a_circuit(tmp_path)
    assert evaluations.main(["--figures", str(figures), "--check"]) == 1  # unscored: --check fails, writes nothing
    assert not (figures / "evaluations").exists()
    assert evaluations.main(["--figures", str(figures)]) == 0
    report = figures / "evaluations" / "02_masking-ioi-tiny-llama" / "ioi-test.json"
    saved = json.loads(report.read_text())
    assert saved["circuit_sha256"] == sha256_file(circuit) and saved["n_prompts"] + saved["removed_as_seen"] == 16
    assert "not comparable with MIB" in report.with_suffix(".txt").read_text()
    assert "| test |" in (figures / "evaluations" / "table.md").read_text()

    import helpers.singular.masking.circuit_evaluation
    monkeypatch.setattr(helpers.singular.masking.circuit_evaluation, "evaluate_file", lambda *a, **k: pytest.fail("a current report was rescored"))
    assert evaluations.main(["--figures", str(figures)]) == 0
    assert evaluations.main(["--figures", str(figures), "--check"]) == 0
    assert "current, reused" in capsys.readouterr().out

    monkeypatch.setattr(circuit_reports, "SETTINGS", {**SMALL, "control_seeds": 2})  # another setting: stale
    assert evaluations.main(["--figures", str(figures), "--check"]) == 1
    assert "changed since it was written" in capsys.readouterr().out


def test_runs_restrict_scoring_to_their_circuits_when_a_label_recurs_across_runs(tmp_path, monkeypatch, capsys):
    import shutil

    monkeypatch.setattr(circuit_reports, "SETTINGS", SMALL)
    figures, _ = figures_with_a_circuit(tmp_path)
    shutil.copytree(figures / "02_masking-ioi-tiny-llama", figures / "02_masking-ioi-tiny-llama-sweep")  # same label
    assert evaluations.main(["--figures", str(figures), "--runs", "02_masking-ioi-tiny-llama-sweep",
                             "--only", "ioi-test"]) == 1  # the other run's report is still missing, as with --only
    assert (figures / "evaluations" / "02_masking-ioi-tiny-llama-sweep" / "ioi-test.json").exists()
    assert not (figures / "evaluations" / "02_masking-ioi-tiny-llama").exists()  # the other run's, same label: untouched
    assert (figures / "evaluations" / "table.md").read_text().count("| test") == 1  # one current report
    assert evaluations.main(["--figures", str(figures), "--check"]) == 1
    # scoring the other run keeps the first run's current report in the table
    assert evaluations.main(["--figures", str(figures), "--runs", "02_masking-ioi-tiny-llama"]) == 0  # both current
    table = (figures / "evaluations" / "table.md").read_text()
    assert "| test (02_masking-ioi-tiny-llama-sweep) |" in table and "| test (02_masking-ioi-tiny-llama) |" in table
    assert evaluations.main(["--figures", str(figures), "--runs", "02_masking-ioi-tiny-lama"]) == 2
    assert "--runs ['02_masking-ioi-tiny-lama']: no such run with circuits" in capsys.readouterr().err


def test_adversarial_reports_carry_the_attack_and_stay_current_without_the_option(tmp_path, monkeypatch, capsys):
    import helpers.singular.masking.circuit_evaluation

    monkeypatch.setattr(circuit_reports, "SETTINGS", SMALL)
    short = tmp_path / "attack.toml"  # the declared rules with a shorter attack, so that the test takes seconds
    short.write_text(circuit_reports.attack_rules_file().read_text().replace("checkpoints = [20, 40, 80, 160]", "checkpoints = [2, 4]"))
    monkeypatch.setattr(circuit_reports, "ATTACK_RULES", short)
    figures, circuit = figures_with_a_circuit(tmp_path)
    assert evaluations.main(["--figures", str(figures)]) == 0  # a report without the attack
    assert evaluations.main(["--figures", str(figures), "--adversarial", "--check"]) == 1
    assert "holds no attack" in capsys.readouterr().out
    assert evaluations.main(["--figures", str(figures), "--adversarial"]) == 0
    report = figures / "evaluations" / "02_masking-ioi-tiny-llama" / "ioi-test.json"
    saved = json.loads(report.read_text())
    assert saved["settings"]["adversarial"] is True
    assert saved["attack"]["settings"]["checkpoints"] == [2, 4]  # the rules it was given
    assert {"under_rule_kl", "stochastic", "curve", "best_kl", "survives"} <= set(saved["attack"])
    assert "under attack" in report.with_suffix(".txt").read_text()
    assert re.search(r"\| (survives|breaks) 4 steps \(\d\.\d{3}\) \|", (figures / "evaluations" / "table.md").read_text())
    monkeypatch.setattr(helpers.singular.masking.circuit_evaluation, "evaluate_file", lambda *a, **k: pytest.fail("a current report was rescored"))
    assert evaluations.main(["--figures", str(figures), "--check"]) == 0  # the attack is more, never less
    assert evaluations.main(["--figures", str(figures), "--adversarial", "--check"]) == 0
    short.write_text(short.read_text().replace("checkpoints = [2, 4]", "checkpoints = [2, 5]"))  # other rules: stale
    assert evaluations.main(["--figures", str(figures), "--adversarial", "--check"]) == 1


def test_a_circuit_file_with_the_same_bytes_as_a_scored_one_takes_its_report_under_its_own_name(
        tmp_path, monkeypatch, capsys):
    import helpers.singular.masking.circuit_evaluation

    monkeypatch.setattr(circuit_reports, "SETTINGS", SMALL)
    figures, circuit = figures_with_a_circuit(tmp_path)
    copy = figures / "02_masking-ioi-paper-budget" / "circuits" / circuit.name  # sorts before the first run
    copy.parent.mkdir(parents=True)
    copy.write_bytes(circuit.read_bytes())
    (copy.parents[1] / "summary.json").write_text((circuit.parents[1] / "summary.json").read_text())
    loaded = load_circuit(circuit)  # a third run, same label, other bytes (its scores halved): no twin
    other = save_circuit(dataclasses.replace(loaded, scores={k: v / 2 for k, v in loaded.scores.items()}),
                         figures / "02_masking-ioi-zz-other" / "circuits" / circuit.name)
    (other.parents[1] / "summary.json").write_text(json.dumps(dict(circuit_files=[dict(file=other.name,
                                                                                        sha256=sha256_file(other))])))
    calls, scoring = [], helpers.singular.masking.circuit_evaluation.evaluate_file
    monkeypatch.setattr(helpers.singular.masking.circuit_evaluation, "evaluate_file", lambda path, *a, **k: calls.append(path) or scoring(path, *a, **k))
    assert evaluations.main(["--figures", str(figures)]) == 0
    assert calls == [copy, other]  # the first in run order is scored, its twin is not; other bytes are
    first, second = (circuit_reports.report_path(figures, p.parents[1].name, p) for p in (copy, circuit))
    scored, reused = json.loads(first.read_text()), json.loads(second.read_text())
    assert reused.pop("file") == str(circuit) and reused.pop("same_bytes_as") == scored.pop("file") == str(copy)
    assert reused == scored
    assert second.with_suffix(".txt").read_text() == first.with_suffix(".txt").read_text().replace(str(copy), str(circuit), 1)
    assert second.with_suffix(".txt").read_text().startswith(f"{circuit}: ")
    assert evaluations.main(["--figures", str(figures), "--check"]) == 0  # both current
    assert "the same bytes as" in capsys.readouterr().out

    second.unlink()  # a twin whose report is stale is no twin: it is scored again, then copied
    first.write_text(json.dumps({**json.loads(first.read_text()), "inputs_digest": "stale"}))
    evaluators = {mode: circuit_reports.evaluator_inputs("cpu", mode) for mode in (False, True)}
    circuits = circuit_reports.committed_circuits(figures)
    assert circuit_reports.twin_report(figures, circuits, circuit.parents[1].name, circuit,
                                    sha256_file(circuit), evaluators) is None
    calls.clear()
    assert evaluations.main(["--figures", str(figures)]) == 0
    assert calls == [copy] and json.loads(second.read_text())["same_bytes_as"] == str(copy)


def test_a_twin_report_whose_printed_table_names_another_file_is_not_copied(tmp_path):
    figures = tmp_path / "figures"
    twin_circuit, circuit = (figures / run / "circuits" / "ioi-test.safetensors" for run in ("02_a", "02_b"))
    twin = circuit_reports.report_path(figures, "02_a", twin_circuit)
    twin.parent.mkdir(parents=True)
    twin.write_text(json.dumps(dict(file=str(twin_circuit), kl=0.1)))
    twin.with_suffix(".txt").write_text(f"{figures}/02_c/circuits/ioi-test.safetensors: kl 0.1\n")  # edited by hand
    with pytest.raises(ValueError, match="does not open with its circuit"):
        circuit_reports.copy_twin_report(twin, figures, "02_b", circuit)
    assert not circuit_reports.report_path(figures, "02_b", circuit).exists()
    twin.with_suffix(".txt").write_text(f"{twin_circuit}: kl 0.1\n")  # as the evaluator prints it: copied
    copied = circuit_reports.copy_twin_report(twin, figures, "02_b", circuit)
    assert copied.with_suffix(".txt").read_text() == f"{circuit}: kl 0.1\n"
    assert json.loads(copied.read_text()) == dict(file=str(circuit), kl=0.1, same_bytes_as=str(twin_circuit))


def test_a_circuit_file_that_is_not_the_one_its_run_recorded_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(circuit_reports, "SETTINGS", SMALL)
    figures, circuit = figures_with_a_circuit(tmp_path)
    circuit.write_bytes(circuit.read_bytes() + b" ")
    assert evaluations.main(["--figures", str(figures)]) == 1
    assert "rerun 02_masking-ioi-tiny-llama" in capsys.readouterr().out
    assert not (figures / "evaluations").exists()
    assert evaluations.main(["--figures", str(figures), "--only", "nonesuch"]) == 2


def test_table_pairs_each_number_with_its_random_control():
    area = lambda name, v: dict(ranking=name, cpr_linear=v, cpr_log=v / 10, cmd_linear=1 - v, cmd_log=1 - v / 10)
    report = dict(label="x", n_prompts=90, circuit=dict(kept=1115, kept_fraction=0.1115, kl=0.1, random_kl=1.5,
                                                         accuracy=0.9, random_accuracy=0.2),
                  curve=[dict(percent=50, kept=5000), dict(percent=100, kept=10001)],
                  areas=[area("circuit (signed)", 0.7), area("random (mean of 3)", 0.2)])
    line = circuit_reports.table([report], ["y is stale"]).splitlines()
    row = next(l for l in line if l.startswith("| x |"))
    assert row == ("| x | 11.1 | 90 | 0.100 (1.500) | 0.90 [0.82–0.95] (0.20) | 0.700 (0.200) | 0.070 (0.020) "
                   "| 0.300 (0.800) | 0.930 (0.980) | not attacked |")
    twice = [dict(report, file="figures/run-a/circuits/x.safetensors"), dict(report, file="figures/run-b/circuits/x.safetensors")]
    assert [l.split(" | ")[0] for l in circuit_reports.table(twice).splitlines()[-2:]] == ["| x (run-a)", "| x (run-b)"]
    attacked = dict(report, attack=dict(settings=dict(checkpoints=[20, 160]), survives=False, best_kl=0.2100004))
    assert circuit_reports.table([attacked]).splitlines()[-1].endswith("| breaks 160 steps (0.210) |")
    assert line[-1] == "Not current, so not listed: y is stale"
    zero = dict(report, label="z", circuit=dict(report["circuit"], kl=-0.0000071, random_kl=-0.0004))
    assert "| -0.000" not in circuit_reports.table([zero]) and "| 0.000 (0.000) |" in circuit_reports.table([zero])


def test_the_table_lists_ioi_first_then_gender_then_greater_than():
    area = lambda name: dict(ranking=name, cpr_linear=0.5, cpr_log=0.1, cmd_linear=0.5, cmd_log=0.9)
    reports = [dict(label=label, task=label.split("-")[0], n_prompts=10,
                    circuit=dict(kept=1, kl=0.1, random_kl=1.0, accuracy=0.5, random_accuracy=0.1),
                    curve=[dict(percent=100, kept=10)], areas=[area("circuit"), area("random")])
               for label in ("gender-a", "greater_than-a", "ioi-b", "gender-b", "ioi-a")]
    rows = [line.split(" | ")[0].removeprefix("| ") for line in circuit_reports.table(reports).splitlines()
            if line.startswith("| ") and not line.startswith("| circuit")]
    assert rows == ["ioi-b", "ioi-a", "gender-a", "gender-b", "greater_than-a"]


def test_the_accuracy_interval_is_wilsons_checked_by_hand():
    low, high = circuit_reports.wilson(21, 21)  # all right on 21 prompts: [1 / (1 + z²/21), 1]
    assert high == 1.0 and abs(low - 21 / (21 + 1.959964 ** 2)) < 1e-9
    low, high = circuit_reports.wilson(5, 10)
    assert abs(low - 0.2366) < 1e-4 and abs(high - 0.7634) < 1e-4
    assert circuit_reports.wilson(0, 0) == (0.0, 1.0)


def test_every_committed_circuit_file_has_a_report_of_its_own_bytes():
    figures = ROOT / "figures"
    circuits = circuit_reports.committed_circuits(figures)
    assert len(circuits) >= 15  # five per task of notebook 02, three tasks
    for run, circuit, recorded in circuits:
        report = circuit_reports.report_path(figures, run, circuit)
        assert report.exists(), f"{report} is missing: run python -m helpers.evaluations"
        assert json.loads(report.read_text())["circuit_sha256"] == sha256_file(circuit) == recorded, report
