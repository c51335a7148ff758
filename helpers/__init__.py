"""Tested helpers behind the notebooks, one subpackage per part: ``core`` (models, weights, logits, caches),
``singular`` (paper 1), ``tiled`` (paper 2), ``figures`` (style and plots); ``pipeline`` runs the notebooks."""
