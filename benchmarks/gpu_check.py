"""The GPU check: one script, about 8 minutes on one CUDA GPU before its paper_models section (not yet timed on
one), one JSON (printed and written).

    python benchmarks/gpu_check.py [--out gpu_check.json] [--sections env tests parity timings paper_models]
    python benchmarks/gpu_check.py --device cpu --quick        # a dry run of every section on the CPU

No weights travel to a GPU machine that cannot reach the hub, so the check needs none:

1. ``env``: the numerics of the CPU and of the GPU (``helpers.core.device.numerics``), ``nvidia-smi``, the
   package versions.
2. ``tests``: ``pytest --run-gpu -m gpu`` (tests/gpu, and the CUDA half of the device tests): CPU/CUDA parity
   on tiny models, a rerun bit-identical, separate cache keys.
3. ``parity``: the notebooks' ``--fast`` pipeline on tiny random models (01, 02 IOI and gender, 03, 06 on
   tiny-llama; 04 and 05 on tiny-gemma3), once on the CPU and once on the GPU, the summaries compared under
   ``data/device_tolerance.toml`` (``tools/compare_summaries.py``). The tiny models' numbers mean nothing;
   that the two devices agree on them, under the rules the real runs will be judged by, is the point.
4. ``timings``: the real shapes with random weights (``helpers.core.models.model_from_config``), each on
   the GPU beside the CPU of the same machine: paper 1's models (smollm2-135m, gpt2-small) one mask-training
   step (``training_step``) at batch 16 and 64; paper 2's (gemma-3-270m, gemma-2-2b) the corpus pass
   (``SiteStatistics.run``, every site of the chosen layers) over 16,384 sampled tokens of the python-docs
   corpus, and check C's steered forwards (``Steering.changes``: the two residual sites of the deepest layer,
   the directions and doses ``check_c`` steers); peak GPU memory of each. CPU sides that would take minutes
   run on fewer tokens or steps and are scaled, which the JSON says (``cpu_scaled_from_tokens``).
5. ``paper_models``: the paper-models profile's ``--fast`` pass at GPT-2 small's real shapes (notebooks 01, 02
   on IOI, 03 and 07 on IOI), offline, on a stand-in folder of random weights (``helpers.core.stand_ins``),
   on the device; each run's wall time, as the manifest records it.

Every section is timed and guarded: a failure is recorded with its error and the next section runs. The
machine's own output files are not committed; the note quotes the JSON's numbers.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
def shape_config(name: str) -> dict:
    """A registry model's published configuration (``helpers.core.models.MODELS``), except SmolLM2's vocabulary:
    50,257 instead of 49,152, because random-weight models read the GPT-2 tokenizer, whose ids (BOS 50256) must
    exist (2 % more LM head)."""
    from helpers.core.models import MODELS

    return {**MODELS[name].published_config, **({"vocab_size": 50257} if name == "smollm2-135m" else {})}


PARITY_RUNS = ROOT / "tests" / "tiny_runs.toml"  # every notebook on tiny models, shared with the tests


def synchronise(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device: str, repeats: int = 3) -> float:
    """Median seconds of ``fn`` over ``repeats`` calls after one warm-up, the device synchronised."""
    fn()
    synchronise(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronise(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peak_memory_gib(device: str) -> float | None:
    return torch.cuda.max_memory_allocated() / 2 ** 30 if device.startswith("cuda") else None


def reset_peak(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


# --- sections -------------------------------------------------------------------------------------------

def environment(device: str) -> dict:
    from helpers.core.device import numerics
    from helpers.pipeline.scheduler import package_versions

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True) if device.startswith("cuda") else None
    return dict(python=platform.python_version(), platform=platform.platform(), cpu_count=os.cpu_count(),
                packages=package_versions(), cpu=numerics("cpu"), device=numerics(device),
                nvidia_smi=smi.stdout.strip() if smi is not None else None)


def gpu_tests(device: str, budget_s: int) -> dict:
    flags = ["--run-gpu", "-m", "gpu"] if device.startswith("cuda") else ["tests/unit/test_device.py"]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *flags]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=budget_s)
    lines = done.stdout.strip().splitlines()
    return dict(command=" ".join(command[2:]), returncode=done.returncode, result=lines[-1] if lines else "",
                failures=[line for line in lines if line.startswith("FAILED")][:20])


def _compare_tool():
    spec = importlib.util.spec_from_file_location("compare_summaries", ROOT / "tools" / "compare_summaries.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def tiny_parity(device: str) -> dict:
    """The tiny-model fast pipeline on the CPU and on ``device``, summaries compared under the tolerances."""
    from helpers.pipeline.scheduler import run_pipeline

    tool = _compare_tool()
    rules = tool.load_tolerances(ROOT / "data" / "device_tolerance.toml")
    out: dict = dict(runs={})
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "notebooks"
        folder.mkdir()
        for notebook in sorted((ROOT / "notebooks").glob("0*.ipynb")):
            (folder / notebook.name).write_bytes(notebook.read_bytes())
        (Path(tmp) / "data").symlink_to(ROOT / "data")
        (folder / "runs.toml").write_text(PARITY_RUNS.read_text())
        manifests = {}
        for side in dict.fromkeys(("cpu", device)):
            start = time.perf_counter()
            manifests[side] = run_pipeline(folder / "runs.toml", Path(tmp) / f"figures-{side}", Path(tmp) / f"build-{side}",
                                           fast=True, log=lambda line: None, device=side)
            out[f"pipeline_seconds_{side}"] = round(time.perf_counter() - start, 1)
        if device == "cpu":
            return {**out, "note": "dry run: the CPU side only"}
        cpu = {r["name"]: r for r in manifests["cpu"]["runs"]}
        for record in manifests[device]["runs"]:
            name = record["name"]
            result = tool.compare(cpu[name]["summary"], record["summary"], within=tool.tolerance_of(rules, name))
            out["runs"][name] = dict(identical=result["identical"], rounding=result["rounding"],
                                     tolerated=result["tolerated"], different=result["different"][:20],
                                     wall_s=dict(cpu=cpu[name]["wall_time_s"], device=record["wall_time_s"]))
    out["all_within_tolerance"] = all(not r["different"] for r in out["runs"].values())
    return out


def mask_step_timings(name: str, device: str, batches, quick: bool) -> dict:
    from helpers.core.models import model_from_config
    from helpers.singular.masking.masks import AblationRule, DirectionMasks, MaskedModel
    from helpers.singular.masking.references import prepare
    from helpers.singular.tasks import ioi_task
    from helpers.singular.masking.training import TrainConfig, training_step

    rows = {}
    for side in dict.fromkeys(["cpu", device]):
        reset_peak(side)
        model = model_from_config(name, shape_config(name), device=side)
        masked, rule = MaskedModel(model), AblationRule.uniform()
        for batch in batches:
            if side == "cpu" and batch > 16 and not quick:
                continue  # the CPU's batch-64 step is about 4x its batch-16 step (compute-bound); not timed here
            task = ioi_task(model, batch, seed=0).to(model.device)
            prepared = prepare(masked, task, rule)
            masks = DirectionMasks(model, init=0.99, parametrisation="hard_concrete").train()
            optimiser = torch.optim.AdamW(masks.parameters(), lr=0.05)
            index = torch.arange(batch, device=model.device)
            config = TrainConfig(batch=batch)
            seconds = timed(lambda: training_step(masked, masks, rule, task, prepared, index, optimiser, config),
                            side, repeats=1 if quick or side == "cpu" else 5)
            rows[f"{side}_batch{batch}_s"] = round(seconds, 4)
        rows[f"{side}_peak_gib"] = peak_memory_gib(side)
        del model, masked
    return rows


def corpus_and_steer_timings(name: str, device: str, layers, n_tokens: int, cpu_tokens: int, quick: bool) -> dict:
    from helpers.core.models import gpt2_tokenizer, model_from_config
    from helpers.tiled.corpus import sample_tokens
    from helpers.tiled.plans import build_plans
    from helpers.tiled.sites import Site, all_sites
    from helpers.tiled.statistics import SiteStatistics
    from helpers.tiled.steer import Steering, steer_texts
    from helpers.tiled.thresholds import load_thresholds

    thresholds = load_thresholds()
    out = dict(layers=list(layers), tokens=n_tokens)
    for side in dict.fromkeys(["cpu", device]):
        tokens = cpu_tokens if side == "cpu" else n_tokens
        reset_peak(side)
        model = model_from_config(name, shape_config(name), device=side)
        sample = sample_tokens(gpt2_tokenizer(), "python-docs", n_tokens=tokens, seed=0, tokenizer_name="gpt2")
        start = time.perf_counter()
        plans = build_plans(model, all_sites(model, layers), thresholds)  # weight-side sets: on the CPU always
        out[f"{side}_plans_s"] = round(time.perf_counter() - start, 2)
        stats = SiteStatistics(model, plans)
        start = time.perf_counter()
        stats.run(sample, batch=8, progress=False)
        synchronise(side)
        seconds = time.perf_counter() - start
        out[f"{side}_corpus_pass_s"] = round(seconds * (n_tokens / tokens), 2)
        if tokens != n_tokens:
            out[f"{side}_scaled_from_tokens"] = tokens
        texts = steer_texts(sample, n_texts=4 if quick else 16)
        steering = Steering(model, texts)
        deepest = max(layers)
        directions = torch.randn(3 + len(thresholds["C"]["dose_alphas"]), model.d_model,
                                 generator=torch.Generator().manual_seed(0), device="cpu")
        start = time.perf_counter()
        for site in ("attn.o", "mlp.down"):
            steering.changes(Site(deepest, site), directions)
        synchronise(side)
        out[f"{side}_check_c_layer_s"] = round(time.perf_counter() - start, 2)
        out[f"{side}_peak_gib"] = peak_memory_gib(side)
        del model, stats, steering
    return out


def timings(device: str, quick: bool) -> dict:
    out = {}
    for name in ("smollm2-135m", "gpt2-small"):
        out[f"mask_step/{name}"] = guarded(lambda: mask_step_timings(name, device, (16, 64), quick))
    plan = {"gemma-3-270m": (range(18), 16_384, 2_048), "gemma-2-2b": ((0, 8, 17, 25), 16_384, 512)}
    if quick:
        plan = {"gemma-3-270m": ((0, 17), 512, 256)}
    for name, (layers, tokens, cpu_tokens) in plan.items():
        out[f"corpus_and_check_c/{name}"] = guarded(
            lambda: corpus_and_steer_timings(name, device, list(layers), tokens, cpu_tokens, quick))
    return out


PAPER_MODEL_RUNS = ("01_augmented_matrices-gpt2-small", "02_masking-ioi-gpt2-small", "03_head_case_study-gpt2-small",
                    "07_circuit_validation-ioi-gpt2-small")


def paper_models_pass(device: str, quick: bool) -> dict:
    """The paper-models profile's --fast runs of ``PAPER_MODEL_RUNS`` (``quick``: 01 alone) on a GPT-2 small
    stand-in, offline, on ``device``: each run's wall time."""
    from helpers.core.folder_checks import weights_env
    from helpers.core.stand_ins import write_stand_in
    from helpers.pipeline.notebook_job import environment_set
    from helpers.pipeline.scheduler import run_pipeline

    runs = list(PAPER_MODEL_RUNS[:1] if quick else PAPER_MODEL_RUNS)
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_stand_in("gpt2-small", Path(tmp) / "gpt2-small")
        with environment_set({weights_env("gpt2-small"): str(folder), "HF_HUB_OFFLINE": "1"}):
            manifest = run_pipeline(ROOT / "notebooks" / "runs.toml", Path(tmp) / "figures", Path(tmp) / "build",
                                    fast=True, only=runs, profile="paper-models", device=device, log=lambda line: None)
    return dict(runs={r["name"]: r["wall_time_s"] for r in manifest["runs"]},
                devices=sorted({r.get("device") for r in manifest["runs"]}))


def guarded(fn) -> dict:
    start = time.perf_counter()
    try:
        result = fn()
    except Exception as err:  # noqa: BLE001 — a failed section is recorded and the next one runs
        result = dict(error=f"{type(err).__name__}: {err}", traceback=traceback.format_exc()[-2000:])
    result["section_s"] = round(time.perf_counter() - start, 1)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu for a dry run of every section")
    parser.add_argument("--out", default="gpu_check.json")
    parser.add_argument("--sections", nargs="+", default=["env", "tests", "parity", "timings", "paper_models"],
                        choices=["env", "tests", "parity", "timings", "paper_models"])
    parser.add_argument("--quick", action="store_true", help="the smallest sizes (for a dry run)")
    parser.add_argument("--tests-budget-s", type=int, default=240)
    args = parser.parse_args()
    from helpers.core.device import configure, resolve_device

    device = resolve_device(args.device)
    configure(device)
    result: dict = dict(device=device, started=time.strftime("%Y-%m-%d %H:%M:%S"))
    sections = dict(env=lambda: environment(device), tests=lambda: gpu_tests(device, args.tests_budget_s),
                    parity=lambda: tiny_parity(device), timings=lambda: timings(device, args.quick),
                    paper_models=lambda: paper_models_pass(device, args.quick))
    for name in args.sections:
        print(f"gpu_check: {name} …", file=sys.stderr, flush=True)
        result[name] = guarded(sections[name])
        Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")  # what is done survives a kill
    print(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
