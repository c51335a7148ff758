"""tools/cell_times.py: each code cell's papermill duration, markdown and unexecuted cells left out."""
import importlib.util
import json
from pathlib import Path

spec = importlib.util.spec_from_file_location("cell_times", Path(__file__).resolve().parents[2] / "tools" / "cell_times.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)


def executed(tmp_path, durations) -> Path:
    cells = [{"cell_type": "markdown", "metadata": {"papermill": {"duration": 9.0}}, "source": ["# title"]}]
    for i, seconds in enumerate(durations):
        meta = {} if seconds is None else {"papermill": {"duration": seconds}}
        cells.append({"cell_type": "code", "metadata": meta, "source": [f"# cell {i}\n", f"step_{i}()\n"]})
    path = tmp_path / "build" / "notebooks" / "run-a.ipynb"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"cells": cells}))
    return path


def test_durations_of_code_cells_are_read_with_their_first_line(tmp_path):
    rows = tool.cell_times(executed(tmp_path, [2.5, None, 40.0]))
    assert rows == [dict(index=1, seconds=2.5, first_line="step_0()"), dict(index=3, seconds=40.0, first_line="step_2()")]


def test_the_slowest_cells_come_first_and_a_missing_run_is_an_error(tmp_path, capsys):
    executed(tmp_path, [2.5, 40.0, 7.5])
    assert tool.main(["--build", str(tmp_path / "build"), "--top", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "run-a: 50 s in 3 code cells"
    assert "step_1()" in lines[1] and "80.0 %" in lines[1] and "step_2()" in lines[2] and len(lines) == 3
    assert tool.main(["nope", "--build", str(tmp_path / "build")]) == 1
    assert "no executed copy" in capsys.readouterr().err
