"""Paper 2 (Manvi & Tajreen, 2026): tiled-SVD mechanism mounts on the seven linear maps of every layer and
checks A, B, C."""
