"""Masks over singular directions and the circuits they give (notebook 02): ``masks`` (applied through hooks),
``references`` (what a masked run is compared with), ``training`` and ``training_time`` (learning the masks and
how long it took), ``alpha_path`` (a warm-started α sweep), ``circuits`` and ``scoring`` (binarised circuits on
held-out prompts), ``ledger`` (the paper's recipe beside ours), ``circuit_files`` and ``circuit_evaluation``
(circuits as files, scored again on fresh prompts)."""
