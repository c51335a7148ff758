"""Mutation check: break one core rule at a time, run the tests that name it, and say whether they caught it.

    python tools/mutants.py            # every mutant (about 10 minutes on 2 cores)
    python tools/mutants.py 3 7        # only mutants 3 and 7

Each mutant is a plausible bug (an inverted verdict, a swapped answer, a missing term). A mutant the tests
do not catch is a test that cannot fail: add the test. Files are restored after each mutant, even on
Ctrl-C; the script refuses to run on uncommitted changes to helpers/ so nothing real is overwritten.
"""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

MUTANTS = [  # (file, original text, mutated text, tests to run, what the mutant breaks)
 ("helpers/singular/masks.py", 'ref = {k: ("zero" if k == "qk" else "corrupted") for k in KINDS}', 'ref = {k: ("corrupted" if k == "qk" else "zero") for k in KINDS}', "tests/unit/test_masks.py", "paper rule: QK/OV references swapped"),
 ("helpers/singular/masks.py", "refs[kind] = (a * weights).sum((0, 1)) / weights.sum()", "refs[kind] = a.mean((0, 1))", "tests/unit/test_masks.py", "mean reference over padding too"),
 ("helpers/singular/circuits.py", 'flat[torch.randperm(v.numel(), generator=generator, device="cpu")[: int(v.sum())]] = 1.0', 'flat[torch.randperm(v.numel(), generator=generator, device="cpu")[: int(v.sum()) + 1]] = 1.0', "tests/unit/test_circuits.py", "random control keeps one direction more"),
 ("helpers/singular/tasks.py", "        io_ids.append(token_id(tok, \" \" + io))\n        s_ids.append(token_id(tok, \" \" + s))", "        io_ids.append(token_id(tok, \" \" + s))\n        s_ids.append(token_id(tok, \" \" + io))", "tests/unit/test_tasks.py", "IOI answer = S instead of IO"),
 ("helpers/singular/receptors.py", "sign = torch.where(is_a, 1.0, -1.0)", "sign = torch.where(is_a, -1.0, 1.0)", "tests/unit/test_receptors.py", "receptor score sign flipped"),
 ("helpers/singular/receptors.py", "pooled = torch.sqrt(0.5 * (a[is_a].var(0) + a[~is_a].var(0))).clamp_min(1e-12)", "pooled = torch.sqrt(a[is_a].var(0)).clamp_min(1e-12)", "tests/unit/test_receptors.py", "d' with one class's std only"),
 ("helpers/singular/steering.py", "out[name] = noise / noise.norm(dim=-1, keepdim=True) * vectors.double().norm(dim=-1, keepdim=True)", "out[name] = noise * vectors.double().norm(dim=-1, keepdim=True)", "tests/unit/test_steering.py", "random control not equal-norm"),
 ("helpers/tiled/corpus.py", 'out["fit" if seq % 2 == 0 else "score"]', 'out["fit" if seq % 3 == 0 else "score"]', "tests/unit/test_corpus.py", "fit/score halves uneven"),
 ("helpers/tiled/tiling.py", "U, S, _ = torch.linalg.svd(W[:, start:end], full_matrices=False)", "U, S, _ = torch.linalg.svd(W[:, start:end + 1], full_matrices=False)", "tests/unit/test_tiling.py", "tiles overlap by one column"),
 ("helpers/core/weights.py", "W_folded = norm.gain[:, None] * W", "W_folded = W", "tests/unit/test_weights.py tests/unit/test_augmented.py", "norm gain not folded"),
 ("helpers/singular/readout.py", "zip(logits.topk(k).indices, (-logits).topk(k).indices)", "zip(logits.topk(k).indices, logits.topk(k).indices)", "tests/unit/test_readout.py", "suppressed tokens = promoted ones"),
 ("helpers/core/cache.py", "        if expected == actual:\n            return actual", "        if True:\n            return actual", "tests/unit/test_cache.py", "recorded sha256 not compared"),
 ("helpers/core/models.py", "    if digest != spec.gguf_sha256:", "    if False:", "tests/unit/test_models.py", "GGUF sha256 not checked"),
 ("helpers/pipeline.py", "    for item in sorted({*(runs_file.parent / i for i in run.inputs), *parameter_paths(params, notebook.parent)}):", "    for item in sorted(parameter_paths(params, notebook.parent)):", "tests/notebooks/test_pipeline.py", "declared inputs left out of the fingerprint"),
 ("helpers/pipeline.py", "    digest.update(json.dumps(environment, sort_keys=True).encode())", "    pass", "tests/notebooks/test_pipeline.py", "packages/threads left out of the fingerprint"),
 ("helpers/pipeline.py", "        if records.pop(run.name, None) is not None:", "        if records.get(run.name, None) is None:", "tests/notebooks/test_pipeline.py", "manifest record kept while a run reruns"),
 ("helpers/notebook_job.py", "    staging = Path(tempfile.mkdtemp(prefix=f\".tmp-{job.run}-\", dir=job.staging_parent))", "    staging = Path(job.staging_parent) / job.run; staging.mkdir(parents=True, exist_ok=True)", "tests/notebooks/test_pipeline.py", "run writes straight into the old folder"),
 ("helpers/pipeline.py", "        if not _fits(value, declared[name]):", "        if False:", "tests/notebooks/test_pipeline.py", "parameter types not checked"),
 ("helpers/notebook_job.py", "    index = executed_index - 1 if executed_index > params else executed_index", "    index = executed_index", "tests/notebooks/test_pipeline.py", "error cell indexes papermill's copy"),
 ("helpers/tiled/sites.py", "or not 0 <= layer < model.n_layers]", "or not -model.n_layers <= layer < model.n_layers]", "tests/unit/test_bad_input.py", "negative layers accepted"),
 ("helpers/singular/quantization.py", "difference = svd_of_product(torch.cat([A2, A], -1), torch.cat([B2, -B], -1))", "difference = svd_of_product(torch.cat([A2, A], -1), torch.cat([B2, B], -1))", "tests/unit/test_quantization.py", "noise floor of A2B2 + AB instead of the difference"),
 ("helpers/core/linalg.py", "sign = torch.sign(torch.gather(M, -2, M.abs().argmax(dim=-2, keepdim=True)))", "sign = -torch.sign(torch.gather(M, -2, M.abs().argmax(dim=-2, keepdim=True)))", "tests/unit/test_augmented.py", "canonical sign makes the largest entry negative"),
 ("helpers/singular/attribution.py", "out[layer] = torch.einsum(\"nhd,nd->nh\", heads / final_scale[:, None], contrast).mean(0)", "out[layer] = torch.einsum(\"nhd,nd->nh\", heads, contrast).mean(0)", "tests/unit/test_attribution.py", "DLA without the final norm's scale"),
 ("helpers/singular/heads.py", "    distance[layer, head] = float(\"inf\")", "    pass", "tests/unit/test_heads.py", "controls may come from the studied head"),
 ("helpers/singular/heads.py", "beyond_controls=abs(metric - base[\"metric\"]) > float", "beyond_controls=abs(metric - base[\"metric\"]) < float", "tests/unit/test_heads.py", "beyond-controls verdict inverted"),
 ("helpers/tiled/verdicts.py", "    return bool(rho >= t[\"rho\"] or jaccard >= t[\"jaccard\"])", "    return not bool(rho >= t[\"rho\"] or jaccard >= t[\"jaccard\"])", "tests/unit/test_checks.py", "C1 verdict inverted"),
 ("helpers/tiled/verdicts.py", "A2=bool(tile >= columns - t[\"a2_tolerance\"])", "A2=bool(tile >= columns + t[\"a2_tolerance\"])", "tests/unit/test_checks.py", "A2 tolerance with the wrong sign"),
 ("helpers/singular/tasks.py", "        correct.append(he if is_male else she)", "        correct.append(he)", "tests/unit/test_tasks.py", "every gender answer ' he'"),
 ("helpers/singular/tasks.py", "        corrupt.append(template.format(NAME=other))", "        corrupt.append(template.format(NAME=name))", "tests/unit/test_tasks.py", "gender corruption keeps the name"),
 ("helpers/singular/augmented.py", "Uc, S, Vch = torch.linalg.svd(Ra @ Rb.transpose(-1, -2), full_matrices=False)", "Uc, S, Vch = torch.linalg.svd(Ra @ Rb.transpose(-1, -2))", "tests/unit/test_augmented.py", "square-core SVD (wide factors crash)"),
 ("helpers/pipeline.py", "    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))", "    pass", "tests/notebooks/test_pipeline.py", "SIGTERM kills without clean-up (staging folder left)"),
 ("helpers/singular/circuits.py", 'return partial.sort_values("kl", kind="stable").iloc[0].to_dict()', 'return partial.sort_values("kl", kind="stable").iloc[-1].to_dict()', "tests/unit/test_selection_rules.py", "fallback circuit: the highest KL instead of the lowest"),
 ("helpers/singular/circuits.py", "    return inside, float(mass[~boxed].mean())", "    return inside, float(mass.mean())", "tests/unit/test_selection_rules.py", "other heads' mass includes the boxed heads"),
 ("helpers/singular/heads.py", "    if given is not None:\n        try:", "    if given is not None and False:\n        try:", "tests/unit/test_selection_rules.py", "the head parameter ignored"),
 ("helpers/singular/receptors.py", "    coefficients, footprint, is_a = measured(score)", "    coefficients, footprint, is_a = measured(fit)", "tests/unit/test_selection_rules.py", "receptors rescored on the prompts they were found on"),
 ("helpers/summaries.py", "return round(value, 5) if abs(value) >= 1e-3", "return round(value, 4) if abs(value) >= 1e-3", "tests/notebooks/test_pipeline.py", "summaries rounded to 4 decimals"),
 ("helpers/notebook_job.py", "        text = text.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1])", "        pass", "tests/notebooks/test_pipeline.py", "executed copy keeps the staging path"),
 ("helpers/core/architectures.py", 'Architecture("gemma3_text", "rms", True,', 'Architecture("gemma3_text", "rms", False,', "tests/unit/test_weights.py", "Gemma-3's norm gain read as w, not 1 + w"),
 ("helpers/core/logits.py", "    if model.arch.centred if centre is None else centre:\n        u = u - u.mean(-1, keepdim=True)", "    if False:\n        u = u - u.mean(-1, keepdim=True)", "tests/unit/test_logits.py tests/unit/test_readout.py", "lens never centres (LayerNorm models)"),
 ("helpers/tiled/tiling.py", "    tiles = tile_svd(W, spec.width, max((spec.k, *spec.coverage_ks)))\n    tile = tiles.per_tile(spec.k)", "    tiles = tile_svd(W, spec.width, max((spec.k, *spec.coverage_ks)))\n    tile = tiles.per_tile(1)", "tests/unit/test_tiling.py", "tile set built at k = 1, not the spec's k"),
 ('helpers/singular/masks.py', 'pos = {k: ("all" if k == "qk" else "answer") for k in KINDS}', 'pos = {k: "all" for k in KINDS}', 'tests/unit/test_ledger.py', 'paper rule: OV/MLP ablated at every position'),
 ('helpers/singular/masks.py', 'return cls({name: (v >= threshold).float()', 'return cls({name: (v > threshold).float()', 'tests/unit/test_ledger.py', "paper's kept rule strict (m > 1e-3)"),
 ('helpers/singular/ledger.py', 'ledger_row(paper_evaluator, paper_kept, control_seeds, scored=FixedMasks.soft(paper_masks))', 'ledger_row(paper_evaluator, paper_kept, control_seeds)', 'tests/unit/test_ledger.py', 'ledger row 1 binarised instead of soft'),
 ('helpers/tiled/verdicts.py', 'early = max(lifts[: 2 if residual and not effective else 3])', 'early = max(lifts[: 3 if residual and not effective else 2])', 'tests/unit/test_judges.py', 'released B1 window sizes swapped'),
 ('helpers/tiled/judges.py', 'return round(float(x), 4) if rounding', 'return round(float(x), 3) if rounding', 'tests/unit/test_judges.py', 'released rounding to 3 decimals'),
 ('helpers/tiled/judges.py', 'w = gain - 1.0 if model.arch.gain_one_plus else gain', 'w = gain', 'tests/unit/test_judges.py', "released lens uses the model's gain 1 + w"),
 ('helpers/tiled/sweep.py', '            if bool(new["pass"]) or _checks_passed(new) >= _checks_passed(best.loc[index]):', '            if bool(new["pass"]):', 'tests/unit/test_judges.py', 'width search keeps the first trial when none passes'),
 ('helpers/tiled/corpus.py', '        paragraphs += (_wikitext_paragraphs(text.splitlines(), dropped) if is_wikitext(f, text)\n                       else _paragraphs(text, dropped))', '        paragraphs += _paragraphs(text, dropped)', 'tests/unit/test_corpus.py', 'WikiText files read as blank-line paragraphs'),
 ('helpers/singular/heads.py', 'and io >= criterion["io_over_s"] * s', 'and io >= s', 'tests/unit/test_heads.py', 'name mover: IO attention only above S'),
 ('helpers/singular/heads.py', '"not specific (the control head passes too)" if theirs["supported"] else "supported"', '"supported"', 'tests/unit/test_heads.py', 'control head ignored'),
 ('helpers/singular/scoring.py', 'key = flat.abs() if ranking == "absolute" else flat', 'key = flat if ranking == "absolute" else flat.abs()', 'tests/unit/test_circuit_files.py', 'signed and absolute rankings swapped'),
 ('helpers/singular/scoring.py', 'out[f"cmd_{axis}"] = area(p, (1 - f).abs(), axis, at_zero=1.0)', 'out[f"cmd_{axis}"] = area(p, (1 - f).abs(), axis, at_zero=0.0)', 'tests/unit/test_circuit_files.py', 'CMD starts at |1 − f(0)| = 0'),
 ('helpers/singular/scoring.py', 'faithfulness=(metric - empty) / (full - empty)', 'faithfulness=metric / full', 'tests/unit/test_circuit_files.py', 'faithfulness not relative to the empty circuit'),
 ('helpers/singular/circuit_files.py', '    if saved["weights_sha256"] != model.weights_sha256:', '    if False:', 'tests/unit/test_circuit_files.py', 'circuit loaded on other weights'),
 ('helpers/evaluate.py', '    keep = [i for i, prompt in enumerate(task.prompts) if prompt not in used]', '    keep = list(range(len(task)))', 'tests/unit/test_circuit_files.py', 'evaluator scores prompts the circuit was trained on'),
 ('helpers/evaluations.py', '    parts = [json.dumps(settings(adversarial), sort_keys=True).encode()]', '    parts = []', 'tests/unit/test_evaluations.py', 'evaluator settings left out of a report digest'),
 ('helpers/evaluations.py', '    if sha != recorded_sha256:', '    if False:', 'tests/unit/test_evaluations.py', "circuit file not checked against the sha256 its run recorded"),
 ('helpers/singular/readout.py', 'for row, read in zip(rows, tokens)', 'for row, read in zip(rows, tokens[::-1])', 'tests/unit/test_readout.py', 'read-outs paired with the wrong directions'),
 ('helpers/singular/identities.py', 'relative_error((x @ qk.U * qk.S[:, None, :])', 'relative_error((x @ qk.U)', 'tests/unit/test_augmented.py', 'QK identity through the SVD without σ'),
 ('helpers/tiled/steer.py', 'self._started_at(site.layer, start[i_at, :length])', 'self._started_at(site.layer, start[: len(i), :length])', 'tests/unit/test_checks.py', 'cached residual rows paired with the wrong texts'),
 ('helpers/tiled/steer.py', 'return forwards_replaced({self.blocks[i]: cached if i == layer - 1 else bypass for i in range(layer)})', 'return forwards_replaced({self.blocks[i]: bypass for i in range(layer)})', 'tests/unit/test_checks.py', 'steered forward starts from the embeddings, not the cached residual'),
 ('helpers/tiled/steer.py', '    if steering.model is not model or steering.texts is not texts:', '    if False:', 'tests/unit/test_checks.py', 'a Steering of other texts accepted'),
 ('helpers/tiled/steer.py', '    k -= k.mean()\n', '', 'tests/unit/test_checks.py', 'batched Spearman ρ without centring the ranks'),
 ('helpers/tiled/steer.py', '.scatter_add_(\n        1, draws, torch.ones(draws.shape, dtype=torch.float64, device="cpu"))', '+ 1', 'tests/unit/test_checks.py', 'bootstrap means over every text instead of the resampled ones'),
 ('helpers/singular/masks.py', '                    ref = ref[where][:, None]', '                    ref = ref[:, :1]', 'tests/unit/test_masks.py', 'answer-position masks read the reference at position 0'),
 ('helpers/singular/masks.py', '        return value.index_put(where, value[where] + change[:, 0])', '        return value.index_put((where[0], torch.zeros_like(where[1])), value[where] + change[:, 0])', 'tests/unit/test_masks.py', 'answer-position change written at position 0'),
 ('helpers/singular/circuits.py', '        digest.update(block.cpu().numpy().tobytes())', '        pass', 'tests/unit/test_circuits.py', "kept evaluations keyed without the circuit's values"),
 ('helpers/singular/masks.py', '                a = x @ P + c\n', '                a = x @ P\n', 'tests/unit/test_masks.py', 'factored MLP map without its bias'),
 ('helpers/core/forwards.py', '                del vars(module)["forward"]  # the class\'s own forward again', '                pass', 'tests/unit/test_masks.py tests/unit/test_forwards.py', 'factored MLP maps left in the model after a masked run'),
 ('helpers/core/forwards.py', '                vars(module)["forward"] = own', '                del vars(module)["forward"]', 'tests/unit/test_forwards.py', 'an instance forward set before the block is dropped on leaving it'),
 ('helpers/singular/masks.py', 'if rule.positions[kind] == "all" and self._linear(layer, kind) is not None]', 'if self._linear(layer, kind) is not None]', 'tests/unit/test_masks.py', 'maps masked at the answer only factored at every position'),
 ('helpers/singular/training.py', '        record["maps"] = maps', '        pass', 'tests/unit/test_masks.py', 'masks trained through hooks and factored maps share a cache key'),
 ("helpers/singular/alpha_path.py", "    masks.load_state_dict(start.state_dict())\n    began", "    began", "tests/unit/test_alpha_path.py", "warm training starts from the initial masks, not the lighter α's"),
 ("helpers/singular/alpha_path.py", "dict(start=logits, warm=own)", "dict(warm=own)", "tests/unit/test_alpha_path.py", "warm cache key without the masks it started from"),
 ("helpers/singular/alpha_path.py", "        previous, previous_alpha = masks, alpha", "        previous, previous_alpha = (previous or masks), (previous_alpha or alpha)", "tests/unit/test_alpha_path.py", "every α warm-started from the lightest, not the one before"),
 ("helpers/singular/alpha_path.py", "    kl_allowed = max(tolerance[\"kl_absolute\"], tolerance[\"kl_relative\"] * fresh[\"kl\"])", "    kl_allowed = tolerance[\"kl_relative\"] * fresh[\"kl\"]", "tests/unit/test_alpha_path.py", "KL tolerance without its absolute floor"),
 ("helpers/singular/alpha_path.py", "    kept_gap = 100 * abs(", "    kept_gap = abs(", "tests/unit/test_alpha_path.py", "kept gap as a fraction against a tolerance in points"),
 ("helpers/singular/alpha_path.py", "    masks.load_state_dict(start.state_dict())\n    began", "    masks = start\n    began", "tests/unit/test_alpha_path.py", "warm training trains the lighter α's masks in place"),
 ("helpers/singular/alpha_path.py", "    if start.parametrisation != config.parametrisation:", "    if False:", "tests/unit/test_alpha_path.py", "warm start from masks of another parametrisation accepted"),
 ("helpers/tiled/statistics.py", "    good = (info == 0) & (diagonal.min(-1).values > CHOLESKY_PIVOT_RATIO * diagonal.max(-1).values)", "    good = info == 0", "tests/unit/test_statistics.py", "ill-conditioned coverage systems kept on Cholesky"),
 ("helpers/tiled/statistics.py", "c[~good] = cpu_lstsq(G[~good], b[~good][..., None])[..., 0]", "c[~good] = torch.cholesky_solve(b[~good][..., None], L[~good])[..., 0]", "tests/unit/test_statistics.py", "coverage systems Cholesky rejects solved by Cholesky anyway"),
 ("helpers/tiled/steer.py", "    bits = (values + 0.0).contiguous()", "    bits = values.contiguous()", "tests/unit/test_checks.py", "rank order puts -0.0 below +0.0"),
 ("helpers/tiled/steer.py", "    key = bits ^ ((bits >> 31) | -2 ** 31)", "    key = bits ^ -2 ** 31", "tests/unit/test_checks.py", "rank order keeps negatives' bit order (larger magnitude ranked higher)"),
 ("helpers/tiled/steer.py", 'order[row] = by_low[np.argsort(high[row][by_low], kind="stable")]', 'order[row] = by_low[np.argsort(high[row][by_low], kind="quicksort")]', "tests/unit/test_checks.py", "rank order's second radix pass not stable"),
 ("helpers/workshop.py", 'r["random_kl"] >= criteria["circuit_ratio"] * r["kl"])', 'r["kl"] >= criteria["circuit_ratio"] * r["random_kl"])', "tests/unit/test_workshop.py", "workshop circuit criterion inverted"),
 ("helpers/workshop.py", "counts[label] = counts.get(label, 0) + round(rate * n_layers)", "counts[label] = counts.get(label, 0) + rate", "tests/unit/test_workshop.py", "B1 passes summed as rates, not site-layers"),
 ("helpers/tiled/statistics.py", "sample.sequences[i][: max(positions[i]) + 1]", "sample.sequences[i][: max(positions[i])]", "tests/unit/test_statistics.py", "corpus pass cuts each sequence one token before its last sampled one"),
 ("helpers/tiled/statistics.py", "order = sorted(positions, key=lambda sequence: (max(positions[sequence]), sequence))", "order = sorted(positions)", "tests/unit/test_statistics.py", "corpus-pass batches by index, not by length"),
 ("helpers/tiled/steer.py", "    texts = sorted(range(len(last)), key=lambda i: (int(last[i]), i))", "    texts = list(range(len(last)))", "tests/unit/test_checks.py", "steered forwards batch texts by index, not by length"),
 ("helpers/tiled/steer.py", "            length = int(last[i].max()) + 1", "            length = last.max() + 1", "tests/unit/test_checks.py", "steered forwards run every text to the longest one's length"),
 ("helpers/tiled/steer.py", "            out[d_at, i_at] = logits - base[i_at]", "            out[d_at, i_at] = logits - base[d_at]", "tests/unit/test_checks.py", "steered change minus another text's base logits"),
 ("benchmarks/tiled_svd.py", "model.n_layers - plan.site.layer, len(rows))", "model.n_layers - plan.site.layer + 1, len(rows))", "tests/unit/test_benchmark_work.py", "work floor: a steered forward counted from the block before the steered one"),
 ("helpers/tiled/corpus.py", '    return text.split("\\n\\n")', "    return python_docs_from_interpreter(dropped)", "tests/unit/test_corpus.py", "python-docs read from the interpreter's pydoc_data, not the pinned file"),
 ("helpers/tiled/corpus.py", "    if digest != PYTHON_DOCS_SHA256:", "    if False:", "tests/unit/test_corpus.py", "python-docs file not checked against its pinned sha256"),
 ("benchmarks/tiled_svd.py", 'mounts = min(RELEASED_MOUNTS, plan.sets["tile"].U.shape[1])', "mounts = RELEASED_MOUNTS", "tests/unit/test_benchmark_work.py", "work floor: released mounts not capped by the site's tiles"),
 ("helpers/singular/references.py", "    return (log_p_full.exp() * (log_p_full - log_q)).sum(-1)", "    return (log_q.exp() * (log_q - log_p_full)).sum(-1)", "tests/unit/test_rule_boundaries.py", "KL(p_masked ‖ p_full) in place of KL(p_full ‖ p_masked)"),
 ("helpers/singular/tasks.py", "        train, held_out = self.subset(order[:cut]), self.subset(order[cut:])", "        train, held_out = self.subset(order[:cut]), self.subset(order[cut - 1:])", "tests/unit/test_tasks.py", "held-out half shares one prompt with the training half"),
 ("helpers/tiled/verdicts.py", 'lifts[-1] >= peak - t["last_within"]', 'lifts[-1] >= peak - 2 * t["last_within"]', "tests/unit/test_rule_boundaries.py", "B1's last-point tolerance doubled"),
 ("helpers/singular/tasks.py", "    drawn = [rng.sample(pool, count) for pool, count in zip(pools, ((n + 1) // 2, n // 2))]", "    drawn = [[rng.choice(pool) for _ in range(count)] for pool, count in zip(pools, ((n + 1) // 2, n // 2))]", "tests/unit/test_tasks.py", "gender prompts drawn with replacement (repeats)"),
 ("helpers/singular/tasks.py", "        if text in clean:", "        if False:", "tests/unit/test_tasks.py", "greater-than keeps a repeated draw"),
 ("helpers/singular/heads.py", "        by_sigma = usable[torch.sort(sigma[usable].double(), descending=True, stable=True).indices]", "        by_sigma = usable", "tests/unit/test_selection_rules.py", "studied directions: tied logits not ordered by σ"),
 ("helpers/singular/heads.py", "candidate=bool(io > s and dla > 0)", "candidate=bool(io >= s and dla > 0)", "tests/unit/test_heads.py", "a head attending IO and S equally counts as a candidate"),
 ("helpers/singular/heads.py", "    ratios = io[draws].mean(1) / s[draws].mean(1)", "    ratios = (io[draws] / s[draws]).mean(1)", "tests/unit/test_heads.py", "bootstrap of the mean ratio, not of the ratio of means"),
 ("helpers/singular/heads.py", 'keyed.sort_values(["distance", "size", "layer", "head"], kind="stable")', 'keyed.sort_values(["distance"], kind="stable")', "tests/unit/test_heads.py", "control head: equal mask masses taken in table order"),
 ("helpers/singular/receptors.py", '    eligible = (stats["separation"] >= min_separation) & (stats["score"] > 0)', '    eligible = (stats["separation"] > min_separation) & (stats["score"] > 0)', "tests/unit/test_rule_boundaries.py", "receptor separation strictly above the minimum"),
 ("helpers/singular/receptors.py", '    eligible = (stats["separation"] >= min_separation) & (stats["score"] > 0)', '    eligible = (stats["separation"] >= min_separation) & (stats["score"] >= 0)', "tests/unit/test_rule_boundaries.py", "a receptor of score 0 (writes nothing on the contrast) accepted"),
 ("helpers/singular/circuits.py", '    return None if ok.empty else ok.sort_values(["kept", "kl"], kind="stable")', '    return None if ok.empty else ok.sort_values("kept")', "tests/unit/test_rule_boundaries.py", "reported circuit: of two equal sizes, the first listed, not the lower KL"),
 ("helpers/singular/heads.py", '    return table.sort_values(["attribution", "layer", "head"], ascending=[False, True, True], kind="stable",', '    return table.sort_values(["attribution"], ascending=[False],', "tests/unit/test_heads.py", "candidates of equal DLA in table order"),
 ('helpers/claims.py', 'return REPRODUCED if max(worst_errors) < rules["identities"]["max_relative_error"] else NOT_REPRODUCED', 'return REPRODUCED if max(worst_errors) <= rules["identities"]["max_relative_error"] else NOT_REPRODUCED', 'tests/unit/test_claims.py', 'identity bound not strict'),
 ('helpers/claims.py', 'return point is not None and point["kl"] <= bound and point["kept_fraction"] <= limit', 'return point is not None and point["kl"] < bound and point["kept_fraction"] <= limit', 'tests/unit/test_claims.py', 'a circuit exactly at KL 0.21 not counted'),
 ('helpers/claims.py', 'return UNINFORMATIVE if ours["random_kl"] <= bound else REPRODUCED', 'return REPRODUCED', 'tests/unit/test_claims.py', "sparse circuit's random control not consulted"),
 ('helpers/claims.py', 'if meets(paper_rule):', 'if False:', 'tests/unit/test_claims.py', "the paper's-rule verdict never given"),
 ('helpers/claims.py', 'return UNINFORMATIVE if control_supported else REPRODUCED', 'return REPRODUCED', 'tests/unit/test_claims.py', 'subfunction verdict ignores the control head'),
 ('helpers/claims.py', 'return REPRODUCED if receptor_percent - random_percent >= r["min_above_random"] else UNINFORMATIVE', 'return REPRODUCED', 'tests/unit/test_claims.py', 'receptors not compared with random directions'),
 ('helpers/claims.py', 'return len(rates.uninformative_sites) < share * rates.sites', 'return len(rates.uninformative_sites) <= share * rates.sites', 'tests/unit/test_claims.py', 'a check uninformative at half its sites counted as informative'),
 ('helpers/claims.py', 'if paper is not None and informative(paper) and paper.model >= need:', 'if paper is not None and paper.model >= need:', 'tests/unit/test_claims.py', "the released judge's uninformative pass counted"),
 ('helpers/claims.py', 'sparser = [p for p in sweep if size(p) < size(point)]', 'sparser = [p for p in sweep if p["kept_fraction"] < point["kept_fraction"]]', 'tests/unit/test_claims.py', 'next sparser circuit by rounded fractions'),
 ('helpers/conclusions.py', 'return sum(comb(n, k) * base ** k * (1 - base) ** (n - k) for k in range(kept, n + 1))', 'return base ** n', 'tests/unit/test_conclusions.py', 'chance of kept receptors: only all n'),
 ('helpers/conclusions.py', 'if abs(partition_gap) < CONTIGUITY_SHARE * abs(random_gap):', 'if abs(partition_gap) <= CONTIGUITY_SHARE * abs(random_gap):', 'tests/unit/test_conclusions.py', 'contiguity boundary inclusive'),
 ('helpers/evaluations.py', 'return f"{round(value, digits) + 0.0:.{digits}f}"', 'return f"{value:.{digits}f}"', 'tests/unit/test_evaluations.py', 'negative zero printed in the evaluator table'),
 ('helpers/tiled/grids.py', 'cells = frame.assign(cell=[f"{round(v, digits) + 0.0:.{digits}f} {_mark(p)}"', 'cells = frame.assign(cell=[f"{round(v, digits) + 0.0:.{digits}f} {_mark(not p)}"', 'tests/unit/test_grids.py', 'grid marks inverted'),
 ('helpers/figures/tiled.py', 'clear = int((judged[["rho_tile", "rho_whole", "rho_random"]].min(axis=1) >= rho_threshold).sum())', 'clear = int((judged[["rho_tile", "rho_whole", "rho_random"]].min(axis=1) > rho_threshold).sum())', 'tests/unit/test_tiled_findings.py', "C1 threshold exclusive in the figure's finding"),
 ('helpers/notebook_job.py', 'set(data) == {"text/plain"} and PROGRESS_BAR.match("".join(data["text/plain"]))):', 'False):', 'tests/unit/test_reproduction.py', 'progress bars kept in the readable copy'),
 ('helpers/notebook_job.py', 'if os.name != "posix":\n        return AsyncKernelManager', 'if True:\n        return AsyncKernelManager', 'tests/notebooks/test_pipeline.py::test_notebook_kernels_run_quietly_over_unix_sockets_and_leave_no_socket_folder', 'notebook kernels over TCP again'),
 ("helpers/pipeline.py", "and not any(d in selected and d not in finished", "and not any(False and d not in finished", "tests/unit/test_executors.py", "runs released before the runs they read (after ignored)"),
 ("helpers/notebook_job.py", "        finished = True\n", "        finished = True\n        atomic_write_json(Path(job.staging_parent) / \"manifest.json\", {\"runs\": []})\n", "tests/notebooks/test_executor_kernels.py", "a job writes the manifest itself"),
 ("helpers/pipeline.py", "        if executor.capacity > 1:\n            prepare_models(", "        if False:\n            prepare_models(", "tests/unit/test_executors.py", "models not converted once before fan-out"),
 ("helpers/executors.py", "        if workers * threads > cores:", "        if False:", "tests/unit/test_executors.py", "local pool oversubscribes the cores"),
 ("helpers/executors.py", "            environment[\"CUDA_VISIBLE_DEVICES\"] = gpu", "            environment[\"CUDA_VISIBLE_DEVICES\"] = ','.join(self.gpus)", "tests/unit/test_executors.py", "every run sees every GPU"),
 ("helpers/runs.py", "    return \"-\".join([sweep, *(f\"{name}{_slug(value)}\" for name, value in sorted(parameter_set.items()))])", "    return \"-\".join([sweep, *(_slug(value) for name, value in sorted(parameter_set.items()))])", "tests/unit/test_executors.py", "sweep run names lose the parameter names"),
 ('helpers/core/device.py', '        return "cuda" if torch.cuda.is_available() else "cpu"', '        return "cpu"', 'tests/unit/test_device.py', 'auto never takes the GPU'),
 ('helpers/core/device.py', '        if not torch.cuda.is_available():\n            raise DeviceUnavailableError(', '        if not torch.cuda.is_available():\n            return "cpu"\n            raise DeviceUnavailableError(', 'tests/unit/test_device.py', 'cuda without a GPU falls back to the CPU quietly'),
 ('helpers/core/device.py', '    if torch.device(device).type == "cpu":\n        return {}', '    if True:\n        return {}', 'tests/unit/test_device.py', 'GPU results keyed like CPU ones'),
 ('helpers/core/device.py', '    torch.set_float32_matmul_precision("highest")', '    pass', 'tests/unit/test_device.py', 'TF32 left on'),
 ('helpers/singular/training.py', '    record.update(off_cpu_key(model.device))', '    pass', 'tests/unit/test_device.py', "masks trained on a GPU share the CPU's cache key"),
 ('helpers/core/cache.py', 'torch.load(path, map_location="cpu", weights_only=False)', 'torch.load(path, weights_only=False)', 'tests/unit/test_device_lint.py', 'GPU-saved masks do not load on a CPU'),
 ('helpers/pipeline.py', '        params["device"] = device', '        pass', 'tests/notebooks/test_pipeline.py::test_the_resolved_device_reaches_notebooks_that_declare_one_and_enters_the_fingerprint', 'the resolved device never reaches the notebooks'),
 ('helpers/pipeline.py', '        if computed_on != torch_device_type(device):', '        if False:', 'tests/notebooks/test_pipeline.py::test_a_run_that_computed_on_another_device_than_its_fingerprint_says_is_not_recorded', 'a result computed on another device is recorded'),
 ('helpers/pipeline.py', '    if profile == "paper" and resolved == "cpu":', '    if False:', 'tests/notebooks/test_pipeline.py::test_the_paper_profile_is_refused_on_the_cpu_with_what_it_would_cost', 'the paper profile starts a 10-hour CPU run'),
 ('helpers/pipeline.py', '    record = {k: v for k, v in numerics(device).items() if k != "threads"} if where is None else \\\n        dict(device=device, on=where)', '    record = {}', 'tests/notebooks/test_pipeline.py::test_the_resolved_device_reaches_notebooks_that_declare_one_and_enters_the_fingerprint', 'the device left out of the fingerprint'),
 ('helpers/singular/adversary.py', '                        value.add_(attack.step_size * torch.sign(grad) * out[name])', '                        value.sub_(attack.step_size * torch.sign(grad) * out[name])', 'tests/unit/test_adversary.py', 'the adversary descends the KL instead of ascending it'),
 ('helpers/singular/adversary.py', '        out[name] = keep + (1 - keep) * m[name]', '        out[name] = keep + (1 - keep) * (1 - m[name])', 'tests/unit/test_adversary.py', 'm = 0 is the full model and m = 1 the rule (swapped)'),
 ('helpers/singular/adversary.py', '        out[name] = keep + (1 - keep) * m[name]', '        out[name] = keep * m[name]', 'tests/unit/test_adversary.py', 'm scales the kept directions instead of setting the excluded ones'),
 ('helpers/singular/adversary.py', '            value.clamp_(0.0, 1.0)', '            value.clamp_(0.0, 2.0)', 'tests/unit/test_adversary.py', 'the projection lets m leave [0, 1]'),
 ('helpers/singular/nonsense.py', '            order = 1 + torch.randperm(length, generator=generator, device="cpu")', '            order = torch.randperm(length, generator=generator, device="cpu")', 'tests/unit/test_adversary.py', 'shuffling moves BOS and drops the answer token'),
 ('helpers/singular/adversary.py', '    return bool(nonsense_jaccard <= ratio * min(seed_jaccards))', '    return bool(nonsense_jaccard < ratio * min(seed_jaccards))', 'tests/unit/test_adversary.py', 'task-specific only strictly below the declared ratio'),
 ('helpers/singular/adversary.py', '    return bool(nonsense_jaccard <= ratio * min(seed_jaccards))', '    return bool(nonsense_jaccard <= ratio * max(seed_jaccards))', 'tests/unit/test_adversary.py', 'task-specificity against the best-agreeing seeds'),
 ('helpers/singular/adversary.py', '    return bool(curve["best"].max() <= bound)', '    return bool(curve["best"].max() < bound)', 'tests/unit/test_adversary.py', 'a circuit at the bound counted as broken'),
 ('helpers/singular/validation.py', '    within = [p for p in summary["alpha_sweep"] if p["kl"] <= bound and p["kept_fraction"] < 1]', '    within = [p for p in summary["alpha_sweep"] if p["kl"] < bound and p["kept_fraction"] < 1]', 'tests/unit/test_validation.py', 'a circuit exactly at the bound is not attacked as the sparsest'),
 ('helpers/singular/validation.py', '    sparsest = min(within, key=lambda p: (p["kept"], p["kl"], p["alpha"])) if within else None', '    sparsest = min(within, key=lambda p: (p["kept"], p["alpha"])) if within else None', 'tests/unit/test_validation.py', 'equal counts picked by alpha, not by the lower KL'),
 ('helpers/singular/validation.py', '    return task_specific(max(nonsense_jaccards.values()), seed_jaccards, ratio)', '    return task_specific(min(nonsense_jaccards.values()), seed_jaccards, ratio)', 'tests/unit/test_validation.py', 'task-specific when one kind of nonsense overlaps little'),
 ('helpers/singular/validation.py', '    return all(k * ratio.denominator >= ratio.numerator * task_kept for k in control_kept.values())', '    return all(k * ratio.denominator > ratio.numerator * task_kept for k in control_kept.values())', 'tests/unit/test_validation.py', 'a weight control exactly at the declared ratio counted against'),
 ('helpers/singular/validation.py', '    return all(k * ratio.denominator >= ratio.numerator * task_kept for k in control_kept.values())', '    return any(k * ratio.denominator >= ratio.numerator * task_kept for k in control_kept.values())', 'tests/unit/test_validation.py', 'the weights matter when one control of two needs more directions'),
 ('helpers/tiled/sites.py', '    model.weights_source = f"{model.weights_source}, then {control} (seed {seed})"', '    pass', 'tests/unit/test_validation.py', "a weight control shares the trained model's cache keys"),
 ('helpers/singular/validation.py', '        if kl_of(mid) <= bound:', '        if kl_of(mid) < bound:', 'tests/unit/test_validation.py', 'a count whose KL is exactly the bound counted as outside'),
 ('helpers/singular/validation.py', '    while hi - lo > step:', '    while hi - lo > 2 * step:', 'tests/unit/test_validation.py', 'the bisection stops at twice its declared resolution'),
 ('helpers/evaluations.py', '    if adversarial and not attacked:', '    if False:', 'tests/unit/test_evaluations.py', 'a report without the attack passes as attacked'),
 ('helpers/evaluations.py', '        parts.append(attack_rules_file().read_bytes())', '        pass', 'tests/unit/test_evaluations.py', 'changed attack rules leave attacked reports current'),
 ('helpers/singular/validation.py', '    if nonsense_jaccards and seed_jaccards:', '    if nonsense_jaccards or seed_jaccards:', 'tests/unit/test_validation.py', 'task-specificity judged without a nonsense circuit (the attack alone)'),
 ('helpers/singular/validation.py', '    if controls and task_kept is not None:', '    if task_kept is not None:', 'tests/unit/test_validation.py', 'the weights judged to matter with no weight control (the attack alone)'),
 ('helpers/workshop.py', 'r["adversarial_kl"] >= criteria["attack_gain"] * r["under_rule_kl"]', 'r["adversarial_kl"] > criteria["attack_gain"] * r["under_rule_kl"]', 'tests/unit/test_rule_boundaries.py', 'a circuit exactly at the workshop attack gain counted as not breaking'),
 ('helpers/evaluations.py', '        if (other_run, other) != (run, circuit) and recorded == sha and \\\n', '        if (other_run, other) != (run, circuit) and \\\n', 'tests/unit/test_evaluations.py', "another circuit's report copied whatever its bytes"),
 ('helpers/evaluations.py', '                report_state(figures, other_run, other, recorded, evaluators, adversarial)[0] == "current":', '                report_state(figures, other_run, other, recorded, evaluators, adversarial)[0] != "circuit changed":', 'tests/unit/test_evaluations.py', "a twin's stale report copied"),
 ('helpers/evaluations.py', '    if not text.startswith(f"{twin_file}: "):', '    if False:', 'tests/unit/test_evaluations.py', "a hand-edited twin's printed table copied under another file's name"),
 ("helpers/feasibility.py", "return _jaccard(max(0, a + b - n), a, b), _jaccard(min(a, b), a, b)", "return _jaccard(max(0, a + b - n - 1), a, b), _jaccard(min(a, b), a, b)", "tests/unit/test_feasibility.py", "Jaccard floor one shared direction too low"),
 ("helpers/feasibility.py", "above = sorted(kind for kind, (low, _) in ranges.items() if low > bound)", "above = sorted(kind for kind, (low, _) in ranges.items() if low >= bound)", "tests/unit/test_feasibility.py", "specificity unreachable when the floor equals the threshold"),
 ("helpers/feasibility.py", "yes, no = ratio * task_kept <= n, task_kept > 0", "yes, no = ratio * task_kept < n, task_kept > 0", "tests/unit/test_feasibility.py", "weights rule unreachable when 1.5 × the task is exactly every direction"),
 ("helpers/feasibility.py", "    if smallest <= limit:", "    if smallest < limit:", "tests/unit/test_feasibility.py", "sparse circuit exactly at the limit counted out of reach"),
 ("helpers/feasibility.py", "if not any(largest_bias[m] > 0 and misfolded_error.get(m, 0.0) >= bound for m in largest_bias):", "if not any(largest_bias[m] > 0 and misfolded_error.get(m, 0.0) > bound for m in largest_bias):", "tests/unit/test_feasibility.py", "a misfold exactly at the bound counted as uncaught"),
 ("helpers/singular/validation.py", "        if row.kl != row.kl or row.kl > bound:", "        if row.kl != row.kl or row.kl >= bound:", "tests/unit/test_feasibility.py", "a control whose circuit is exactly at the bound counted as failed training"),
 ("helpers/claims.py", "reach.say(identity_verdict(list(errors.values()), rules))", "identity_verdict(list(errors.values()), rules)", "tests/unit/test_claims.py", "identities reproduced on bias-free models"),
 ("helpers/claims.py", "        verdict = reach.say(sparsity_verdict(", "        verdict = (sparsity_verdict(", "tests/unit/test_claims.py", "sparse-circuit verdict without its reach"),
 ("helpers/singular/heads.py", '    large = (effects["effect_low"] > floor) | (effects["effect_high"] < -floor)', '    large = (effects["effect_low"] >= floor) | (effects["effect_high"] <= -floor)', "tests/unit/test_heads.py", "an effect interval at the floor counted as beyond it"),
 ("helpers/singular/heads.py", '    return max(rule["share_of_head"] * abs(head_effect), abs(other_largest))', '    return abs(other_largest)', "tests/unit/test_heads.py", "the head's own effect left out of the floor"),
 ("helpers/singular/heads.py", 'floors = {"study": effect_floor(study["head_effect"]["mean"], control["effects"]["metric_change"].abs().max(), rule),', 'floors = {"study": effect_floor(study["head_effect"]["mean"], 0.0, rule),', "tests/unit/test_heads.py", "the studied head not held beyond the control head's effects"),
 ("helpers/singular/heads.py", '    return effects.assign(large_enough=large, matters=large & effects["beyond_controls"])', '    return effects.assign(large_enough=large, matters=effects["beyond_controls"])', "tests/unit/test_heads.py", "a direction matters without a large enough effect"),
 ("helpers/singular/validation.py", "    return bool(max(nonsense) <= ratio * min(seeds))", "    return bool(max(nonsense) < ratio * min(seeds))", "tests/unit/test_feasibility.py", "matched-size specificity: a nonsense overlap exactly at the threshold counted as too large"),
 ("helpers/feasibility.py", "    expected = a * b / n\n    room = min(a, b) - expected", "    expected = a * b / n / 2\n    room = min(a, b) - expected", "tests/unit/test_feasibility.py", "chance overlap halved"),
 ("helpers/singular/validation.py", "    pairs += [(\"nonsense\", first, kind) for kind in nonsense_masks]", "    pairs += [(\"nonsense\", f\"seed {max(seed_masks)}\", kind) for kind in nonsense_masks]", "tests/unit/test_feasibility.py", "nonsense compared with another seed than the task circuit"),
 ("helpers/singular/nonsense.py", "            for position in changed.tolist():", "            for position in range(1, length + 1):", "tests/unit/test_adversary.py", "random-token corruption redraws every position"),
]


def main(selected: list[str]) -> int:
    if subprocess.run(["git", "diff", "--quiet", "--", "helpers"], cwd=ROOT).returncode != 0:
        print("helpers/ has uncommitted changes; commit or stash them first (mutants are written in place)")
        return 2
    missed = 0
    for index, (path, old, new, tests, what) in enumerate(MUTANTS):
        if selected and str(index) not in selected:
            continue
        file = ROOT / path
        source = file.read_text()
        if source.count(old) != 1:
            print(f"[{index}] STALE: the original text of {path} is not there once; update the mutant ({what})")
            missed += 1
            continue
        file.write_text(source.replace(old, new))
        try:
            result = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-m", "not slow", "-p",
                                     "no:cacheprovider", *tests.split()], cwd=ROOT, capture_output=True, text=True)
        finally:
            file.write_text(source)
        failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
        caught = result.returncode != 0
        missed += not caught
        print(f"[{index}] {'caught' if caught else 'MISSED'}: {path}: {what}" + (f" <- {failed[0][7:]}" if failed else ""),
              flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
