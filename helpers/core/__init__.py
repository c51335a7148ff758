"""What both papers stand on: the model registry and loading, one weight accessor, logits and the lens, verified caches."""
