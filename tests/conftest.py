import functools
import os
import socket
import sys
from pathlib import Path

import pytest
import torch

from helpers.core.models import load_model

TINY_MODELS = ["tiny-gpt2", "tiny-llama", "tiny-gemma3", "tiny-gemma2"]
EMBEDDED_MODELS = ["gemma-3-270m", "smollm2-135m"]
PROMPTS = ["When Mary and John went to the store, John gave a drink to",
           "The war lasted from the year 1732 to the year 17 and after"]


@functools.lru_cache(maxsize=None)
def cached_model(name: str, processing: str, device: str = "cpu"):
    return load_model(name, processing=processing, device=device)


@functools.lru_cache(maxsize=None)
def cached_run(name: str, processing: str):
    """Logits and full activation cache of the shared prompts (first one only for real models)."""
    model = cached_model(name, processing)
    tokens = model.to_tokens(PROMPTS[:1])
    with torch.no_grad():
        logits, cache = model.bridge.run_with_cache(tokens)
    return model, tokens, logits, cache


def final_residual(model, task) -> torch.Tensor:
    """[n, d] float64: the residual stream entering the final norm at each prompt's answer position."""
    last = f"blocks.{model.n_layers - 1}.hook_resid_post"
    with torch.no_grad():
        _, cache = model.bridge.run_with_cache(task.clean, names_filter=[last])
    return cache[last][torch.arange(len(task)), task.answer_pos].double()


def pytest_addoption(parser):
    parser.addoption("--run-gpu", action="store_true",
                     help="run the tests marked gpu (they need CUDA: make test-gpu); without it they are deselected")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(name in item.name for name in EMBEDDED_MODELS):
            item.add_marker(pytest.mark.slow)
    if config.getoption("--run-gpu"):
        if not torch.cuda.is_available():
            raise pytest.UsageError("--run-gpu: torch sees no CUDA GPU on this machine (torch.cuda.is_available() is False)")
        return
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if gpu:  # reported as deselected, never as passed or skipped
        config.hook.pytest_deselected(items=gpu)
        items[:] = [item for item in items if not item.get_closest_marker("gpu")]


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    """Each device a test's public entry points must work on: the CPU everywhere, CUDA under --run-gpu."""
    return request.param


class NetworkBlocked(ConnectionRefusedError):
    """Raised by every socket connection in tests: the project must work with no network at all."""


@pytest.fixture(autouse=True)
def no_network(request, monkeypatch):
    """Every test runs with socket connections refused (loopback too), unless marked ``requires_hub``.
    Notebook kernels run in subprocesses, where this does not reach; their tests set HF_HUB_OFFLINE."""
    if request.node.get_closest_marker("requires_hub"):
        return

    def refuse(self, address, *args, **kwargs):
        raise NetworkBlocked(f"test tried to connect to {address!r}: tests run offline")

    resolve = socket.getaddrinfo

    def resolve_loopback_only(host, *args, **kwargs):
        if host not in (None, "", "localhost", "127.0.0.1", "::1"):
            raise NetworkBlocked(f"test tried to resolve {host!r}: tests run offline")
        return resolve(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", resolve_loopback_only)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


CLUSTER_DEPS = Path(__file__).resolve().parents[1] / ".cluster-deps"
CLUSTER_PACKAGES = "submitit==1.5.4 cloudpickle==3.1.2"


@pytest.fixture
def submitit_importable(monkeypatch):
    """submitit for the SLURM executor's tests, from .cluster-deps: `make test` installs it there, apart from
    .venv, so that installing it changes no run's record of the installed packages. The folder goes on
    PYTHONPATH too, for the job processes submitit starts. Missing, the test fails with the command."""
    if not (CLUSTER_DEPS / "submitit").is_dir():
        pytest.fail(f"submitit is not in {CLUSTER_DEPS}: run `make test`, or `.venv/bin/python -m pip install "
                    f"--target .cluster-deps --no-deps {CLUSTER_PACKAGES}`")
    monkeypatch.setattr(sys, "path", [*sys.path, str(CLUSTER_DEPS)])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(CLUSTER_DEPS)])))
