"""The conda file mirrors the pip pins, so both routes install the same tested set."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pins(text: str) -> dict[str, str]:
    return dict(re.findall(r"^\s*(?:-\s*)?([A-Za-z0-9_.\-]+)==([^\s#]+)", text, flags=re.M))


def test_environment_yml_mirrors_requirements():
    requirements = pins((ROOT / "requirements.txt").read_text())
    conda = pins((ROOT / "environment.yml").read_text())
    assert requirements and conda == requirements


def test_lock_agrees_with_requirements():
    lock = pins((ROOT / "requirements.lock").read_text())
    for name, version in pins((ROOT / "requirements.txt").read_text()).items():
        assert lock.get(name, lock.get(name.replace("-", "_"))) == version, name
