"""Paper 1 (Ahmad et al., NeurIPS 2025): singular directions of augmented matrices, masks over them, circuits,
the head case study and logit receptors, in four parts over the tasks they share (``tasks``):

- ``directions``: augmented matrices, their SVDs and identities, the quantization noise floor, the readout (01);
- ``masking``: masks over the directions, their training and the circuits they give, scored and kept as files (02);
- ``heads``: one head studied by role, direct logit attribution, logit receptors and steering (03, 06);
- ``validation``: circuits attacked and judged, nonsense tasks, and planted mechanisms with known answers (07, 08).
"""
