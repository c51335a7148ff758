"""Tested helpers behind the notebooks, one subpackage per role: ``core`` (models, weights, logits, caches, the
reach of a rule), ``singular`` (paper 1), ``tiled`` (paper 2), ``figures`` (style and plots), ``pipeline`` (what
runs, where, and its records) and ``results`` (claims, verdicts, RESULTS.md). The modules at this level are the
commands, thin entry points over those packages: ``evaluate``, ``evaluations``, ``reproduction`` and ``workshop``
(``python -m helpers.<name>``); ``python -m helpers.pipeline`` is the pipeline package's ``__main__``. No package
imports a command."""
