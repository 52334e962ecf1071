"""What every draft head kind shares: the Llama layer code, the draft cache, the vocabulary maps, one random
init, and the checks a loaded state dict passes.

EAGLE-1/2 heads (core/drafters/draft_head.py), EAGLE-3 heads (eagle3_head.py) and Medusa heads (medusa.py) build on
these pieces, so a change to attention, RoPE, fusing or the cache reaches every kind at once. The modules read their
geometry from any config with the fields of `LayerGeometry` (HeadConfig, or the one EAGLE-3's midlayer builds).
"""
from __future__ import annotations

import math
from typing import Iterable, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from core.engine.kv_cache import MIN_CAPACITY
from core.models.kernels import linear_weights, tensor_version


class LayerGeometry(Protocol):
    """The config fields the layer modules read (HeadConfig has them all)."""
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    rms_norm_eps: float
    rope_theta: float
    qkv_bias: bool

    @property
    def hd(self) -> int: ...


def llama_layer_json(c) -> dict:
    """The one-Llama-layer keys every head config.json carries (EAGLE-1/2 and EAGLE-3 alike)."""
    return {
        "model_type": "llama", "hidden_act": "silu", "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size, "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads, "head_dim": c.hd,
        "num_hidden_layers": getattr(c, "num_layers", 1),
        "rms_norm_eps": c.rms_norm_eps, "rope_theta": c.rope_theta,
        "max_position_embeddings": c.max_position_embeddings, "vocab_size": c.vocab_size,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }


def llama_layer_fields(d: dict) -> dict:
    """Constructor arguments for the layer geometry shared by HeadConfig and Eagle3Config, read from config.json
    with the defaults official checkpoints rely on when a key is absent."""
    heads = d["num_attention_heads"]
    return dict(
        hidden_size=d["hidden_size"], intermediate_size=d["intermediate_size"], num_attention_heads=heads,
        num_key_value_heads=d.get("num_key_value_heads") or heads, vocab_size=d["vocab_size"],
        head_dim=d.get("head_dim") or d["hidden_size"] // heads, rms_norm_eps=d.get("rms_norm_eps", 1e-6),
        rope_theta=float(d.get("rope_theta") or 10000.0),
        max_position_embeddings=int(d.get("max_position_embeddings") or 32768),
    )


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rope_tables(pos: torch.Tensor, d: int, theta: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each (T, d), for rotate-half RoPE at any positions `pos` (T,) (no fixed-size table); computed
    once per head forward and shared by every layer's queries and keys."""
    inv = 1.0 / theta ** (torch.arange(0, d, 2, device=pos.device, dtype=torch.float32) / d)
    ang = pos.float()[:, None] * inv[None, :]  # (T, d/2)
    ang = torch.cat([ang, ang], -1)  # (T, d)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x: torch.Tensor, tables: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """x (B, h, T, d) rotated by `rope_tables` (cos, sin) (T, d)."""
    cos, sin = tables
    d = x.shape[-1]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class KVWindow:
    """Where one head forward writes its new keys and values inside a draft cache kept in place: buffers
    (1, heads, capacity, d) and the first slot to write. Attention writes its t new entries at [start, start + t)
    and attends over views of [0, start + t), so a draft pass copies only its own entries (concatenating a cache
    copies all of it, for every draft level). Made by DraftKV.window; `layer` narrows it to one layer's heads."""

    def __init__(self, k: torch.Tensor, v: torch.Tensor, start: int):
        self.k, self.v, self.start = k, v, start

    def layer(self, i: int, heads: int) -> "KVWindow":
        return KVWindow(self.k[:, i * heads:(i + 1) * heads], self.v[:, i * heads:(i + 1) * heads], self.start)

    def put(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v (1, h, t, d) -> all keys and values up to them, (1, h, start + t, d) views of the buffers."""
        end = self.start + k.shape[2]
        self.k[:, :, self.start:end] = k
        self.v[:, :, self.start:end] = v
        return self.k[:, :, :end], self.v[:, :, :end]


class DraftKV:
    """A draft head's keys and values for one decode call, in place (EAGLE-1/2 heads with several layers stack
    them along the head axis): (1, heads, capacity, d) buffers that double when full. The drafter asks for a
    window at the slot it writes next: after the committed entries for a commit, after the step's earlier levels
    for a tree expansion (those are overwritten by the next commit)."""

    def __init__(self, heads: int, d: int, dtype: torch.dtype, device: torch.device | str):
        self.heads, self.d, self.dtype, self.device = heads, d, dtype, device
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def window(self, start: int, t: int) -> KVWindow:
        """Room for t entries at `start` (entries before it kept), as a KVWindow."""
        cap = 0 if self.k is None else self.k.shape[2]
        if start + t > cap:
            grown = max(2 * cap, start + t, MIN_CAPACITY)  # the target cache's growth rule (core/engine/kv_cache.py)
            k = torch.empty(1, self.heads, grown, self.d, dtype=self.dtype, device=self.device)
            v = torch.empty_like(k)
            if self.k is not None:
                k[:, :, :start], v[:, :, :start] = self.k[:, :, :start], self.v[:, :, :start]
            self.k, self.v = k, v
        return KVWindow(self.k, self.v, start)


class Fused:
    """One inference-time weight made of several row blocks (q/k/v, gate/up), so a draft step runs one product
    where the checkpoint layout has several. It is a copy: valid while the source weights are the ones it was made
    from (same tensors, dtype, device and version counter; an optimizer step or `.to()` makes it stale and the
    module falls back to its own projections), and never used while autograd records."""

    def __init__(self, linears: list[nn.Linear]):
        self.linears = linears
        self.sizes = [m.out_features for m in linears]
        self.stamp = self._stamp()
        with torch.no_grad():
            self.weight = torch.cat([m.weight for m in linears]).detach()  # (sum out, in)
            biases = [m.bias for m in linears]
            self.bias = torch.cat(biases).detach() if all(b is not None for b in biases) else None

    def _stamp(self) -> tuple:
        return tuple((tensor_version(w), w.dtype, w.device) for w in (m.weight for m in self.linears))

    def usable(self) -> bool:
        return not torch.is_grad_enabled() and self.stamp == self._stamp()

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x (..., in) -> one output per source block, split from a single product."""
        return F.linear(x, self.weight, self.bias).split(self.sizes, dim=-1)


class Attention(nn.Module):
    """Llama attention with RoPE and an explicit mask; `in_features` is 2H for EAGLE-3's concatenated input."""

    def __init__(self, c: LayerGeometry, in_features: int = 0):
        super().__init__()
        self.c = c
        d_in = in_features or c.hidden_size
        self.q_proj = nn.Linear(d_in, c.num_attention_heads * c.hd, bias=c.qkv_bias)
        self.k_proj = nn.Linear(d_in, c.num_key_value_heads * c.hd, bias=c.qkv_bias)
        self.v_proj = nn.Linear(d_in, c.num_key_value_heads * c.hd, bias=c.qkv_bias)
        self.o_proj = nn.Linear(c.num_attention_heads * c.hd, c.hidden_size, bias=False)
        self.fused: Fused | None = None  # q/k/v as one product at inference (`fuse`)

    def fuse(self) -> list[torch.Tensor]:
        """Make the fused q/k/v weight; returns the 2-D weights an inference forward now multiplies."""
        self.fused = Fused([self.q_proj, self.k_proj, self.v_proj])
        return [self.fused.weight, self.o_proj.weight]

    def forward(self, x, pos, past_kv, mask, tables=None):
        """x (B, T, H); past_kv: (k, v) each (B, kvh, L, d), a KVWindow (B = 1: the new entries go into its buffer
        at L = its start) or None; mask (B|1, 1, T, L+T) bool or None=causal; tables: the forward's `rope_tables`
        (made here when not given)."""
        b, t, _ = x.shape
        c = self.c
        if self.fused is not None and self.fused.usable():
            q, k, v = self.fused(x)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.view(b, t, c.num_attention_heads, c.hd).transpose(1, 2)
        k = k.view(b, t, c.num_key_value_heads, c.hd).transpose(1, 2)
        v = v.view(b, t, c.num_key_value_heads, c.hd).transpose(1, 2)
        tables = tables if tables is not None else rope_tables(pos, c.hd, c.rope_theta, q.dtype)
        q, k = apply_rope(q, tables), apply_rope(k, tables)
        new_kv = (k, v)
        if isinstance(past_kv, KVWindow):
            k, v = past_kv.put(k, v)
        elif past_kv is not None:
            k, v = torch.cat([past_kv[0], k], 2), torch.cat([past_kv[1], v], 2)
        rep = c.num_attention_heads // c.num_key_value_heads
        if rep > 1:
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        if mask is None:
            mask = torch.ones(t, k.shape[2], dtype=torch.bool, device=x.device).tril_(k.shape[2] - t)[None, None]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1)), new_kv


class MLP(nn.Module):
    def __init__(self, c: LayerGeometry):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)
        self.fused: Fused | None = None  # gate/up as one product at inference (`fuse`)

    def fuse(self) -> list[torch.Tensor]:
        """Make the fused gate/up weight; returns the 2-D weights an inference forward now multiplies."""
        self.fused = Fused([self.gate_proj, self.up_proj])
        return [self.fused.weight, self.down_proj.weight]

    def forward(self, x):
        if self.fused is not None and self.fused.usable():
            gate, up = self.fused(x)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(F.silu(gate) * up)


class Layer(nn.Module):
    """Llama decoder layer; layer 0 has no input_layernorm (its residual is the fc output), later layers have one
    (the official EAGLE layout for index > 0)."""

    def __init__(self, c: LayerGeometry, index: int = 0):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        if index:
            self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, x, pos, past_kv, mask, tables=None):
        h = self.input_layernorm(x) if hasattr(self, "input_layernorm") else x
        a, kv = self.self_attn(h, pos, past_kv, mask, tables)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), kv


class DraftVocab:
    """The draft vocabulary's two maps, from a head's `vocab_ids` ((Vd,) sorted target ids) and `config.vocab_size`:
    `d2t` (draft id -> target id offsets, EAGLE-3's layout) and `t2d()` (which target ids are drafted)."""

    @property
    def d2t(self) -> torch.Tensor:
        return self.vocab_ids - torch.arange(len(self.vocab_ids), device=self.vocab_ids.device)

    def t2d(self) -> torch.Tensor:
        m = torch.zeros(self.config.vocab_size, dtype=torch.bool, device=self.vocab_ids.device)
        m[self.vocab_ids] = True
        return m


def fuse_projections(head: nn.Module) -> list[torch.Tensor]:
    """Fuse q/k/v and gate/up in every layer of `head` (EAGLE-1/2 or EAGLE-3) for drafting, and return the 2-D
    weights its inference forward then multiplies: what a drafter packs (core/models/kernels.py). The checkpoint layout,
    the training path and the values stay as they are (each output row is the same dot product)."""
    weights: list[torch.Tensor] = []
    covered: set[int] = set()  # the projections fused away and the weights already listed (o_proj, down_proj)
    for m in head.modules():
        if isinstance(m, (Attention, MLP)):
            weights += m.fuse()
            covered |= {id(lin.weight) for lin in m.fused.linears} | {id(w) for w in weights}
    return [w for w in linear_weights(head) if id(w) not in covered] + weights


def layer_count(names: Iterable[str]) -> int:
    """Decoder layers named in an EAGLE-1/2 state dict's keys (`layers.N.*`, N from 0); 0 when none."""
    return 1 + max((int(k.split(".")[1]) for k in names if k.startswith("layers.")), default=-1)


def finish_loaded(head: nn.Module, sd: dict, what: str, vocab_size: int) -> nn.Module:
    """Load `sd` into a freshly built head (EAGLE-3, Medusa), refusing missing or unknown keys and a draft
    vocabulary (d2t) that maps outside the target's; marks the head trained. `what` names it in the messages."""
    missing, unexpected = head.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise ValueError(f"{what}: missing keys {missing[:5]}, unexpected keys {unexpected[:5]}")
    ids = head.vocab_ids
    if len(ids) and (int(ids.max()) >= vocab_size or int(ids.min()) < 0):
        raise ValueError(f"{what}: d2t maps outside the target vocabulary of {vocab_size}")
    head.trained = True
    return head


def random_init(head: nn.Module, seed: int = 0) -> nn.Module:
    """`head` (any kind) with every 2-D weight drawn from N(0, 1/fan_in) by a generator seeded with `seed`, in
    parameter order, and every bias zero; norms keep their ones. Returned in eval mode: it decodes losslessly and
    drafts badly until trained."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in head.named_parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / math.sqrt(p.shape[1])))
            elif name.endswith("bias"):
                p.zero_()
    return head.eval()
