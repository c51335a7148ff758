"""Tested helpers behind the notebooks: models, weights, augmented matrices and their SVD, figures."""
