"""Figures: one style and a reproducible save, and the plots of each paper's notebooks."""
