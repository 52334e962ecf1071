"""The registry of draft heads: how a head folder is recognised, read, and bound to a target as a `Drafter`.

A folder is matched against `HEAD_KINDS` in order, by its config.json and its weight names (read without loading
the tensors); the first match reads it. EAGLE-1/2 is last: the official layout has no marker of its own. Adding a
head type is one module with its head, drafter and loader (e.g. core/drafters/medusa.py) and one line here.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from core.drafters import medusa
from core.drafters.draft_head import EagleHead, load_head
from core.engine.contract import Drafter
from core.drafters.eagle import Eagle3Drafter, EagleDrafter
from core.drafters.eagle3_head import Eagle3Head, eagle3_from_state, is_eagle3_state
from core.models.target import TargetModel


@dataclass(frozen=True)
class HeadKind:
    name: str
    head_class: type[nn.Module]
    matches: Callable[[dict, list[str]], bool]  # (config.json, weight names) -> is this kind
    read: Callable[[Path, dict, dict], nn.Module]  # (folder, config, state dict without `model.`) -> head
    drafter: Callable[[nn.Module, TargetModel], Drafter]


def _read_eagle(p: Path, raw: dict, sd: dict) -> EagleHead:
    return load_head(p)


HEAD_KINDS: tuple[HeadKind, ...] = (
    HeadKind("medusa", medusa.MedusaHead, medusa.is_medusa, medusa.load_medusa_head, medusa.MedusaDrafter),
    HeadKind("eagle3", Eagle3Head, lambda raw, keys: is_eagle3_state(keys), eagle3_from_state, Eagle3Drafter),
    HeadKind("eagle", EagleHead, lambda raw, keys: True, _read_eagle, EagleDrafter),
)


def weight_names(p: Path) -> list[str]:
    """Weight names of a head folder without reading the tensors (safetensors), or by loading a .bin safely."""
    if (p / "model.safetensors").exists():
        from safetensors import safe_open

        with safe_open(str(p / "model.safetensors"), framework="pt") as f:
            return list(f.keys())
    return list(_read_state(p))


def _read_state(p: Path) -> dict:
    if (p / "model.safetensors").exists():
        from safetensors.torch import load_file

        return load_file(str(p / "model.safetensors"))
    if (p / "pytorch_model.bin").exists():
        return torch.load(str(p / "pytorch_model.bin"), map_location="cpu", weights_only=True)
    raise ValueError(f"head folder {str(p)!r} has neither model.safetensors nor pytorch_model.bin")


def kind_of_folder(path: str | Path) -> HeadKind:
    p = Path(path)
    if not (p / "config.json").exists():
        raise ValueError(f"head folder {str(p)!r} has no config.json")
    raw = json.loads((p / "config.json").read_text())
    keys = [k.removeprefix("model.") for k in weight_names(p)]
    return next(k for k in HEAD_KINDS if k.matches(raw, keys))


def load_any_head(path: str | Path, dtype: torch.dtype = torch.float32,
                  device: str | torch.device = "cpu") -> nn.Module:
    """Read any registered head folder (EAGLE-1/2 and EAGLE-3 in the official layouts, Medusa)."""
    p = Path(path)
    kind = kind_of_folder(p)
    raw = json.loads((p / "config.json").read_text())
    sd = {} if kind.name == "eagle" else {k.removeprefix("model."): v for k, v in _read_state(p).items()}
    return kind.read(p, raw, sd).to(device=device, dtype=dtype).eval()


def kind_of(head: nn.Module) -> HeadKind:
    """The registry entry of a head object (the most specific class wins, so a subclass keeps its parent's kind)."""
    for k in HEAD_KINDS:
        if isinstance(head, k.head_class):
            return k
    raise ValueError(f"no drafter is registered for {type(head).__name__}")


LABELS = {"eagle": "EAGLE-1/2", "eagle3": "EAGLE-3", "medusa": "Medusa"}


def describe_head(head: nn.Module) -> str:
    """One line for people: kind, depth, the head's own parameters (not the target's embedding or LM head it borrows)
    and draft vocabulary, e.g. "EAGLE-1/2, 2 layers, 11.5M parameters, draft vocabulary 16,384"."""
    kind = kind_of(head).name
    size = f"{sum(p.numel() for p in head.parameters()) / 1e6:.1f}M parameters"
    if kind == "eagle":
        n = len(head.layers)
        parts = [f"{n} layer{'s' if n > 1 else ''}", size, f"draft vocabulary {len(head.vocab_ids):,}"]
        if head.inference_vocab is not None:  # the folder's draft_vocab.json (core/drafters/draft_head.py)
            parts[-1] = f"drafts over {len(head.inference_vocab):,} of its {len(head.vocab_ids):,}-token vocabulary"
    elif kind == "eagle3":
        parts = [size, f"draft vocabulary {head.lm_head.out_features:,}"]
    else:
        parts = [f"{len(head.medusa_head)} heads", size]
    parts.insert(0, LABELS[kind])
    if not getattr(head, "trained", True):
        parts.append("untrained (lossless, slow)")
    return ", ".join(parts)


def make_drafter(head: nn.Module, target: TargetModel) -> Drafter:
    """Bind a head to a target through its registered drafter (ValueError when shapes do not fit)."""
    return kind_of(head).drafter(head, target)
