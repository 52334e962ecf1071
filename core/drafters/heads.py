"""The registry of draft heads: each kind's life cycle, from a fresh head to a folder to a bound `Drafter`.

A folder is matched against `HEAD_KINDS` in order, by its config.json and its weight names (read without loading
the tensors); the first match reads it. EAGLE-1/2 is last: the official layout has no marker of its own. Each entry
also says how training starts a head of its kind for a target (`init`), writes it (`save`), which target layers it
reads (`taps`), how it is described to people (`describe`), what its training minimises (`loss`) and what stops
vLLM from reading its folder (`vllm`, core/drafters/vllm.py), so the trainer, the app and the tools never branch
on the kind. Adding a head type is one module with its head, drafter and loader (e.g. core/drafters/medusa.py) and
one line here; the life-cycle fields default to "not trainable here".
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from core.drafters import medusa, storage, vllm
from core.drafters.draft_head import EagleHead, HeadConfig, init_head, load_head, save_head
from core.drafters.eagle import Eagle3Drafter, EagleDrafter
from core.drafters.eagle3_head import (Eagle3Config, Eagle3Head, eagle3_from_state, init_eagle3_head,
                                       is_eagle3_state, save_eagle3_head)
from core.engine.contract import Drafter
from core.models.target import TargetModel


@dataclass(frozen=True)
class HeadOptions:
    """What training chooses for a fresh head (core/train flags); each kind reads the fields it has."""

    draft_vocab: int = 0  # 0: the full vocabulary
    seed: int = 0
    medusa_heads: int = 5
    fc_bias: bool = True


def _not_trainable(*args, **kwargs):
    raise ValueError("this head kind has no training recipe here")


def _size(head: nn.Module) -> str:
    return f"{sum(p.numel() for p in head.parameters()) / 1e6:.1f}M parameters"


@dataclass(frozen=True)
class HeadKind:
    name: str
    head_class: type[nn.Module]
    matches: Callable[[dict, list[str]], bool]  # (config.json, weight names) -> is this kind
    read: Callable[[Path, dict, dict], nn.Module]  # (folder, config, state dict without `model.`) -> head
    drafter: Callable[[nn.Module, TargetModel], Drafter]
    # the life cycle (training, saving, people); defaults: not trainable here, described by its size
    init: Callable[[TargetModel, torch.Tensor | None, HeadOptions], nn.Module] = _not_trainable  # fresh head
    save: Callable[..., None] = _not_trainable  # (head, folder, dtype=...) in the kind's official layout
    taps: Callable[[int], tuple[int, ...]] = lambda num_layers: ()  # target layers read (hidden_states indices)
    describe: Callable[[nn.Module], list[str]] = lambda head: [_size(head)]  # the parts of describe_head's line
    loss: str = ""  # what training minimises, for the run's card ("{p_weight}" is filled in)
    card: Callable[[nn.Module], dict] = lambda head: {}  # kind-specific facts for the run's card
    label: str = ""  # the name people read ("EAGLE-1/2"); the kind's name when empty
    vllm: Callable[[dict, set[str]], list[str]] = lambda raw, keys: ["vLLM's EAGLE drafters do not read this head"]


def _read_eagle(p: Path, raw: dict, sd: dict) -> EagleHead:
    return load_head(p)


def _init_eagle(target: TargetModel, vocab_ids: torch.Tensor | None, o: HeadOptions) -> EagleHead:
    c = replace(HeadConfig.for_target(target.hidden_size, target.vocab_size, o.draft_vocab), bias=o.fc_bias)
    return init_head(c, vocab_ids, seed=o.seed)


def _init_eagle3(target: TargetModel, vocab_ids: torch.Tensor | None, o: HeadOptions) -> Eagle3Head:
    h = HeadConfig.for_target(target.hidden_size, target.vocab_size)
    c = Eagle3Config(hidden_size=h.hidden_size, intermediate_size=h.intermediate_size,
                     num_attention_heads=h.num_attention_heads, num_key_value_heads=h.num_key_value_heads,
                     vocab_size=target.vocab_size, draft_vocab_size=o.draft_vocab or target.vocab_size,
                     target_hidden_size=target.hidden_size, head_dim=h.hd)
    ids = vocab_ids if vocab_ids is not None else torch.arange(target.vocab_size)
    head = init_eagle3_head(c, ids - torch.arange(len(ids)), seed=o.seed)
    w = target.lm_head_weight.detach()
    with torch.no_grad():  # the draft LM head starts as the target's rows over the draft vocabulary
        head.lm_head.weight.copy_(w[ids.to(w.device)].to(head.lm_head.weight.dtype).cpu())
    return head


def _init_medusa(target: TargetModel, vocab_ids: torch.Tensor | None, o: HeadOptions) -> medusa.MedusaHead:
    return medusa.init_medusa_head(medusa.MedusaConfig(target.hidden_size, target.vocab_size, o.medusa_heads,
                                                       o.draft_vocab), vocab_ids)


def _describe_eagle(head: EagleHead) -> list[str]:
    n = len(head.layers)
    parts = [f"{n} layer{'s' if n > 1 else ''}", _size(head), f"draft vocabulary {len(head.vocab_ids):,}"]
    if head.inference_vocab is not None:  # the folder's draft_vocab.json (core/drafters/draft_head.py)
        parts[-1] = f"drafts over {len(head.inference_vocab):,} of its {len(head.vocab_ids):,}-token vocabulary"
    return parts


HEAD_KINDS: tuple[HeadKind, ...] = (
    HeadKind("medusa", medusa.MedusaHead, medusa.is_medusa, medusa.load_medusa_head, medusa.MedusaDrafter,
             init=_init_medusa, save=medusa.save_medusa_head, label="Medusa",
             describe=lambda head: [f"{len(head.medusa_head)} heads", _size(head)],
             loss="head k: soft CE against the target's distribution k+1 positions later "
                  "(draft vocab, target LM head shared), heads weighted 0.8^k",
             card=lambda head: {"medusa_heads": len(head.medusa_head)}, vllm=vllm.medusa_problems),
    HeadKind("eagle3", Eagle3Head, lambda raw, keys: is_eagle3_state(keys), eagle3_from_state, Eagle3Drafter,
             init=_init_eagle3, save=save_eagle3_head, taps=Eagle3Head.tap_layers, label="EAGLE-3",
             describe=lambda head: [_size(head), f"draft vocabulary {head.lm_head.out_features:,}"],
             loss="soft CE against the target (draft vocab), own LM head, steps weighted 0.8^j",
             vllm=vllm.eagle3_problems),
    HeadKind("eagle", EagleHead, lambda raw, keys: True, _read_eagle, EagleDrafter,
             init=_init_eagle, save=save_head, label="EAGLE-1/2", describe=_describe_eagle,
             loss="smooth_l1(feature) + {p_weight} * soft CE (draft vocab), steps weighted 0.8^j",
             vllm=vllm.eagle_problems),
)


def kind_named(name: str) -> HeadKind:
    """The registry entry called `name` ("eagle", "eagle3", "medusa", ...)."""
    for k in HEAD_KINDS:
        if k.name == name:
            return k
    raise ValueError(f"unknown head kind {name!r}; choose one of {', '.join(k.name for k in HEAD_KINDS)}")


def weight_names(p: Path) -> list[str]:
    """Weight names of a head folder without reading the tensors (core/drafters/storage.py: every layout)."""
    return storage.weight_names(p)


def _read_state(p: Path) -> dict:
    return storage.read_state(p)


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


def describe_head(head: nn.Module) -> str:
    """One line for people: kind, depth, the head's own parameters (not the target's embedding or LM head it borrows)
    and draft vocabulary, e.g. "EAGLE-1/2, 2 layers, 11.5M parameters, draft vocabulary 16,384"."""
    kind = kind_of(head)
    parts = [kind.label or kind.name, *kind.describe(head)]
    if not getattr(head, "trained", True):
        parts.append("untrained (lossless, slow)")
    return ", ".join(parts)


def make_drafter(head: nn.Module, target: TargetModel) -> Drafter:
    """Bind a head to a target through its registered drafter (ValueError when shapes do not fit)."""
    return kind_of(head).drafter(head, target)


def vllm_problems(head_dir: str | Path) -> list[str]:
    """What stops vLLM 0.32's EAGLE drafters from loading this head folder unedited (empty list: nothing); the rules
    are the head kind's own (this registry's `vllm`, core/drafters/vllm.py)."""
    p = Path(head_dir)
    kind = kind_of_folder(p)  # ValueError without config.json
    raw = json.loads((p / "config.json").read_text())
    compact = [f"the weights are stored compact ({storage.COMPACT}, int8); write the full layout first: "
               f"python -m core.interop export {p} OUT --engine vllm"] if storage.is_compact(p) else []
    return compact + kind.vllm(raw, {k.removeprefix("model.") for k in weight_names(p)})
