"""tools/compare_summaries.py: rounding is not a difference, anything more is, timings are never compared."""
import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("compare_summaries", Path(__file__).resolve().parents[2] / "tools" /
                                              "compare_summaries.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)


def test_rounding_is_equal_a_real_change_is_not_and_timings_are_set_aside():
    old = {"kl": 0.1234, "rows": [{"rho": 0.91234567}, {"rho": 0.5}], "alpha": 0.00087, "gone": 1,
           "train_seconds": 30.0, "label": "a", "flips": 1.73, "small": 0.0, "missing": float("nan")}
    new = {"kl": 0.12344, "rows": [{"rho": 0.91235}, {"rho": 0.52}], "alpha": 0.0008653, "added": 2,
           "train_seconds": 99.0, "label": "a", "flips": 1.7316, "small": 1.1e-6, "missing": None}
    result = tool.compare(old, new)
    assert result["rounding"] == 5 and result["identical"] == 1  # kl, rho[0], alpha, flips, small; the label
    assert result["nan_as_null"] == 1
    assert [path for path, _, _ in result["different"]] == [".rows[1].rho"]  # 0.02 is more than any rounding
    assert result["only_old"] == [".gone"] and result["only_new"] == [".added"]
    assert result["timing"] == [(".train_seconds", 30.0, 99.0)]


def test_where_a_run_computed_is_shown_and_never_compared():
    old = {"kl": 0.1, "numerics": {"device": "cpu", "threads": 2, "accelerator": None}}
    new = {"kl": 0.1, "numerics": {"device": "cuda", "threads": 16, "accelerator": "NVIDIA H200"}}
    result = tool.compare(old, new)
    assert result["different"] == [] and result["identical"] == 1
    assert sorted(path for path, _, _ in result["records"]) == [".numerics.accelerator", ".numerics.device",
                                                                 ".numerics.threads"]
    assert tool.compare({"x": {"numerics": 1}}, {"x": {"numerics": 2}})["different"]  # only the top-level record


RULES = """
[[rule]]
name = "rho"
runs = ["04_*"]
paths = [".check_c[].rho_*"]
absolute = 1e-3
why = "drift 2.4e-4"

[[rule]]
name = "sizes"
runs = ["04_*", "05_*"]
paths = [".dose[].size"]
relative = 5e-3
why = "drift 0.21 %"
"""


def rules(tmp_path, text=RULES):
    path = tmp_path / "tolerance.toml"
    path.write_text(text)
    return tool.load_tolerances(path)


def test_a_declared_tolerance_admits_its_kind_of_number_up_to_its_bound_and_nothing_else(tmp_path):
    within = tool.tolerance_of(rules(tmp_path), "04_tiled_svd-gemma-3-270m")
    old = {"check_c": [{"rho_tile": 0.51234, "rho_random": 0.51234, "n": 3}], "dose": [{"size": 2.00001}],
           "rho_tile": 0.51234, "verdict": "pass"}
    new = {"check_c": [{"rho_tile": 0.51324, "rho_random": 0.51345, "n": 4}], "dose": [{"size": 2.01}],
           "rho_tile": 0.51324, "verdict": "fail"}
    result = tool.compare(old, new, within=within)
    assert result["tolerated"] == {"rho": 1, "sizes": 1}  # 9e-4 ≤ 1e-3; 0.00999 ≤ 5e-3 × 2.01
    assert [p for p, _, _ in result["different"]] == [
        ".check_c[0].n",  # a count: no rule covers it
        ".check_c[0].rho_random",  # 1.11e-3: just outside the bound
        ".rho_tile",  # the same name at another path: not covered
        ".verdict"]  # strings must agree exactly
    elsewhere = tool.compare(old, new, within=tool.tolerance_of(rules(tmp_path), "06_steering"))
    assert elsewhere["tolerated"] == {}  # another run: no rule applies


def test_an_exempt_rule_sets_identifiers_aside_and_a_bound_never_admits_a_string(tmp_path):
    declared = rules(tmp_path, RULES + '[[rule]]\nname = "digests"\nruns = ["04_*"]\npaths = [".files[].sha256"]\n'
                                       'exempt = true\nwhy = "names bytes"\n')
    within = tool.tolerance_of(declared, "04_x")
    result = tool.compare({"files": [{"sha256": "aa"}], "check_c": [{"rho_tile": "pass"}]},
                          {"files": [{"sha256": "bb"}], "check_c": [{"rho_tile": "fail"}]}, within=within)
    assert result["tolerated"] == {"digests": 1}
    assert [p for p, _, _ in result["different"]] == [".check_c[0].rho_tile"]


def test_a_tolerance_file_with_a_typo_or_no_bound_is_refused(tmp_path):
    import pytest

    with pytest.raises(ValueError, match=r"unknown keys \['absolut'\]"):
        rules(tmp_path, RULES.replace("absolute = 1e-3", "absolut = 1e-3"))
    with pytest.raises(ValueError, match="positive absolute or relative bound"):
        rules(tmp_path, RULES.replace("absolute = 1e-3", "absolute = 0.0"))
    with pytest.raises(ValueError, match="an exempt rule has no bound"):
        rules(tmp_path, RULES.replace("absolute = 1e-3", "absolute = 1e-3\nexempt = true"))
    with pytest.raises(ValueError, match=r"lacks \['why'\]"):
        rules(tmp_path, RULES.replace('why = "drift 0.21 %"', ""))


def test_every_declared_device_tolerance_covers_numbers_of_the_committed_summaries():
    import json
    import re

    root = Path(__file__).resolve().parents[2]
    declared = tool.load_tolerances(root / "data" / "device_tolerance.toml")

    def paths(value, path=""):
        if isinstance(value, dict):
            for key, item in value.items():
                yield from paths(item, f"{path}.{key}")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                yield from paths(item, f"{path}[{index}]")
        elif not isinstance(value, bool) and value is not None:
            yield path  # numbers, and the strings an exempt rule covers

    covered = {rule.name: 0 for rule in declared}
    for summary in (root / "figures").glob("*/summary.json"):
        for path in set(paths(json.loads(summary.read_text()))):
            rule = next((r for r in declared if r.covers(summary.parent.name, path)), None)
            if rule is not None:
                covered[rule.name] += 1
    assert all(covered.values()), f"rules that cover no number (a mistyped pattern?): {covered}"
    assert not any(re.search(r"seconds|threads|alpha|seed|steps", p) for r in declared for p in r.paths)


def test_a_change_of_weights_or_tokenizer_is_another_model_and_older_summaries_are_not():
    base = {"model": "m", "weights_sha256": "a" * 64, "tokenizer_sha256": "b" * 64, "kl": 0.1}
    assert tool.model_change(base, dict(base, kl=0.2)) == []
    assert tool.model_change(base, dict(base, tokenizer_sha256="c" * 64)) == ["tokenizer_sha256 bbbbbbbbbbbb… → cccccccccccc…"]
    assert [c.split()[0] for c in tool.model_change(base, dict(base, weights_sha256="d" * 64, tokenizer_sha256="e" * 64))] \
        == ["weights_sha256", "tokenizer_sha256"]
    older = {"model": "m", "kl": 0.1}  # written before runs recorded fingerprints: compared as before
    assert tool.model_change(older, base) == [] and tool.model_change(base, older) == []
