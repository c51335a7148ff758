"""Paper 1 (Ahmad et al., NeurIPS 2025): singular directions of augmented matrices, masks over them, circuits,
the head case study and logit receptors."""
