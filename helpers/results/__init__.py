"""The results: every claim's verdict and what is written from the runs' summaries.

- ``claims``: each claim of both papers, with its verdict rule, computed from the summaries;
- ``conclusions``: each notebook's closing "What we found", rendered from its own summary;
- ``documents``: RESULTS.md, the README's verdict table and the summary figures (``python -m helpers.reproduction``);
- ``paper_models``: RESULTS.md's section on the papers' own models;
- ``circuit_reports``: the committed circuit files scored by the pinned evaluator (``python -m helpers.evaluations``);
- ``workshop_checks``: what the workshop profile's sizes must still show (``python -m helpers.workshop``).

Nothing is imported here.
"""
