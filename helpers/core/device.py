"""Where a run computes, and with which numerics: the one place that resolves a device name, pins the
floating-point settings and records them.

- ``resolve_device``: ``"auto"`` is ``cuda`` where a CUDA GPU is present, otherwise ``cpu``. Asking for
  ``cuda`` on a machine without one is an error, never a silent fallback to the CPU; MPS is refused
  (TransformerLens has reported an inverted IOI logit difference on it).
- ``configure``: full float32 matrix products (TF32 off), deterministic CUDA kernels where torch has them,
  asserted before a model is loaded (``helpers.core.models.load_model`` calls it).
- ``numerics``: the record of all that (device, GPU, torch and CUDA builds, precision flags, threads), which
  enters every summary, the pipeline's fingerprint, the evaluator's digest and, off the CPU, the mask-cache
  key, so that a result computed on one device is never reused as another's.

What stays on the CPU on every device (docs/methods.md §0): weight SVDs, QR and eigendecompositions in
float64 (so that a circuit file's direction k names the same vector everywhere) and every seeded random
draw (CPU generators, then moved), so that controls and noise are the same numbers on every device.
"""
from __future__ import annotations

import os

import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda")
"""What a notebook's ``device`` parameter and ``--device`` accept (``cuda:N`` too, for one GPU of several)."""

CUBLAS_WORKSPACE = ":4096:8"  # deterministic cuBLAS on older torch builds; harmless on newer ones


class DeviceUnavailableError(RuntimeError):
    """The device asked for is not on this machine."""


def resolve_device(name: str | torch.device) -> str:
    """``"cpu"`` or ``"cuda"``/``"cuda:N"`` for ``name``; ``"auto"`` picks CUDA when present."""
    text = str(name).strip().lower()
    if text == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if text == "cpu":
        return "cpu"
    if text == "mps" or text.startswith("mps:"):
        raise DeviceUnavailableError(
            f"device={name!r} is refused: TransformerLens has reported wrong logits on Apple's MPS backend "
            f"(an inverted IOI logit difference). Use device='cpu'.")
    if text == "cuda" or (text.startswith("cuda:") and text[5:].isdigit()):
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(
                f"device={name!r} was asked for, but torch {torch.__version__} sees no CUDA GPU on this machine "
                f"(torch.cuda.is_available() is False). Use device='auto' (the GPU where there is one, otherwise "
                f"the CPU) or device='cpu'.")
        index = int(text[5:]) if ":" in text else 0
        if index >= torch.cuda.device_count():
            raise DeviceUnavailableError(
                f"device={name!r}: this machine has {torch.cuda.device_count()} CUDA device(s), numbered from 0.")
        return text
    raise ValueError(f"device={name!r} is not one of {DEVICE_CHOICES} (or 'cuda:N'); "
                     f"'auto' takes the GPU where there is one.")


def is_cuda(device: str | torch.device) -> bool:
    return torch.device(device).type == "cuda"


def configure(device: str | torch.device) -> None:
    """Pin the numerics of a run on ``device`` and check them: float32 matrix products in full precision
    (no TF32) everywhere; on CUDA, deterministic algorithms (warning where torch has none) and the cuBLAS
    workspace that deterministic cuBLAS needs on older builds. The CPU's own settings are left as they are,
    so CPU numbers do not change."""
    if is_cuda(device):
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    check_full_precision()


def check_full_precision() -> None:
    """Refuse to go on where something in this process has turned on TF32 (or bf16) matrix products: they
    round each product's inputs to about 1e-3 and would move every number past the declared tolerances."""
    problems = []
    if torch.get_float32_matmul_precision() != "highest":
        problems.append(f"torch.get_float32_matmul_precision() is {torch.get_float32_matmul_precision()!r}")
    if torch.backends.cuda.matmul.allow_tf32:
        problems.append("torch.backends.cuda.matmul.allow_tf32 is True")
    if torch.backends.cudnn.allow_tf32:
        problems.append("torch.backends.cudnn.allow_tf32 is True")
    if problems:
        raise RuntimeError(f"reduced-precision float32 products are on ({'; '.join(problems)}); reference runs "
                           f"compute in full float32. Remove the line that turns them on "
                           f"(e.g. torch.set_float32_matmul_precision('high')), or call helpers.core.device.configure.")


def numerics(device: str | torch.device) -> dict:
    """Everything about where and how a run computes that can change its numbers."""
    device = torch.device(device)
    record = dict(device=device.type, accelerator=None, capability=None, torch=torch.__version__,
                  cuda=torch.version.cuda, matmul_precision=torch.get_float32_matmul_precision(),
                  cuda_matmul_tf32=bool(torch.backends.cuda.matmul.allow_tf32),
                  cudnn_tf32=bool(torch.backends.cudnn.allow_tf32),
                  deterministic=torch.are_deterministic_algorithms_enabled(), threads=torch.get_num_threads(),
                  dtype="float32", linalg_device="cpu", attention="eager")
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        record.update(accelerator=torch.cuda.get_device_name(index), capability=f"{major}.{minor}",
                      cudnn=torch.backends.cudnn.version(),
                      cublas_workspace=os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    return record


def off_cpu_key(device: str | torch.device) -> dict:
    """The part of ``numerics`` a cache key holds for results computed off the CPU (empty on the CPU, so
    that keys made before devices were recorded stay valid there)."""
    if torch.device(device).type == "cpu":
        return {}
    record = numerics(device)
    return {"numerics": {k: record[k] for k in ("device", "accelerator", "capability", "torch", "cuda",
                                                "matmul_precision", "cuda_matmul_tf32", "deterministic")}}
