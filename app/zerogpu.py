"""Hugging Face ZeroGPU: whether this process runs on it, the GPU reservation a request declares, and what start-up
does differently there.

Every Gradio Space has the `spaces` package installed, CPU Spaces too, so being able to import it says nothing.
ZeroGPU is on when the package's own configuration says so (`spaces.config.Config.zero_gpu`, which it reads from
the SPACES_ZERO_GPU environment variable that ZeroGPU hardware sets); without the package that variable decides.
On ZeroGPU a GPU is attached only while a `spaces.GPU`-decorated function runs, in a forked worker, for the duration
that function declares; the declared duration (not the time used) is charged against each visitor's daily quota.
So the reservation follows the request (tokens x lanes) and stays tight, start-up does no device work (no warm-up,
no `--tree auto` timing: the GPU is not attached yet), and the models are placed on CUDA at start-up, which ZeroGPU
intercepts and moves onto the GPU when one is attached.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from types import ModuleType

TRUE = ("1", "t", "true")  # what `spaces` itself accepts for SPACES_ZERO_GPU (spaces/config.py `boolean`)
GPU_START_SECONDS = 10.0  # attaching the GPU and moving a <=1B model's weights onto it
GPU_SECONDS_PER_TOKEN = 0.05  # per lane: about twice an eager-PyTorch decode step of a <=1B model on one GPU


def enabled(environ: dict | None = None) -> bool:
    """True on ZeroGPU hardware: `spaces.config.Config.zero_gpu` when the package is installed, else the
    SPACES_ZERO_GPU variable read as `spaces` reads it."""
    env = os.environ if environ is None else environ
    if environ is None:
        try:
            import spaces  # type: ignore  # noqa: F401  (imported before any CUDA work, as ZeroGPU requires)
        except ImportError:
            spaces = None
        config = getattr(getattr(spaces, "config", None), "Config", None)
        if config is not None and hasattr(config, "zero_gpu"):
            return bool(config.zero_gpu)
    return str(env.get("SPACES_ZERO_GPU", "")).strip().lower() in TRUE


def spaces_module() -> ModuleType | None:
    """The `spaces` package when this process runs on ZeroGPU, else None (a CPU Space or a machine without it)."""
    if not enabled():
        return None
    import spaces  # type: ignore

    return spaces


def gpu_seconds(max_new_tokens: int, lanes: int = 2, cap: float = 300.0) -> int:
    """The ZeroGPU reservation for one request: attach time plus GPU_SECONDS_PER_TOKEN for every token of every lane
    raced, at most `cap` (the app's time budget per request, which the forked worker cannot check itself)."""
    return max(1, int(min(cap, GPU_START_SECONDS + GPU_SECONDS_PER_TOKEN * max_new_tokens * max(1, lanes))))


@dataclass(frozen=True)
class Startup:
    """What app.py does at start-up: the device and dtype to load with, whether to warm up, the --tree spec, and a
    line saying what ZeroGPU changed (empty off ZeroGPU)."""
    device: str | None
    dtype: str | None
    warm_up: bool
    tree: str | None
    note: str = ""


def startup(zero_gpu: bool, device: str | None, dtype: str | None, tree: str | None) -> Startup:
    """Off ZeroGPU the flags as given. On ZeroGPU: CUDA and bf16 unless named (no probe of a device that is not
    attached yet: pick_dtype would ask CUDA for bf16 support), no warm-up, and 'auto' trees become the engine default
    (planning times verify passes on the device)."""
    if not zero_gpu:
        return Startup(device, dtype, True, tree)
    changes = ["no start-up warm-up"]
    if tree == "auto":
        changes.append("the auto tree needs the device at start-up: the engine default tree is used")
        tree = None
    return Startup(device or "cuda", dtype or "bf16", False, tree, "ZeroGPU: " + "; ".join(changes))
