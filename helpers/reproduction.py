"""Write RESULTS.md, the README's verdict table and the two summary figures from ``figures/manifest.json``.

    python -m helpers.reproduction        # make figures runs it after the pipeline

What they hold is ``helpers.results.documents``'s.
"""
import sys

from helpers.results.documents import update

if __name__ == "__main__":
    changed = update()
    print("updated: " + (", ".join(changed) if changed else "nothing (text unchanged)") + "; summary figures written",
          file=sys.stderr)
