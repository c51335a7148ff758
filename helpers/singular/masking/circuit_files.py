"""Direction circuits as files anyone can load and score again (docs/methods.md §1.7).

A circuit is the set of singular directions a masking run keeps, per (layer, matrix kind, head), plus one
ranking score per direction (the trained mask's logit: larger = more in the circuit). A file is one
``safetensors`` file:

- tensors ``kept/<layer>_<kind>`` (bool) and ``score/<layer>_<kind>`` (float32), shaped as the block of
  masks ([n_heads, r] for QK and OV, [r] for the MLP kinds);
- JSON metadata under the key ``circuit``: the model (name, weights source, sha256 of its parameters,
  processing), the SVD convention the direction indices refer to, the ablation rule, the task (name,
  prompts, seed, digests of the training and held-out prompts), the masking run, the rule that made the
  kept set, the evaluator version and the counts.

A direction index means nothing without the SVD it indexes, so ``load_circuit`` refuses a file whose model,
weights, processing, SVD convention or block shapes differ from the model it is loaded for.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from helpers.core.cache import atomic_file, sha256_file
from helpers.pipeline.runs import run_name
from helpers.singular.directions.augmented import direction_shapes
from helpers.singular.masking.circuits import kept_by_kind
from helpers.singular.masking.ledger import PAPER_KEPT
from helpers.singular.masking.masks import AblationRule, DirectionMasks, FixedMasks
from helpers.singular.masking.scoring import EVALUATOR_VERSION
from helpers.singular.masking.training import MaskingRun, masking_prompts
from helpers.pipeline.summaries import SUMMARY_FILE

FILE_FORMAT = "singular-direction-circuit"
FORMAT_VERSION = 1
SVD_CONVENTION = ("augmented QK/OV/MLP matrices (docs/methods.md §1.1), thin SVD from factors; per block, "
                  "directions in descending singular value; signs: largest-|entry| of each write direction "
                  "positive; a mask scales the coefficient along a write direction (mask format 1)")
"""What a direction index refers to. A change here (another SVD, order or mask hook) must change this text,
so that files written under the old convention are refused instead of silently re-read."""
KEPT_AT_HALF = "eval-mode mask > 0.5 (logit > 0): the trained masks' own binarisation"
KEPT_PAPER = f"m = sigmoid(logit) ≥ {PAPER_KEPT:g}: paper 1's released 'active' rule"
SCORE = "mask logit (signed: larger = more kept; eval-mode mask = its parametrisation applied to it)"


@dataclass
class Circuit:
    """A loaded (or freshly made) direction circuit: ``kept`` and ``scores`` map "<layer>_<kind>" to a block."""

    kept: dict[str, torch.Tensor]
    scores: dict[str, torch.Tensor]
    metadata: dict

    def count(self) -> int:
        return sum(v.numel() for v in self.kept.values())

    def n_kept(self) -> int:
        return sum(int(v.sum()) for v in self.kept.values())

    def fixed(self) -> FixedMasks:
        """The kept set as binary masks (1 = kept), for ``CircuitEvaluator``."""
        return FixedMasks({name: v.float() for name, v in self.kept.items()})

    def rule(self) -> AblationRule:
        return AblationRule(**self.metadata["ablation_rule"])

    def masks(self, model) -> DirectionMasks:
        """The trained masks back (logits = the saved scores), in eval mode: the same values the run had."""
        masks = DirectionMasks(model, parametrisation=self.metadata["training"]["parametrisation"])
        with torch.no_grad():
            for name, score in self.scores.items():
                masks.logits[name].copy_(score)
        return masks.eval()


def prompt_digest(prompts: list[str]) -> str:
    return hashlib.sha256(json.dumps(list(prompts)).encode()).hexdigest()


def make_circuit(model, masks: DirectionMasks, kept: FixedMasks, kept_rule: str, rule: AblationRule, run,
                 task_name: str, train, held_out, label: str) -> Circuit:
    """The circuit of one masking run: ``kept`` (binary masks made from ``masks`` by ``kept_rule``, a sentence
    saying how), the masks' logits as scores, and everything needed to load and score it again. ``run`` is
    the ``MaskingRun`` that trained ``masks`` on ``train``."""
    kept_blocks = {name: (v > 0.5).cpu() for name, v in kept.blocks.items()}
    scores = {name: p.detach().float().cpu().clone() for name, p in masks.logits.items()}
    if set(kept_blocks) != set(scores):
        raise ValueError("the kept set and the masks cover different blocks")
    metadata = dict(
        format=FILE_FORMAT, format_version=FORMAT_VERSION, label=label,
        model=model.record(),
        svd_convention=SVD_CONVENTION, score=SCORE,
        ablation_rule=rule.record(),
        task=dict(name=task_name, n_prompts=run.n_prompts, seed=run.seed, split="half train, half held out (seed)",
                  train_sha256=prompt_digest(train.prompts), held_out_sha256=prompt_digest(held_out.prompts)),
        training={**asdict(run), "parametrisation": masks.parametrisation},
        kept_rule=kept_rule, evaluator_version=EVALUATOR_VERSION,
        computed_on=model.numerics(),  # informative: loading is keyed on the weights and the SVD convention
        n_directions=sum(v.numel() for v in kept_blocks.values()),
        n_kept=sum(int(v.sum()) for v in kept_blocks.values()), kept_by_kind=kept_by_kind(kept),
        blocks={name: list(v.shape) for name, v in sorted(kept_blocks.items())},
    )
    return Circuit(kept_blocks, scores, metadata)


def save_circuit(circuit: Circuit, path: str | Path) -> Path:
    """Write ``circuit`` to ``path`` (``.safetensors``), atomically; equal circuits give equal bytes."""
    from safetensors.torch import save_file

    path = Path(path)
    if path.suffix != ".safetensors":
        raise ValueError(f"{path}: a circuit file ends in .safetensors")
    tensors = {**{f"kept/{n}": v.cpu().contiguous() for n, v in circuit.kept.items()},
               **{f"score/{n}": v.cpu().contiguous().float() for n, v in circuit.scores.items()}}
    with atomic_file(path, suffix=".safetensors") as tmp:
        save_file(tensors, str(tmp), metadata={"circuit": json.dumps(circuit.metadata, sort_keys=True)})
    return path


class CircuitFileError(ValueError):
    """A circuit file that cannot be read, or that belongs to another model, weights or convention."""


def load_circuit(path: str | Path, model=None) -> Circuit:
    """Read a circuit file. With ``model``, refuse (``CircuitFileError``) a file made for another model, other
    weights, another processing, another SVD convention or other block shapes."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no circuit file at {path}; notebook 02 writes them to "
                                f"figures/02_masking-<task>-<model>/circuits/")
    try:
        with safe_open(str(path), framework="pt") as handle:
            header = handle.metadata() or {}
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    except Exception as err:  # noqa: BLE001 — safetensors raises several types for a damaged file
        raise CircuitFileError(f"{path} is not a readable safetensors file ({type(err).__name__}: {err})") from err
    if "circuit" not in header:
        raise CircuitFileError(f"{path} has no 'circuit' metadata: it is a safetensors file, not a circuit file")
    metadata = json.loads(header["circuit"])
    if metadata.get("format") != FILE_FORMAT or metadata.get("format_version") != FORMAT_VERSION:
        raise CircuitFileError(f"{path}: format {metadata.get('format')!r} version {metadata.get('format_version')!r}; "
                               f"this package reads {FILE_FORMAT!r} version {FORMAT_VERSION}")
    kept = {k.split("/", 1)[1]: v for k, v in tensors.items() if k.startswith("kept/")}
    scores = {k.split("/", 1)[1]: v for k, v in tensors.items() if k.startswith("score/")}
    blocks = metadata["blocks"]
    if set(kept) != set(blocks) or set(scores) != set(blocks):
        raise CircuitFileError(f"{path}: its tensors do not match the blocks its metadata lists")
    for name, shape in blocks.items():
        if list(kept[name].shape) != shape or list(scores[name].shape) != shape or kept[name].dtype != torch.bool:
            raise CircuitFileError(f"{path}: block {name} is not a bool kept set and a score of shape {shape}")
    circuit = Circuit(kept, scores, metadata)
    if model is not None:
        check_model(circuit, model, path)
    return circuit


def check_model(circuit: Circuit, model, path: str | Path = "circuit") -> None:
    """Refuse a circuit made for another model, weights, processing, SVD convention or block shapes."""
    saved = circuit.metadata["model"]
    for key, here in (("model", model.name), ("processing", model.processing)):
        if saved[key] != here:
            raise CircuitFileError(f"{path} was made on {key}={saved[key]!r}; the loaded model has {key}={here!r}. "
                                   f"Load load_model({saved['model']!r}, processing={saved['processing']!r}).")
    if saved["weights_sha256"] != model.weights_sha256:
        raise CircuitFileError(f"{path} was made on weights with sha256 {saved['weights_sha256'][:16]}… "
                               f"({saved['weights_source']}); the loaded {model.name} has "
                               f"{model.weights_sha256[:16]}… ({model.weights_source}): other weights, so its "
                               f"directions are other directions")
    if saved.get("tokenizer_sha256", model.tokenizer_sha256) != model.tokenizer_sha256:  # files before it: unrecorded
        raise CircuitFileError(f"{path} was made with a tokenizer of sha256 {saved['tokenizer_sha256'][:16]}…; the "
                               f"loaded {model.name}'s is {model.tokenizer_sha256[:16]}…: its prompts were other "
                               f"tokens. Load the model with the tokenizer it was made with.")
    if circuit.metadata["svd_convention"] != SVD_CONVENTION:
        raise CircuitFileError(f"{path} indexes directions under another SVD convention "
                               f"({circuit.metadata['svd_convention']!r}); this package's is {SVD_CONVENTION!r}")
    shapes = {f"{layer}_{kind}": list(shape) for layer in range(model.n_layers)
              for kind, shape in direction_shapes(model).items()}
    if shapes != circuit.metadata["blocks"]:
        raise CircuitFileError(f"{path}: its blocks do not have this model's direction shapes")


def check_prompts(circuit: Circuit, train, held_out) -> None:
    """Refuse prompts that are not the ones the circuit was trained and held out on."""
    task = circuit.metadata["task"]
    if prompt_digest(train.prompts) != task["train_sha256"] or prompt_digest(held_out.prompts) != task["held_out_sha256"]:
        raise CircuitFileError(f"the regenerated {task['name']} prompts (n={task['n_prompts']}, seed={task['seed']}) "
                               f"differ from the ones this circuit was trained on: the task's prompt generator or "
                               f"the tokenizer changed since the file was written")


def circuit_prompts(circuit: Circuit, model):
    """The circuit's own (training, held-out) prompts, regenerated and checked against its digests."""
    task = circuit.metadata["task"]
    train, held_out = masking_prompts(model, task["name"], task["n_prompts"], task["seed"])
    check_prompts(circuit, train, held_out)
    return train, held_out


def circuit_label(task_name: str, recipe: str, alpha: float | None = None) -> str:
    """The file stem of one of notebook 02's circuits: ``<task>-ours-alpha<α>``, ``<task>-paper-recipe`` or
    ``<task>-ours-paper-rule``."""
    if recipe == "ours":
        return f"{task_name}-ours-alpha{alpha:.4g}"
    if recipe in ("paper-recipe", "ours-paper-rule"):
        return f"{task_name}-{recipe}"
    raise ValueError(f"recipe={recipe!r} is not 'ours', 'paper-recipe' or 'ours-paper-rule'")


def circuit_path(folder: str | Path, label: str) -> Path:
    """The file the circuit ``label`` is written to in ``folder``: ``<folder>/<label>.safetensors``."""
    return Path(folder) / f"{label}.safetensors"


def masking_run_folder(runs: str | Path, task_name: str, model_name: str) -> Path:
    """Notebook 02's run on ``task_name`` and ``model_name`` among ``runs``, the folder that holds the reading
    notebook's own run (``figures/`` in the pipeline, ``figures-mine/`` by hand: ``helpers.pipeline.runs.BY_HAND``).
    Refuses a run that is not there (or did not finish), naming how to make it."""
    folder = Path(runs) / run_name("02_masking.ipynb", model_name, task_name)
    if not (folder / SUMMARY_FILE).is_file():
        raise FileNotFoundError(
            f"no finished notebook 02 run for task_name={task_name!r}, model_name={model_name!r} in {folder}: run "
            f"notebooks/02_masking.ipynb first with those parameters (by hand, with out_dir = None, it writes "
            f"there), or name another run's circuit file or folder in this notebook's parameters")
    return folder


def default_circuit(task_name: str, model_name: str, runs: str | Path) -> Path:
    """The circuit notebooks 03 and 06 read unless told otherwise: notebook 02's default run (our recipe at the
    declared α) on ``task_name`` and ``model_name``, beside the reading run (``masking_run_folder``)."""
    return circuit_path(masking_run_folder(runs, task_name, model_name) / "circuits",
                        circuit_label(task_name, "ours", MaskingRun().alpha))


def run_circuits(model, task_name: str, train, held_out, run, trained: dict, paper: tuple | None = None,
                 paper_rule: tuple | None = None) -> list[Circuit]:
    """Every circuit notebook 02 reports: one per α of the sweep (``trained``: α → masks, trained as ``run``
    with that α, kept at logit > 0), then, when given (notebook 02's ``run_ledger``), the paper's recipe
    (``paper`` = (run, masks), kept at m ≥ 1e-3) and our training under the paper's rule (``paper_rule`` =
    (run, masks), kept at logit > 0)."""
    circuits = [make_circuit(model, masks, FixedMasks.binarised(masks), KEPT_AT_HALF, run.rule(),
                             replace(run, alpha=float(alpha)), task_name, train, held_out,
                             circuit_label(task_name, "ours", alpha)) for alpha, masks in trained.items()]
    if paper is not None:
        paper_run, paper_masks = paper
        circuits.append(make_circuit(model, paper_masks, FixedMasks.at_least(paper_masks, PAPER_KEPT), KEPT_PAPER,
                                     paper_run.rule(), paper_run, task_name, train, held_out,
                                     circuit_label(task_name, "paper-recipe")))
    if paper_rule is not None:
        rule_run, rule_masks = paper_rule
        circuits.append(make_circuit(model, rule_masks, FixedMasks.binarised(rule_masks), KEPT_AT_HALF,
                                     rule_run.rule(), rule_run, task_name, train, held_out,
                                     circuit_label(task_name, "ours-paper-rule")))
    return circuits


def write_circuits(circuits: list[Circuit], folder: str | Path) -> list[dict]:
    """Save each circuit as ``<folder>/<label>.safetensors``; returns one record per file (label, file,
    sha256, kept) for the run's summary."""
    records = []
    for circuit in circuits:
        path = save_circuit(circuit, circuit_path(folder, circuit.metadata["label"]))
        records.append(dict(label=circuit.metadata["label"], file=path.name, sha256=sha256_file(path),
                            kept=circuit.n_kept(), kept_fraction=circuit.n_kept() / circuit.count(),
                            rule=circuit.metadata["ablation_rule"]["name"], kept_rule=circuit.metadata["kept_rule"]))
    return records


def mark_in_circuit(directions, circuit: Circuit, kind: str = "ov"):
    """``directions`` (a table with layer, head, direction columns, e.g. receptors) with two columns more:
    ``in_circuit`` (the circuit keeps that direction of ``kind``) and ``circuit_score`` (its mask logit)."""
    rows = list(directions[["layer", "head", "direction"]].itertuples(index=False))
    kept = [bool(circuit.kept[f"{r.layer}_{kind}"][r.head, r.direction]) for r in rows]
    score = [float(circuit.scores[f"{r.layer}_{kind}"][r.head, r.direction]) for r in rows]
    return directions.assign(in_circuit=kept, circuit_score=score)


def kept_fraction(circuit: Circuit, kind: str) -> float:
    """The fraction of all directions of ``kind`` the circuit keeps (the base rate for ``mark_in_circuit``)."""
    blocks = [v for name, v in circuit.kept.items() if name.split("_", 1)[1] == kind]
    if not blocks:
        raise ValueError(f"the circuit has no {kind!r} blocks; kinds: {sorted({n.split('_', 1)[1] for n in circuit.kept})}")
    return sum(int(v.sum()) for v in blocks) / sum(v.numel() for v in blocks)
