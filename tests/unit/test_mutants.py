"""The mutant list (tools/mutants.py) stays applicable: a mutant whose original text has moved tests nothing."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_mutant_finds_its_original_text_once_and_names_existing_tests():
    spec = importlib.util.spec_from_file_location("mutants", ROOT / "tools" / "mutants.py")
    mutants = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mutants)
    for index, (path, old, new, tests, what) in enumerate(mutants.MUTANTS):
        assert (ROOT / path).read_text().count(old) == 1, f"mutant [{index}] ({what}): its text is not once in {path}"
        assert old != new, f"mutant [{index}] ({what}) changes nothing"
        assert all((ROOT / test.split("::")[0]).exists() for test in tests.split()), f"mutant [{index}] ({what}): {tests}"
