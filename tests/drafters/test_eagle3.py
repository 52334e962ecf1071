"""Official head checkpoints (EAGLE-1/2 layouts of the yuhuili releases, EAGLE-3 with d2t/t2d), written synthetically
at tiny size: each loads, decodes losslessly vs the baseline at T=0, and a head for another target is refused.
Also: the layout save_head writes is the one SGLang / vLLM read, and chat-template prompt encoding."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import PROMPT, run, tiny_target
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, TreeConfig
from core.drafters.draft_head import EagleHead, HeadConfig, init_head, save_head
from core.drafters.eagle import Eagle3Drafter
from core.drafters.heads import make_drafter
from core.engine.eagle import Eagle2Decoder
from core.drafters.eagle3_head import Eagle3Config, Eagle3Head, init_eagle3_head, save_eagle3_head
from core.drafters.heads import load_any_head
from core.prompt import encode_prompt, prompt_mode

N = 40
CFG = DecodeConfig(max_new_tokens=N, tree=TreeConfig(12, 4, 4))


def assert_lossless(kind: str, head) -> Eagle2Decoder:
    tgt = tiny_target(kind)
    ref = run(BaselineDecoder(tgt), PROMPT, DecodeConfig(max_new_tokens=N))[0]
    dec = Eagle2Decoder(tgt, make_drafter(head, tgt))
    out, events = run(dec, PROMPT, CFG)
    assert out == ref and len(out) == N
    assert sum(e.draft_forwards for e in events) > 0  # the head really drafted
    return dec


# ----------------------------------------------------------------------------------------- EAGLE-1/2 layouts


def _official_v1(tmp_path, layout: str):
    """Write a tiny head in the layout of one released EAGLE-1/2 checkpoint; returns the target kind it matches."""
    if layout == "llama3.1":  # bias false, rope_theta 500000, GQA, pytorch_model.bin
        c = HeadConfig(64, 128, 4, 2, 128, bias=False, rope_theta=500000.0)
        raw = {"architectures": ["LlamaForCausalLM"], "bias": False, "hidden_size": 64, "intermediate_size": 128,
               "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1, "rms_norm_eps": 1e-5,
               "rope_theta": 500000.0, "vocab_size": 128, "model_type": "llama", "torch_dtype": "float16"}
        kind = "llama"
    elif layout == "vicuna":  # no bias key (-> fc.bias present), no kv field (MHA), no rope_theta, embed inside
        c = HeadConfig(64, 128, 4, 4, 128)
        raw = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
               "num_attention_heads": 4, "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "vocab_size": 128,
               "model_type": "llama"}
        kind = "llama"
    else:  # qwen2: q/k/v biases
        c = HeadConfig(64, 128, 4, 2, 128, qkv_bias=True, rope_theta=1000000.0)
        raw = {"architectures": ["Qwen2ForCausalLM"], "bias": True, "qkv_bias": True, "hidden_size": 64,
               "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1,
               "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "vocab_size": 128, "model_type": "qwen2"}
        kind = "qwen2"
    head = init_head(c, seed=3)
    sd = {k: v.clone() for k, v in head.state_dict().items()}
    if layout == "vicuna":
        sd["embed_tokens.weight"] = torch.randn(128, 64)
    if layout == "qwen2":
        sd = {"model." + k if k.startswith("layers.") else k: v for k, v in sd.items()}  # prefixed keys also read
    (tmp_path / "config.json").write_text(json.dumps(raw))
    torch.save(sd, tmp_path / "pytorch_model.bin")
    return kind, c


@pytest.mark.parametrize("layout", ["llama3.1", "vicuna", "qwen2"])
def test_official_eagle12_layouts_load_and_decode_losslessly(tmp_path, layout):
    kind, c = _official_v1(tmp_path, layout)
    head = load_any_head(tmp_path)
    assert isinstance(head, EagleHead) and head.trained
    got = head.config
    assert (got.bias, got.qkv_bias, got.rope_theta, got.num_key_value_heads, got.hd) == (
        c.bias, c.qkv_bias, c.rope_theta, c.num_key_value_heads, 16)
    if layout == "vicuna":
        assert got.bias and got.num_key_value_heads == 4 and got.rope_theta == 10000.0
    assert_lossless(kind, head)


def test_official_eagle12_mismatched_target_refused(tmp_path):
    _official_v1(tmp_path, "llama3.1")
    head = load_any_head(tmp_path)
    with pytest.raises(ValueError, match="vocabulary 128 does not match the target's 256"):
        make_drafter(head, tiny_target("llama", vocab=256))
    small = init_head(HeadConfig(32, 64, 2, 2, 128))
    with pytest.raises(ValueError, match="hidden size 32 does not match the target's 64"):
        make_drafter(small, tiny_target("llama"))


# ----------------------------------------------------------------------------------------------- EAGLE-3


def _eagle3_checkpoint(tmp_path, hidden=64, target_hidden=0, vocab=128, draft_vocab=48) -> Eagle3Head:
    g = torch.Generator().manual_seed(7)
    ids = torch.randperm(vocab, generator=g)[:draft_vocab].sort().values
    c = Eagle3Config(hidden, 96, 4, 2, vocab, draft_vocab, target_hidden_size=target_hidden)
    head = init_eagle3_head(c, ids - torch.arange(draft_vocab), seed=5)
    save_eagle3_head(head, tmp_path, dtype=torch.float32)
    raw = json.loads((tmp_path / "config.json").read_text())
    raw.pop("rope_theta")  # -> 10000
    raw.pop("head_dim")
    (tmp_path / "config.json").write_text(json.dumps(raw))
    sd = load_file(str(tmp_path / "model.safetensors"))
    sd["embed_tokens.weight"] = torch.randn(vocab, hidden)  # optional in released heads
    save_file(sd, str(tmp_path / "model.safetensors"))
    return head


def test_eagle3_checkpoint_layout(tmp_path):
    _eagle3_checkpoint(tmp_path)
    sd = load_file(str(tmp_path / "model.safetensors"))
    assert set(sd) == {
        "fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d", "embed_tokens.weight",
        *(f"midlayer.self_attn.{p}_proj.weight" for p in "qkvo"),
        *(f"midlayer.mlp.{p}_proj.weight" for p in ("gate", "up", "down")),
        *(f"midlayer.{n}.weight" for n in ("hidden_norm", "input_layernorm", "post_attention_layernorm")),
    }
    assert sd["fc.weight"].shape == (64, 192) and sd["midlayer.self_attn.q_proj.weight"].shape == (64, 128)
    assert sd["lm_head.weight"].shape == (48, 64) and sd["d2t"].dtype == torch.int64
    assert sd["t2d"].dtype == torch.bool and sd["t2d"].shape == (128,) and int(sd["t2d"].sum()) == 48
    assert torch.equal(torch.arange(48) + sd["d2t"], torch.nonzero(sd["t2d"])[:, 0])


@pytest.mark.parametrize("kind", ["llama", "qwen3", "gemma3"])
def test_eagle3_loads_and_decodes_losslessly(tmp_path, kind):
    ref_head = _eagle3_checkpoint(tmp_path)
    head = load_any_head(tmp_path)
    assert isinstance(head, Eagle3Head) and head.trained and head.config.rope_theta == 10000.0
    assert torch.equal(head.vocab_ids, ref_head.vocab_ids)
    dec = assert_lossless(kind, head)
    dr = dec.drafter
    assert isinstance(dr, Eagle3Drafter) and dr.kind == "eagle3" and len(dr.output_layers) == 3
    # every drafted token lies in the draft vocabulary (mapped through d2t)
    tgt = dec.target
    st = dr.start()
    cache = tgt.new_cache()
    hidden, taps = tgt.forward(torch.tensor([PROMPT]), cache, output_layers=dr.output_layers)
    assert taps.shape == (1, len(PROMPT), 3 * 64)
    assert dr.commit(st, taps, torch.tensor([PROMPT[1:] + [0]])) == 1
    pool = dr.propose(st, 0, TreeConfig(12, 4, 4))
    allowed = set(head.vocab_ids.tolist())
    assert set(pool.tokens[1:]) <= allowed


def test_eagle3_tap_layers():
    assert Eagle3Head.tap_layers(32) == (2, 16, 29)  # Llama 3.1 8B: inputs of layers 2, 16, 29
    assert Eagle3Head.tap_layers(2) == (1, 1, 0)  # clamped for tiny targets


def test_eagle3_mismatched_target_refused(tmp_path):
    _eagle3_checkpoint(tmp_path / "a", target_hidden=32)
    with pytest.raises(ValueError, match="EAGLE-3 head expects target hidden size 32"):
        make_drafter(load_any_head(tmp_path / "a"), tiny_target("llama"))
    _eagle3_checkpoint(tmp_path / "b", vocab=256)
    with pytest.raises(ValueError, match="vocabulary 256 does not match the target's 128"):
        make_drafter(load_any_head(tmp_path / "b"), tiny_target("llama"))


def test_eagle3_bad_d2t_refused(tmp_path):
    _eagle3_checkpoint(tmp_path)
    sd = load_file(str(tmp_path / "model.safetensors"))
    sd["d2t"] = sd["d2t"] + 1000
    save_file(sd, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="outside the target vocabulary"):
        load_any_head(tmp_path)


# -------------------------------------------------------------------------------- interoperability (SGLang / vLLM)

V12_KEYS = {
    "fc.weight", *(f"layers.0.self_attn.{p}_proj.weight" for p in "qkvo"),
    *(f"layers.0.mlp.{p}_proj.weight" for p in ("gate", "up", "down")), "layers.0.post_attention_layernorm.weight",
}


@pytest.mark.parametrize("bias", [True, False])
def test_saved_head_has_official_eagle12_layout(tmp_path, bias):
    save_head(init_head(HeadConfig(64, 128, 4, 2, 128, bias=bias)), tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
    assert cfg["num_hidden_layers"] == 1 and cfg["bias"] is bias
    for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "rms_norm_eps",
              "vocab_size"):
        assert k in cfg
    assert set(load_file(str(tmp_path / "model.safetensors"))) == V12_KEYS | ({"fc.bias"} if bias else set())


def test_saved_reduced_vocab_head_adds_only_d2t_t2d(tmp_path):
    ids = torch.tensor([0, 3, 9, 40, 127])
    save_head(init_head(HeadConfig.for_target(64, 128, 5), ids), tmp_path)
    assert set(load_file(str(tmp_path / "model.safetensors"))) == V12_KEYS | {"fc.bias", "d2t", "t2d"}
    assert json.loads((tmp_path / "config.json").read_text())["draft_vocab_size"] == 5


# ------------------------------------------------------------------------------------------------ chat templates


def _tokenizer(chat: bool):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[UNK]", "<s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "hello", "world", "be", "brief"]
    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=t, unk_token="[UNK]", bos_token="<s>")
    if chat:
        tok.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
                             "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    return tok


def test_encode_prompt_chat_and_raw():
    chat, base = _tokenizer(True), _tokenizer(False)
    assert prompt_mode(chat) == "chat" and prompt_mode(base) == "raw" and prompt_mode(chat, "raw") == "raw"
    assert encode_prompt(chat, "hello world") == [3, 6, 7, 5, 4]
    assert encode_prompt(chat, "hello", system="be brief") == [2, 8, 9, 5, 3, 6, 5, 4]
    assert encode_prompt(chat, "hello world", mode="raw") == [6, 7]
    assert encode_prompt(base, "hello world") == [6, 7]
    with pytest.raises(ValueError, match="chat_template"):
        encode_prompt(base, "hello", mode="chat")
    with pytest.raises(ValueError, match="empty"):
        encode_prompt(chat, "  ")
    with pytest.raises(ValueError, match="unknown prompt mode"):
        encode_prompt(chat, "hello", mode="xml")


def test_eagle3_fc_only_on_fused_target_features():
    head = init_eagle3_head(Eagle3Config(64, 96, 4, 2, 128, 128), seed=1)
    e, taps, own = torch.randn(1, 3, 64), torch.randn(1, 3, 192), torch.randn(1, 3, 64)
    pos = torch.arange(3)
    torch.testing.assert_close(head(e, taps, pos)[0], head.midlayer(e, head.fc(taps), pos, None, None)[0])
    torch.testing.assert_close(head(e, own, pos)[0], head.midlayer(e, own, pos, None, None)[0])
    out = torch.randn(2, 64)
    torch.testing.assert_close(head.draft_logits(out), head.lm_head(head.norm(out)))
