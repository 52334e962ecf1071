"""Medusa: token-level drafting from the target's last feature (Cai et al. 2024, arXiv 2401.10774), for the race
against EAGLE's feature-level drafting.

K residual heads read the target's post-norm feature f_t at the last committed position (the one whose LM head
chose the root token) and each guesses one token further ahead: head k (k = 0..K-1) scores the token k + 1 places
after the root, i.e. t + 2 + k. Unlike an EAGLE head, no head sees the tokens guessed before it: every branch of a
level gets the same top-k, so the tree is grown from products of per-level probabilities (`grow_beam`, the same
top-k expansion and rerank as EAGLE-2). Scores go through the target's own LM head rows over the draft vocabulary
(shared and frozen, as for our EAGLE-1/2 heads), so a head costs one H x H matrix.

Layout (config.json + model.safetensors): `medusa_head.{k}.0.linear.weight/bias` as in the official Medusa
checkpoints (each head one ResBlock), `d2t`/`t2d` for the draft vocabulary as in EAGLE-3 heads; config.json says
`"architectures": ["MedusaModel"]`, `medusa_num_heads`, `medusa_num_layers` (1) and `shared_lm_head: true`.
Training (`python -m core.train --head-type medusa`) reads the same feature shards as the EAGLE heads and uses
`losses` below: soft cross-entropy against the target's own distribution k + 1 positions later, weighted 0.8^k.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from core.models import choices
from core.models import kernels
from core.engine.config import TreeConfig
from core.drafters.layers import finish_loaded
from core.engine.contract import DraftPool, grow_beam
from core.drafters.eagle import check_compatible
from core.models.target import TargetModel


@dataclass(frozen=True)
class MedusaConfig:
    hidden_size: int
    vocab_size: int  # target vocabulary
    num_heads: int = 5
    draft_vocab_size: int = 0  # 0 = full target vocabulary

    def to_json(self) -> dict:
        return {"architectures": ["MedusaModel"], "model_type": "medusa", "hidden_size": self.hidden_size,
                "vocab_size": self.vocab_size, "medusa_num_heads": self.num_heads, "medusa_num_layers": 1,
                "draft_vocab_size": self.draft_vocab_size or self.vocab_size, "shared_lm_head": True,
                "torch_dtype": "bfloat16"}

    @classmethod
    def from_json(cls, d: dict) -> "MedusaConfig":
        if int(d.get("medusa_num_layers", 1)) != 1:
            raise ValueError(f"Medusa heads with {d['medusa_num_layers']} ResBlocks per head are not supported (1)")
        return cls(hidden_size=int(d["hidden_size"]), vocab_size=int(d["vocab_size"]),
                   num_heads=int(d["medusa_num_heads"]), draft_vocab_size=int(d.get("draft_vocab_size") or 0))


class ResBlock(nn.Module):
    """x + SiLU(W x + b); W starts at zero so an untrained head repeats the target's own next-token guess."""

    def __init__(self, hidden: int):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.linear(x))


class MedusaHead(nn.Module):
    """K ResBlocks over the target's last feature; the target's LM head rows (draft vocabulary) score them."""

    def __init__(self, c: MedusaConfig, vocab_ids: torch.Tensor | None = None):
        super().__init__()
        self.config = c
        self.medusa_head = nn.ModuleList([nn.Sequential(ResBlock(c.hidden_size)) for _ in range(c.num_heads)])
        ids = vocab_ids if vocab_ids is not None else torch.arange(c.draft_vocab_size or c.vocab_size)
        self.register_buffer("vocab_ids", ids.long().sort().values, persistent=False)  # (Vd,) sorted target ids
        self.trained = False

    def forward(self, feat: torch.Tensor) -> torch.Tensor:
        """(..., H) target features -> (..., K, H): head k's feature for the token k + 2 places ahead."""
        return torch.stack([h(feat) for h in self.medusa_head], dim=-2)


@dataclass
class MedusaState:
    feat: torch.Tensor | None = None  # (H,) the target's feature at the last committed position


class MedusaDrafter:
    """The `Drafter` contract (core/drafters/eagle.py) over a MedusaHead: commit keeps the last real feature, propose runs
    the K heads once and grows the tree from their per-level top-k."""

    kind = "medusa"
    output_layers: tuple[int, ...] = ()

    def __init__(self, head: MedusaHead, target: TargetModel):
        check_compatible(head, target)
        self.head = head.to(device=target.device, dtype=target.dtype).eval()
        self.target = target
        self.vocab_ids = self.head.vocab_ids.to(target.device)
        self.w_draft = target.lm_head_weight[self.vocab_ids]  # (Vd, H)
        self.packed = kernels.PackedWeights()  # the acceleration step's choices, plain until accelerate()
        self.head_kernel = "linear"

    def accelerate(self) -> "MedusaDrafter":
        """The acceleration step (CPU): the draft rows in oneDNN's packed layout (core/models/kernels.py), kept when
        that product is timed fastest on this machine. Returns the drafter."""
        if self.target.device.type != "cpu":
            return self
        self.packed.add_within([[self.w_draft]])
        self.head_kernel = choices.pick(  # timed on this machine, or pinned (core/models/choices.py)
            "medusa_head",
            lambda: kernels.head_kernel(self.w_draft, packed=self.packed), kernels.head_candidates(self.w_draft))
        if self.head_kernel != "onednn":
            self.packed.discard()
        return self

    @property
    def trained(self) -> bool:
        return bool(self.head.trained)

    def start(self) -> MedusaState:
        return MedusaState()

    def commit(self, st: MedusaState, features: torch.Tensor, next_ids: torch.Tensor) -> int:
        st.feat = features[0, -1]  # (H,): its LM head chose next_ids[0, -1], the next root
        return 0  # the heads run in propose()

    @torch.inference_mode()
    def propose(self, st: MedusaState, root_token: int, tree: TreeConfig) -> DraftPool:
        k = min(tree.top_k, len(self.w_draft))
        out = self.head(st.feat)  # (K, H)
        logits = kernels.head_product(self.w_draft, out, self.head_kernel, self.packed)  # (K, Vd)
        logp = torch.log_softmax(logits.float(), dim=-1)
        vals, idx = torch.topk(logp, k, dim=-1)  # (K, k)
        vals, toks = vals.tolist(), self.vocab_ids[idx].tolist()
        pool = DraftPool.rooted(root_token)
        pool.forwards = 1
        return grow_beam(pool, lambda d: (vals[d], toks[d]) if d < len(vals) else None, tree)


def losses(head: MedusaHead, w_draft: torch.Tensor, feat: torch.Tensor, valid: torch.Tensor
           ) -> tuple[torch.Tensor, list[float], list[float]]:
    """Total loss and per-head (soft CE, top-1 agreement) for one batch: feat (B, S, H), valid (B, S) bool.

    Head k at position i reads f_i and is scored against the target's distribution at i + 1 + k, i.e.
    softmax(f_{i+1+k} W^T) over the draft vocabulary, which is what the target would say for token i + 2 + k.
    """
    with torch.no_grad():
        p_all = torch.softmax(feat @ w_draft.T, dim=-1)  # (B, S, Vd)
    out = head(feat)  # (B, S, K, H)
    total, ce, top1 = 0.0, [], []
    for k in range(out.shape[-2]):
        shift = k + 1
        if feat.shape[1] <= shift:
            break
        m = (valid[:, :-shift] & valid[:, shift:]).float()  # (B, S - shift)
        denom = m.sum().clamp(min=1)
        logp = torch.log_softmax((out[:, :-shift, k] @ w_draft.T).float(), dim=-1)
        p = p_all[:, shift:]
        loss = (-(p * logp).sum(-1) * m).sum() / denom
        total = total + (0.8**k) * loss
        ce.append(loss.item())
        top1.append(float(((logp.argmax(-1) == p.argmax(-1)).float() * m).sum() / denom))
    return total, ce, top1


def init_medusa_head(c: MedusaConfig, vocab_ids: torch.Tensor | None = None) -> MedusaHead:
    """Zero ResBlocks: every head starts as the target's next-token guess (lossless; drafts poorly)."""
    return MedusaHead(c, vocab_ids).eval()


def is_medusa(config: dict, keys) -> bool:
    return "medusa_num_heads" in config or any(k.startswith("medusa_head.") for k in keys)


def save_medusa_head(head: MedusaHead, out_dir: str | Path, dtype: torch.dtype = torch.bfloat16) -> None:
    from core.drafters import storage

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().to(dtype).contiguous().cpu() for k, v in head.state_dict().items()}
    ids = head.vocab_ids.cpu()
    sd["d2t"] = (ids - torch.arange(len(ids))).contiguous()
    t2d = torch.zeros(head.config.vocab_size, dtype=torch.bool)
    t2d[ids] = True
    sd["t2d"] = t2d
    storage.write_full(out, sd)
    (out / "config.json").write_text(json.dumps(head.config.to_json(), indent=2) + "\n")


def load_medusa_head(p: Path, raw: dict, sd: dict) -> MedusaHead:
    """A MedusaHead from a read config dict and state dict; refuses per-head LM heads and unknown keys."""
    c = MedusaConfig.from_json(raw)
    if any(k.endswith(".1.weight") for k in sd):
        raise ValueError(f"Medusa head {p}: has its own LM head per Medusa head; this loader reads heads that share "
                         "the target's LM head")
    vocab_ids = None
    if "d2t" in sd:
        d2t = sd.pop("d2t").long()
        vocab_ids = d2t + torch.arange(len(d2t))
        c = MedusaConfig(**{**c.__dict__, "draft_vocab_size": len(d2t)})
    sd.pop("t2d", None)
    return finish_loaded(MedusaHead(c, vocab_ids), sd, f"Medusa head {p}", c.vocab_size)
