"""How fast this machine is, as one number that every run's record carries: the wall time of one plain forward
pass of ``benchmarks/tiled_svd.py``.

Our machines differ by up to 4x, so a run's cost in minutes says little on another machine; in plain passes it
transfers. The pass is Gemma-3-270M (raw weights) over the corpus sample of notebook 04's sweep (16,384
python-docs tokens, at most 256 a sequence, in batches of 16), at the run's torch thread count. It is measured
once per boot of the machine and thread count (``machine_yardstick``), about a minute, by the pipeline's command
before its first run that is not reused; a run on a GPU or on other machines (SLURM) records none.
"""
from __future__ import annotations

import hashlib
import json
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

PLAIN_PASS = dict(model="gemma-3-270m", processing="raw", corpus="python-docs", n_tokens=16_384, max_tokens=256,
                  batch=16)
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def plain_pass_seconds(model, sample, batch: int) -> float:
    """One forward pass over the tokens the sweep's corpus pass runs, in the same batches
    (``helpers.tiled.statistics.pass_tokens``)."""
    import torch

    from helpers.tiled.statistics import pass_tokens

    start = time.perf_counter()
    for positions in sample.halves().values():
        for _, tokens in pass_tokens(sample, positions, batch):
            with torch.no_grad():
                model.body(input_ids=tokens.to(model.device))
    return time.perf_counter() - start


def measure(threads: int) -> float:
    """Seconds of one plain pass (``PLAIN_PASS``) at ``threads`` torch threads, measured as the benchmark does."""
    import torch

    from helpers.core.models import load_model
    from helpers.tiled.corpus import sample_tokens

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model = load_model(PLAIN_PASS["model"], processing=PLAIN_PASS["processing"])
        sample = sample_tokens(model.tokenizer, PLAIN_PASS["corpus"], n_tokens=PLAIN_PASS["n_tokens"],
                               max_tokens=PLAIN_PASS["max_tokens"], tokenizer_name=PLAIN_PASS["model"])
        return plain_pass_seconds(model, sample, PLAIN_PASS["batch"])
    finally:
        torch.set_num_threads(before)


def measure_apart(threads: int) -> float:
    """``measure`` in a process of its own, so that the pipeline's process keeps none of its memory."""
    import subprocess
    import sys

    code = f"from helpers.pipeline.yardstick import measure; print(measure({int(threads)}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"measuring the yardstick failed: {done.stderr.strip()[-2000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def machine_key(threads: int) -> dict:
    """What a measurement holds for: this boot of this machine, its processor, and the thread count."""
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in _cpuinfo() if line.startswith("model name")),
               platform.processor() or platform.machine())
    boot = BOOT_ID.read_text().strip() if BOOT_ID.exists() else platform.node()
    return dict(boot=boot, cpu=cpu, torch=torch.__version__, threads=int(threads))


def _cpuinfo() -> list[str]:
    path = Path("/proc/cpuinfo")
    return path.read_text().splitlines() if path.exists() else []


def machine_yardstick(threads: int, log=print, measure_fn=measure_apart) -> dict:
    """This machine's plain pass at ``threads``: read from the cache when measured since the last boot, else
    measured now (``measure_fn``) and kept. Returns ``{"plain_pass_s", "threads", "cpu", "measured_on"}``."""
    from helpers.core.cache import atomic_write_json, cache_dir

    key = machine_key(threads)
    path = cache_dir("yardstick") / (hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16] + ".json")
    if path.exists():
        try:
            saved = json.loads(path.read_text())
        except json.JSONDecodeError:
            saved = {}
        if saved.get("key") == key and isinstance(saved.get("plain_pass_s"), (int, float)) and saved["plain_pass_s"] > 0:
            return {k: saved[k] for k in ("plain_pass_s", "threads", "cpu", "measured_on")}
    log(f"measuring this machine's yardstick: one plain forward pass of benchmarks/tiled_svd.py at {threads} "
        f"threads (about a minute, once per boot)")
    seconds = float(measure_fn(threads))
    if not seconds > 0:
        raise ValueError(f"a plain pass measured {seconds!r} s: expected a positive time")
    record = dict(plain_pass_s=round(seconds, 1), threads=int(threads), cpu=key["cpu"],
                  measured_on=datetime.now(timezone.utc).strftime("%Y-%m-%d"))
    atomic_write_json(path, {**record, "key": key})
    log(f"yardstick: {record['plain_pass_s']} s")
    return record
