"""The browser test's own packages (Playwright and its two dependencies) live in .browser-deps, apart from
.venv: they change no number, and keeping them out of .venv keeps every run's and every report's record
of the installed packages as it is. `make test` installs them (see the Makefile)."""
import sys
from pathlib import Path

DEPS = Path(__file__).resolve().parents[2] / ".browser-deps"
if DEPS.is_dir() and str(DEPS) not in sys.path:
    sys.path.append(str(DEPS))  # after .venv's packages: nothing there shadows them
