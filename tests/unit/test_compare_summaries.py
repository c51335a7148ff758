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
