"""Heads and what they write (notebooks 03 and 06): ``attribution`` (direct logit attribution), ``case_study``
(one head's directions by IOI role, the name-mover ranking, σ-matched ablations), ``receptors`` (logit
receptors) and ``steering`` (receptor interventions, their random control, the explorer)."""
