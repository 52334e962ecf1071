"""The drafter contract (core/drafters/eagle.py): every registered drafter decodes losslessly through the same EAGLE-2 loop,
and the Medusa head (core/drafters/medusa.py) saves, loads, trains and grows its tree as documented.

The sampling side of "lossless for every drafter" is in tests/engine/test_sampling.py (chi-square per drafter kind)."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from conftest import DRAFTER_KINDS, KINDS, PROMPT, run, tiny_drafter, tiny_target
from core.engine.baseline import BaselineDecoder
from core.engine.config import DecodeConfig, TreeConfig
from core.engine.contract import DraftPool, Drafter, grow_beam
from core.engine.eagle import Eagle2Decoder
from core.drafters.heads import HEAD_KINDS, kind_of, load_any_head, make_drafter
from core.drafters.medusa import MedusaConfig, MedusaDrafter, MedusaHead, init_medusa_head, losses, save_medusa_head
from core.engine import tree as tree_lib

N_NEW = 60
TREES = [TreeConfig(12, 4, 4, lookup=0), TreeConfig(24, 6, 3, lookup=8), TreeConfig(2, 1, 1, lookup=0)]


@pytest.mark.parametrize("drafter_kind", DRAFTER_KINDS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_drafter_is_greedy_lossless(kind, drafter_kind):
    """Same tokens as the baseline on five model families (sliding windows included), whatever drafts."""
    tgt = tiny_target(kind)
    ref, _ = run(BaselineDecoder(tgt), PROMPT, DecodeConfig(max_new_tokens=N_NEW))
    dr = tiny_drafter(drafter_kind, tgt, seed=1)
    assert isinstance(dr, Drafter)
    for tree in TREES:
        out, events = run(Eagle2Decoder(tgt, dr), PROMPT, DecodeConfig(max_new_tokens=N_NEW, tree=tree))
        assert out == ref, f"{drafter_kind} on {kind} with {tree} differs from the baseline"
        assert events[-1].finished


def test_lossless_with_reduced_draft_vocabulary():
    tgt = tiny_target("gemma3")
    ids = torch.arange(0, 128, 3)
    ref, _ = run(BaselineDecoder(tgt), PROMPT, DecodeConfig(max_new_tokens=N_NEW))
    for k in ("eagle", "eagle3", "medusa"):
        dr = tiny_drafter(k, tgt, ids, seed=2)
        out, events = run(Eagle2Decoder(tgt, dr), PROMPT, DecodeConfig(max_new_tokens=N_NEW, tree=TREES[0]))
        assert out == ref
        drafted = {n.token_id for e in events for n in e.tree if n.source == "head"}
        assert drafted and drafted <= set(ids.tolist()), f"{k} drafted outside its draft vocabulary"


def test_decoder_method_names_the_lane():
    tgt = tiny_target("llama")
    assert Eagle2Decoder(tgt, tiny_drafter("eagle", tgt)).method == "eagle2"
    assert Eagle2Decoder(tgt, tiny_drafter("eagle3", tgt)).method == "eagle2"
    assert Eagle2Decoder(tgt, tiny_drafter("medusa", tgt)).method == "medusa"
    assert Eagle2Decoder(tgt, tiny_drafter("lookup", tgt)).method == "lookup"
    assert Eagle2Decoder(tgt, tiny_drafter("lookup", tgt)).note == ""  # nothing to train
    assert "untrained" in Eagle2Decoder(tgt, tiny_drafter("medusa", tgt)).note


def test_lookup_drafter_runs_no_draft_pass():
    tgt = tiny_target("llama")
    _, events = run(Eagle2Decoder(tgt, tiny_drafter("lookup", tgt)), PROMPT + PROMPT,
                    DecodeConfig(max_new_tokens=30, tree=TreeConfig(12, 4, 4, lookup=6)))
    assert all(e.draft_forwards == 0 for e in events)
    assert all(n.source in ("root", "lookup") for e in events for n in e.tree)


# ------------------------------------------------------------------------------------------ Medusa tree (pure)


def test_grow_beam_expands_top_k_of_each_level():
    """Level d's top-k hang under the top_k best nodes of level d - 1; scores are sums of log-probs."""
    levels = [([-0.1, -1.0], [5, 6]), ([-0.2, -2.0], [7, 8]), ([-0.3, -3.0], [9, 10])]
    pool = grow_beam(DraftPool.rooted(1), lambda d: levels[d] if d < len(levels) else None,
                     TreeConfig(total_tokens=8, depth=3, top_k=2))
    depth = tree_lib.depths(pool.parents)
    assert pool.tokens[0] == 1 and depth.count(1) == 2 and depth.count(2) == 4 and depth.count(3) == 4
    for n in range(1, len(pool.tokens)):
        assert pool.tokens[n] in levels[depth[n] - 1][1]
        parent = pool.parents[n]
        v = levels[depth[n] - 1][0][levels[depth[n] - 1][1].index(pool.tokens[n])]
        assert pool.scores[n] == pytest.approx(pool.scores[parent] + v)
    # the best chain 5 -> 7 -> 9 is there and ranks first at every level
    kept = tree_lib.select_nodes(pool.parents, pool.scores, 4)
    assert [pool.tokens[i] for i in kept] == [1, 5, 7, 9]


def test_grow_beam_stops_at_the_last_head():
    levels = [([-0.1], [5]), ([-0.2], [6])]
    pool = grow_beam(DraftPool.rooted(1), lambda d: levels[d] if d < 2 else None, TreeConfig(10, 6, 1))
    assert pool.tokens == [1, 5, 6]


def test_grow_beam_stops_below_an_unsure_level():
    """Dynamic depth for Medusa's path-independent levels: level 2's best node holds exp(-0.2 - 1.5) = 0.18, so with
    stop_below 0.3 nothing hangs under it; 0.1 lets level 3 grow."""
    levels = [([-0.2, -2.0], [5, 9]), ([-1.5], [6]), ([-0.1], [7])]
    grow = lambda stop: grow_beam(DraftPool.rooted(1), lambda d: levels[d] if d < 3 else None,  # noqa: E731
                                  TreeConfig(10, 6, 2, stop_below=stop))
    assert max(tree_lib.depths(grow(0.3).parents)) == 2 and max(tree_lib.depths(grow(0.1).parents)) == 3
    assert max(tree_lib.depths(grow(0.9).parents)) == 1  # level 1's best (0.82) is already under 0.9


def test_medusa_propose_reads_the_committed_feature():
    tgt = tiny_target("llama")
    dr = tiny_drafter("medusa", tgt, seed=4)
    st = dr.start()
    hidden, _ = tgt.forward(torch.tensor([PROMPT]), tgt.new_cache())
    assert dr.commit(st, hidden, torch.tensor([PROMPT[1:] + [0]])) == 0
    assert torch.equal(st.feat, hidden[0, -1])
    pool = dr.propose(st, 0, TreeConfig(20, 3, 4))
    assert pool.forwards == 1 and pool.parents[0] == -1 and max(tree_lib.depths(pool.parents)) == 3
    # level 1 is head 0's top-4 over the target's own LM head
    with torch.inference_mode():
        expect = torch.topk((dr.head(hidden[0, -1])[0] @ tgt.lm_head_weight.T), 4).indices.tolist()
    assert [pool.tokens[i] for i in range(1, 5)] == expect


# ------------------------------------------------------------------------------------------ Medusa layout + training


def test_medusa_checkpoint_layout_and_registry(tmp_path):
    ids = torch.arange(0, 128, 2)
    head = init_medusa_head(MedusaConfig(64, 128, num_heads=3, draft_vocab_size=len(ids)), ids)
    with torch.no_grad():
        head.medusa_head[1][0].linear.weight.normal_()
    save_medusa_head(head, tmp_path, dtype=torch.float32)
    sd = load_file(str(tmp_path / "model.safetensors"))
    assert set(sd) == {*(f"medusa_head.{k}.0.linear.{p}" for k in range(3) for p in ("weight", "bias")), "d2t", "t2d"}
    assert sd["d2t"].dtype == torch.int64 and int(sd["t2d"].sum()) == 64
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["architectures"] == ["MedusaModel"] and cfg["medusa_num_heads"] == 3 and cfg["shared_lm_head"]
    loaded = load_any_head(tmp_path)
    assert isinstance(loaded, MedusaHead) and loaded.trained and torch.equal(loaded.vocab_ids, ids)
    assert torch.equal(loaded.medusa_head[1][0].linear.weight, head.medusa_head[1][0].linear.weight)
    assert kind_of(loaded).name == "medusa" and [k.name for k in HEAD_KINDS][-1] == "eagle"
    assert isinstance(make_drafter(loaded, tiny_target("llama")), MedusaDrafter)
    with pytest.raises(ValueError, match="hidden size"):
        make_drafter(loaded, _wide_target())


def _wide_target():
    from transformers import LlamaConfig, LlamaForCausalLM

    from core.models.target import TargetModel

    c = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                    num_key_value_heads=2, vocab_size=128)
    return TargetModel(LlamaForCausalLM(c).eval(), name="wide")


def test_medusa_refuses_per_head_lm_heads(tmp_path):
    head = init_medusa_head(MedusaConfig(64, 128, num_heads=2))
    save_medusa_head(head, tmp_path, dtype=torch.float32)
    from safetensors.torch import save_file

    sd = load_file(str(tmp_path / "model.safetensors"))
    sd["medusa_head.0.1.weight"] = torch.zeros(128, 64)
    save_file(sd, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="own LM head"):
        load_any_head(tmp_path)


def test_medusa_loss_learns_the_targets_future_tokens():
    """A few steps of `losses` on the tiny target's own features raise head 0's agreement with the target's
    distribution two tokens ahead (the Medusa objective), starting from zero ResBlocks."""
    tgt = tiny_target("llama")
    out, _ = run(BaselineDecoder(tgt), PROMPT, DecodeConfig(max_new_tokens=80))
    ids = torch.tensor([PROMPT + out])
    with torch.no_grad():
        feat, _ = tgt.forward(ids, tgt.new_cache())  # (1, S, H)
    feat = feat.float().clone()  # out of inference mode: the loss needs autograd
    valid = torch.ones(ids.shape, dtype=torch.bool)
    head = MedusaHead(MedusaConfig(64, 128, num_heads=2)).train()
    w = tgt.lm_head_weight.detach().float().clone()
    opt = torch.optim.Adam(head.parameters(), lr=3e-3)
    first = None
    for _ in range(150):
        loss, ce, top1 = losses(head, w, feat, valid)
        first = first or (ce, top1)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert ce[0] < first[0][0] and top1[0] > first[1][0] + 0.2


# ------------------------------------------------------------------------------------------ extending the registry


class UnigramHead(torch.nn.Module):
    """A deliberately tiny new head type: one learned logit per token, the same guesses at every level."""

    def __init__(self, vocab: int):
        super().__init__()
        self.logits = torch.nn.Parameter(torch.zeros(vocab))
        self.trained = True


class UnigramDrafter:
    kind, trained, output_layers = "unigram", True, ()

    def __init__(self, head: UnigramHead, target):
        self.head = head

    def start(self):
        return None

    def commit(self, state, features, next_ids) -> int:
        return 0

    def propose(self, state, root_token, tree):
        vals, toks = torch.topk(torch.log_softmax(self.head.logits.float(), -1), tree.top_k)
        return grow_beam(DraftPool.rooted(root_token), lambda d: (vals.tolist(), toks.tolist()), tree)


def test_a_new_drafter_is_one_module_plus_one_registry_line(tmp_path, monkeypatch):
    """What core/drafters/medusa.py did for Medusa, in miniature: a head class, a drafter, a reader and a matcher, registered
    by one HeadKind line; folder loading, drafter binding and the shared loop then work unchanged, losslessly."""
    from safetensors.torch import save_file

    import core.drafters.heads as heads

    kind = heads.HeadKind("unigram", UnigramHead, lambda raw, keys: "unigram_vocab" in raw,
                          lambda p, raw, sd: _unigram(raw, sd), UnigramDrafter)
    monkeypatch.setattr(heads, "HEAD_KINDS", (kind, *heads.HEAD_KINDS))  # the one registry line
    tgt = tiny_target("qwen3")
    ref, _ = run(BaselineDecoder(tgt), PROMPT, DecodeConfig(max_new_tokens=N_NEW))
    logits = torch.zeros(128)
    logits[torch.tensor(ref[:8])] = 5.0  # it likes the tokens the target is about to say
    save_file({"logits": logits}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"unigram_vocab": 128}))
    head = load_any_head(tmp_path)
    dr = make_drafter(head, tgt)
    assert isinstance(head, UnigramHead) and isinstance(dr, UnigramDrafter) and isinstance(dr, Drafter)
    dec = Eagle2Decoder(tgt, dr)
    out, events = run(dec, PROMPT, DecodeConfig(max_new_tokens=N_NEW, tree=TreeConfig(10, 3, 3, lookup=0)))
    assert dec.method == "unigram" and out == ref
    assert any(e.accepted_drafts for e in events)  # its guesses were verified and some accepted


def _unigram(raw: dict, sd: dict) -> UnigramHead:
    head = UnigramHead(int(raw["unigram_vocab"]))
    head.load_state_dict(sd)
    return head


def test_every_head_kind_describes_itself():
    """core.drafters.heads.describe_head names the kind, its depth and its own size (what the app's info line shows)."""
    from core.drafters.heads import describe_head

    tgt = tiny_target("llama")
    lines = {k: describe_head(tiny_drafter(k, tgt).head) for k in ("eagle", "eagle3", "medusa")}
    assert lines["eagle"].startswith("EAGLE-1/2, 1 layer, ") and "draft vocabulary 128" in lines["eagle"]
    assert lines["eagle3"].startswith("EAGLE-3, ") and "draft vocabulary 128" in lines["eagle3"]
    assert lines["medusa"].startswith("Medusa, 4 heads, ")
    assert all("M parameters" in v and v.endswith("untrained (lossless, slow)") for v in lines.values())


def test_decoder_for_binds_every_kind_through_the_registry(tmp_path):
    """core.pipeline.decoder_for is the one place a speculative decoder is built: a loaded head or a folder becomes
    its kind's drafter, None the lookup drafter alone, and a head for another target is refused in one line."""
    from core.drafters.lookup import LookupDrafter
    from core.pipeline import decoder_for

    tgt = tiny_target("llama")
    ref, _ = run(BaselineDecoder(tgt), PROMPT, DecodeConfig(max_new_tokens=N_NEW))
    for k in ("eagle", "eagle3", "medusa"):
        dec = decoder_for(tiny_drafter(k, tgt).head, tgt)
        assert dec.drafter.kind == k and dec.method == ("medusa" if k == "medusa" else "eagle2")
        assert run(dec, PROMPT, DecodeConfig(max_new_tokens=N_NEW, tree=TREES[1]))[0] == ref
    assert isinstance(decoder_for(None, tgt).drafter, LookupDrafter)
    save_medusa_head(init_medusa_head(MedusaConfig(64, 128, num_heads=2)), tmp_path / "m", dtype=torch.float32)
    assert isinstance(decoder_for(tmp_path / "m", tgt).drafter, MedusaDrafter)
    assert decoder_for(tmp_path / "m", tgt, "medusa-b").method == "medusa-b"
    with pytest.raises(ValueError, match="hidden size"):
        decoder_for(tmp_path / "m", _wide_target())
    with pytest.raises(ValueError, match="not a folder"):
        decoder_for(tmp_path / "nothing", tgt)
