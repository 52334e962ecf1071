"""EAGLE-3 draft head (arXiv 2503.01840) in the official yuhuili/EAGLE3-* checkpoint layout.

Features: the target's hidden states at HF `hidden_states` indices (2, L//2, L-3), i.e. the INPUTS of layers 2, L//2
and L-3 (un-normalised), concatenated (3 * H_target wide). `fc` fuses them to H; the head's own outputs fed back
during tree expansion are already H wide and bypass fc (as in the official code: fc only when the width differs).
One decoder layer ("midlayer") whose attention reads concat(input_layernorm(embedding), hidden_norm(feature)) (2H),
residual = the feature. Logits over the draft vocabulary = lm_head(norm(out)); draft id d maps to target id
d + d2t[d]. The pre-norm `out` is the next feature.

Keys: fc.weight [H, 3H_t] (no bias), midlayer.self_attn.{q,k,v,o}_proj.weight (q/k/v take 2H),
midlayer.mlp.{gate,up,down}_proj.weight, midlayer.{hidden_norm,input_layernorm,post_attention_layernorm}.weight,
norm.weight, lm_head.weight [Vd, H], d2t (int64), t2d (bool [V]), optional embed_tokens.weight (read, not used: the
target's own embedding is used, as for EAGLE-1/2 heads).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from core.drafters.draft_head import HeadConfig
from core.drafters.layers import (MLP, Attention, DraftVocab, RMSNorm, finish_loaded, llama_layer_fields,
                                  llama_layer_json, random_init)


@dataclass(frozen=True)
class Eagle3Config:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int  # target vocabulary
    draft_vocab_size: int
    target_hidden_size: int = 0  # 0 = hidden_size
    head_dim: int = 0
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 32768

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def th(self) -> int:
        return self.target_hidden_size or self.hidden_size

    def to_json(self) -> dict:
        d = {"architectures": ["LlamaForCausalLMEagle3"], **llama_layer_json(self),
             "draft_vocab_size": self.draft_vocab_size}
        if self.target_hidden_size:
            d["target_hidden_size"] = self.target_hidden_size
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Eagle3Config":
        return cls(**llama_layer_fields(d), draft_vocab_size=int(d.get("draft_vocab_size") or d["vocab_size"]),
                   target_hidden_size=int(d.get("target_hidden_size") or 0))


class MidLayer(nn.Module):
    def __init__(self, c: Eagle3Config):
        super().__init__()
        hc = HeadConfig(hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                        num_attention_heads=c.num_attention_heads, num_key_value_heads=c.num_key_value_heads,
                        vocab_size=c.vocab_size, head_dim=c.hd, rms_norm_eps=c.rms_norm_eps,
                        rope_theta=c.rope_theta, qkv_bias=False)
        self.self_attn = Attention(hc, in_features=2 * c.hidden_size)  # q/k/v read concat(embedding, feature)
        self.mlp = MLP(hc)
        self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, embeds, hidden, pos, past_kv, mask):
        x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1)  # embedding FIRST
        a, kv = self.self_attn(x, pos, past_kv, mask)  # one layer: its rope table is made once, inside
        h = hidden + a
        return h + self.mlp(self.post_attention_layernorm(h)), kv


class Eagle3Head(DraftVocab, nn.Module):
    """EAGLE-3 draft network; same drafting interface as EagleHead plus target taps and its own LM head."""

    is_eagle3 = True

    def __init__(self, c: Eagle3Config, d2t: torch.Tensor | None = None):
        super().__init__()
        self.config = c
        self.fc = nn.Linear(3 * c.th, c.hidden_size, bias=False)
        self.midlayer = MidLayer(c)
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.draft_vocab_size, bias=False)
        d2t = d2t if d2t is not None else torch.zeros(c.draft_vocab_size, dtype=torch.long)
        self.register_buffer("vocab_ids", (d2t.long() + torch.arange(len(d2t))), persistent=False)  # draft -> target
        self.trained = False

    @staticmethod
    def tap_layers(num_layers: int) -> tuple[int, ...]:
        """HF hidden_states indices (inputs of layers 2, L//2, L-3), clamped into [0, L-1] for very shallow targets."""
        return tuple(min(max(i, 0), max(num_layers - 1, 0)) for i in (2, num_layers // 2, num_layers - 3))

    def forward(self, embeds, features, pos, past_kv=None, mask=None):
        """features: fused target taps (3H_t wide, go through fc) or the head's own outputs (H wide, bypass fc)."""
        if features.shape[-1] == 3 * self.config.th:
            features = self.fc(features)
        return self.midlayer(embeds, features, pos, past_kv, mask)

    def draft_logits(self, out: torch.Tensor) -> torch.Tensor:
        """(..., H) pre-norm head outputs -> (..., Vd) logits over the draft vocabulary."""
        return self.lm_head(self.norm(out))



def is_eagle3_state(keys) -> bool:
    return any(k.removeprefix("model.").startswith("midlayer.") for k in keys)


def save_eagle3_head(head: Eagle3Head, out_dir: str | Path, dtype: torch.dtype = torch.bfloat16) -> None:
    from core.drafters import storage

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().to(dtype).contiguous().cpu() for k, v in head.state_dict().items()}
    sd["d2t"] = head.d2t.cpu().contiguous()
    sd["t2d"] = head.t2d().cpu().contiguous()
    storage.write_full(out, sd)
    (out / "config.json").write_text(json.dumps(head.config.to_json(), indent=2) + "\n")


def eagle3_from_state(p: Path, raw: dict, sd: dict) -> Eagle3Head:
    """Build an Eagle3Head from an already-read config dict and state dict (`model.` prefixes removed)."""
    c = Eagle3Config.from_json(raw)
    if "lm_head.weight" in sd:
        c = Eagle3Config(**{**c.__dict__, "draft_vocab_size": sd["lm_head.weight"].shape[0]})
    if "fc.weight" in sd and not c.target_hidden_size and sd["fc.weight"].shape[1] != 3 * c.hidden_size:
        c = Eagle3Config(**{**c.__dict__, "target_hidden_size": sd["fc.weight"].shape[1] // 3})
    d2t = sd.pop("d2t").long() if "d2t" in sd else None
    if d2t is None and c.draft_vocab_size != c.vocab_size:
        raise ValueError(f"EAGLE-3 head {p}: reduced draft vocabulary without a d2t map")
    if d2t is not None and len(d2t) != c.draft_vocab_size:  # one offset per LM-head row, or ids index past it
        raise ValueError(f"EAGLE-3 head {p}: d2t has {len(d2t)} entries for a draft vocabulary of "
                         f"{c.draft_vocab_size} (its lm_head rows)")
    sd.pop("t2d", None)
    sd.pop("embed_tokens.weight", None)  # the target's embedding is used
    return finish_loaded(Eagle3Head(c, d2t), sd, f"EAGLE-3 head {p}", c.vocab_size)


def init_eagle3_head(c: Eagle3Config, d2t: torch.Tensor | None = None, seed: int = 0) -> Eagle3Head:
    """A freshly initialised EAGLE-3 head (the same random init as EAGLE-1/2's; it has no biases)."""
    return random_init(Eagle3Head(c, d2t), seed)
