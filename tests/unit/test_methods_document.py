"""The methods document lives in the repository, and every citation of it names a section it has."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITATION = re.compile(r"docs/methods\.md (§[0-9.,–§ ]+)")


def sections() -> set[str]:
    text = (ROOT / "docs" / "methods.md").read_text()
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", text, flags=re.M))


def citations() -> list[tuple[str, str]]:
    files = subprocess.run(["git", "ls-files", "helpers", "notebooks", "data", "README.md", "benchmarks"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    found = []
    for name in files:
        for match in CITATION.finditer((ROOT / name).read_text()):
            found += [(name, number.rstrip(".")) for number in re.findall(r"\d+(?:\.\d+)?", match.group(1))]
    return found


def test_every_cited_section_of_the_methods_document_exists():
    have = sections()
    assert {"0", "1.1", "1.5", "2.4", "3"} <= have
    cited = citations()
    assert len(cited) >= 20  # the package's docstrings and the notebooks cite it
    missing = sorted({(name, number) for name, number in cited if number not in have})
    assert not missing, f"citations of sections docs/methods.md does not have: {missing}"


def test_nothing_in_the_repository_points_outside_it_for_the_methods():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    pointing = [name for name in files if not name.startswith("figures/") and name != "tests/unit/test_methods_document.py"
                and name.endswith((".py", ".ipynb", ".md", ".toml"))
                and re.search(r"(?<!docs/)METHODS\.md|\.\./shared", (ROOT / name).read_text())]
    assert pointing == []


def test_every_relative_link_in_the_readme_names_a_file_in_the_repository():
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#:]+)\)", text)
    assert "docs/methods.md" in links
    assert [link for link in links if not (ROOT / link).exists()] == []
