"""Singular directions of augmented matrices (notebook 01): ``augmented`` (the matrices as factors and their
SVDs), ``identities`` (checked against the model's hook values), ``quantization`` (the noise floor of quantized
weights), ``readout`` (write directions read as tokens)."""
