"""EAGLE-1/2 draft head: fc(concat(token embedding, feature)) + one Llama-style decoder layer (more with
--add-layers), no final norm.

arXiv 2401.15077 §3.1. The pair at sequence position i is (embedding of t_{i+1}, feature f_i); the output is the
predicted feature f_{i+1}, which the TARGET's LM head (shared, frozen, no norm in between) turns into the
distribution of t_{i+2}. Layer 0 has no input_layernorm (the residual is the fc output).

Optional reduced draft vocabulary: `vocab_ids` (sorted target ids) selects rows of the target LM head, so drafting
over Gemma's 262k vocabulary stays cheap; saved as EAGLE-3's `d2t` offsets (target = draft + d2t[draft]) and `t2d`.

Optional inference vocabulary: an EAGLE-1/2 head folder may also hold draft_vocab.json (`ids`: target ids, a subset
of the head's own draft vocabulary, the most frequent in its training data), which this playground drafts over
instead. The weights stay as trained and the file is JSON, not safetensors (vLLM reads every *.safetensors file of a
folder and refuses unknown names), so engines load the folder as before. Scoring a feature against 49,152 LM-head
rows can cost more than the head's layers; a frequent subset (FR-Spec, arXiv 2502.14856) keeps the drafts nearly as
good for less. save_head removes a stale one: new weights, new counts.

Checkpoint layout = the official EAGLE-1/2 one (config.json Llama-style + model.safetensors with `fc.weight`,
`fc.bias`, `layers.0.self_attn.*`, `layers.0.mlp.*`, `layers.0.post_attention_layernorm.weight`).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from torch import nn

from core.drafters.layers import (DraftVocab, KVWindow, Layer, layer_count, llama_layer_fields, llama_layer_json,
                                  random_init, rope_tables)
from core.drafters import storage
from core.drafters.vllm import vllm_blockers

DRAFT_VOCAB_FILE = "draft_vocab.json"  # a folder's optional inference vocabulary (see the module docstring)


@dataclass(frozen=True)
class HeadConfig:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int  # target vocabulary
    head_dim: int = 0  # 0 = hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    bias: bool = True  # fc.bias (official default when the key is absent)
    qkv_bias: bool = False
    draft_vocab_size: int = 0  # 0 = full target vocabulary
    max_position_embeddings: int = 32768
    num_layers: int = 1  # decoder layers (the official heads have one; --add-layers grows a trained head)
    extra: dict = field(default_factory=dict, compare=False)  # training card fields carried into config.json

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @classmethod
    def for_target(cls, hidden: int, vocab: int, draft_vocab: int = 0) -> "HeadConfig":
        """Own standard geometry (head_dim 64) rather than mirroring the target's layers (docs/ARCHITECTURE.md §2)."""
        heads = max(1, hidden // 64)
        return cls(hidden_size=hidden, intermediate_size=hidden * 3, num_attention_heads=heads,
                   num_key_value_heads=heads, head_dim=64, vocab_size=vocab, draft_vocab_size=draft_vocab)

    def to_json(self) -> dict:
        """Llama-style config.json as SGLang/vLLM read EAGLE heads."""
        d = {"architectures": ["LlamaForCausalLM"], **llama_layer_json(self), "bias": self.bias,
             "qkv_bias": self.qkv_bias}
        if self.draft_vocab_size:
            d["draft_vocab_size"] = self.draft_vocab_size
        d.update(self.extra)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "HeadConfig":
        return cls(**llama_layer_fields(d), bias=bool(d.get("bias", True)), qkv_bias=bool(d.get("qkv_bias", False)),
                   draft_vocab_size=int(d.get("draft_vocab_size") or 0))


class EagleHead(DraftVocab, nn.Module):
    """The draft network. No I/O in __init__; see load_head/save_head."""

    def __init__(self, c: HeadConfig, vocab_ids: torch.Tensor | None = None):
        super().__init__()
        self.config = c
        self.fc = nn.Linear(2 * c.hidden_size, c.hidden_size, bias=c.bias)
        self.layers = nn.ModuleList([Layer(c, i) for i in range(c.num_layers)])
        ids = vocab_ids if vocab_ids is not None else torch.arange(c.draft_vocab_size or c.vocab_size)
        self.register_buffer("vocab_ids", ids.long().sort().values, persistent=False)  # (Vd,) sorted target ids
        self.trained = False  # set by load_head; an untrained head is still lossless, just slow
        self.inference_vocab: torch.Tensor | None = None  # set by load_head from the folder's draft_vocab.json

    def forward(self, embeds, features, pos, past_kv=None, mask=None):
        """embeds, features: (B, T, H) -> predicted features (B, T, H) and this call's (k, v) for the cache.

        With several layers the cache stacks them along the head axis, (B, layers * kvh, L, d), so callers keep
        one (k, v) pair and concatenate along positions whatever the depth, or pass a KVWindow of a DraftKV laid
        out the same way (drafting: the new entries are written in place, and None is returned for them)."""
        x = self.fc(torch.cat([embeds, features], dim=-1))  # embedding FIRST (official order)
        c = self.config
        tables = rope_tables(pos, c.hd, c.rope_theta, x.dtype)  # one table for every layer's q and k
        windowed = isinstance(past_kv, KVWindow)
        kvh, ks, vs = c.num_key_value_heads, [], []
        for i, layer in enumerate(self.layers):
            if windowed:
                past = past_kv.layer(i, kvh)
            else:
                past = None if past_kv is None else (past_kv[0][:, i * kvh:(i + 1) * kvh],
                                                     past_kv[1][:, i * kvh:(i + 1) * kvh])
            x, (k, v) = layer(x, pos, past, mask, tables)
            ks.append(k)
            vs.append(v)
        if windowed:
            return x, None  # already in the window's buffers: nothing to stack
        return x, ((ks[0], vs[0]) if len(ks) == 1 else (torch.cat(ks, 1), torch.cat(vs, 1)))


ENGINES = ("sglang", "vllm")


def save_head(head: EagleHead, out_dir: str | Path, dtype: torch.dtype = torch.bfloat16,
              engine: str | None = None) -> None:
    """Write config.json + model.safetensors in the official EAGLE-1/2 layout (+ d2t/t2d for a reduced vocab).

    The serving engines disagree on fc's bias, so `engine` adapts the file without changing what the head computes:
    "sglang" always writes fc.bias (its EAGLE fc has a bias parameter and keeps a random initial one when the file
    has none: zeros are written for a head without bias); "vllm" refuses a head that has one (vLLM's fc has no bias
    and its loader raises on unknown names), as it refuses a reduced vocabulary (its EAGLE-1/2 drafter has no d2t).
    """
    if engine not in (None, *ENGINES):
        raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    c = head.config
    blockers = vllm_blockers(c.bias, bool(c.draft_vocab_size))
    if engine == "vllm" and blockers:
        raise ValueError("vLLM cannot read this head: " + "; ".join(blockers))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().to(dtype).contiguous().cpu() for k, v in head.state_dict().items()}
    cfg = c.to_json()
    if engine == "sglang" and not c.bias:
        sd["fc.bias"] = torch.zeros(c.hidden_size, dtype=dtype)
        cfg["bias"] = True
    if head.config.draft_vocab_size:
        sd["d2t"] = head.d2t.cpu().contiguous()
        sd["t2d"] = head.t2d().cpu().contiguous()
    storage.write_full(out, sd)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out / DRAFT_VOCAB_FILE).unlink(missing_ok=True)  # chosen for the weights this replaces


def write_draft_vocab(out_dir: str | Path, ids: torch.Tensor, record: dict | None = None) -> None:
    """Write the folder's inference vocabulary (`ids`: target ids, stored sorted) beside its weights; `record`
    (how it was chosen) is kept beside the ids for people."""
    body = {**(record or {}), "ids": ids.long().cpu().sort().values.tolist()}
    (Path(out_dir) / DRAFT_VOCAB_FILE).write_text(json.dumps(body, separators=(",", ":")) + "\n")


def read_draft_vocab(folder: str | Path, own: torch.Tensor) -> torch.Tensor | None:
    """The folder's inference vocabulary (sorted (N,) target ids), or None when it has none. ValueError unless it
    is a non-empty list of distinct integer ids inside the head's own draft vocabulary `own`."""
    path = Path(folder) / DRAFT_VOCAB_FILE
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text()).get("ids")
    except (json.JSONDecodeError, AttributeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a JSON object with 'ids' ({type(e).__name__})") from None
    if not isinstance(raw, list) or not raw or not all(type(i) is int for i in raw):
        raise ValueError(f"{path}: 'ids' must be a non-empty list of integer token ids")
    ids = torch.tensor(raw, dtype=torch.long).sort().values
    if bool((ids[1:] == ids[:-1]).any()):
        raise ValueError(f"{path}: token ids repeat")
    if not bool(torch.isin(ids, own.cpu()).all()):
        raise ValueError(f"{path}: ids outside the head's own draft vocabulary ({len(own):,} tokens)")
    return ids


def load_head(path: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
              inference_vocab: bool = True) -> EagleHead:
    """Read a head folder (model.safetensors, the compact layout or pytorch_model.bin: core/drafters/storage.py) and its
    draft_vocab.json unless `inference_vocab` is False (the head as trained, e.g. to compare with another engine)."""
    p = Path(path)
    if not (p / "config.json").exists():
        raise ValueError(f"head folder {str(p)!r} has no config.json")
    raw = json.loads((p / "config.json").read_text())
    sd = {k.removeprefix("model."): v for k, v in storage.read_state(p).items()}
    if any(k.startswith("midlayer.") for k in sd):
        raise ValueError(f"{p} is an EAGLE-3 head (midlayer.* keys); this loader reads EAGLE-1/2 heads")
    c = HeadConfig.from_json(raw)
    if "fc.bias" in sd and not c.bias:  # EAGLE #100: config says no bias but the file has one; trust the file
        c = HeadConfig(**{**asdict(c), "bias": True})
    if "fc.bias" not in sd and c.bias:
        c = HeadConfig(**{**asdict(c), "bias": False})
    c = replace(c, num_layers=max(layer_count(sd), 1))  # the weights say how many layers, whatever config.json claims
    vocab_ids = None
    if "d2t" in sd:
        d2t = sd.pop("d2t").long()
        vocab_ids = d2t + torch.arange(len(d2t))
        if len(vocab_ids) and (int(vocab_ids.min()) < 0 or int(vocab_ids.max()) >= c.vocab_size):
            # a negative or too-large id would index the target's LM head out of range (a device assert on CUDA)
            raise ValueError(f"head {p}: d2t maps draft ids outside the target vocabulary of {c.vocab_size} "
                             f"(ids {int(vocab_ids.min())}..{int(vocab_ids.max())})")
        c = HeadConfig(**{**asdict(c), "draft_vocab_size": len(d2t)})
    sd.pop("t2d", None)
    sd.pop("embed_tokens.weight", None)  # the target's embedding is used (same matrix in released heads)
    sd.pop("lm_head.weight", None)
    head = EagleHead(c, vocab_ids)
    missing, unexpected = head.load_state_dict(sd, strict=False)
    missing = [k for k in missing if k != "vocab_ids"]
    if missing or unexpected:
        raise ValueError(f"head {p}: missing keys {missing[:5]}, unexpected keys {unexpected[:5]}")
    head.trained = True
    head.inference_vocab = read_draft_vocab(p, head.vocab_ids) if inference_vocab else None
    return head.to(device=device, dtype=dtype).eval()


def init_head(c: HeadConfig, vocab_ids: torch.Tensor | None = None, seed: int = 0) -> EagleHead:
    """A freshly initialised head of the right shape (decodes losslessly; drafts badly)."""
    return random_init(EagleHead(c, vocab_ids), seed)
