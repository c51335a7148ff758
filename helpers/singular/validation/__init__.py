"""Verdicts that can come out either way (notebooks 07 and 08): ``verdicts`` (notebook 07's judgement of the
circuits), ``adversary`` (circuits under attack), ``attack_calibration`` (the attack's positive control),
``nonsense`` (tasks with no mechanism), ``planted`` and ``planted_recovery`` (a mechanism planted by weight
surgery, and how well masks recover it)."""
