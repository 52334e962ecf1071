"""The target writes and reads training sequences: batched generation that keeps the features of every token it
feeds (self-distillation, on-policy), and teacher-forced features of given sequences (prefill, off-policy).

Both return `Sequence`s, (ids, feat, taps): the post-norm last hidden states the target computed, plus the EAGLE-3
layer inputs when `taps` names them. The forwards run in padded chunks of rows (`padded_chunks`) sized in tokens,
so memory stays bounded whatever the batch; docs/training.md ("Notes from the code") has the throughput measurements
behind each choice.
"""
from __future__ import annotations

import functools
from typing import Callable, Iterable

import torch
import torch.nn.functional as F

from core.engine import kv_cache
from core.models import kernels
from core.models.target import TargetModel

Sequence = tuple[list[int], torch.Tensor, torch.Tensor | None]  # ids (S,), feat (S, H) bf16, taps (S, 3H) bf16


def _pick(logits: torch.Tensor, sample: bool, gen: torch.Generator, temperature: float = 1.0) -> torch.Tensor:
    """(B, V) logits -> (B,) next ids: greedy by torch.max (faster than argmax over a contiguous row on CPU),
    sampled at `temperature` by one uniform per row against the cumulative softmax (multinomial draws a random
    number per vocabulary entry)."""
    if not sample:
        return logits.max(-1).indices
    cdf = torch.softmax(logits.float() / temperature, -1).cumsum(-1)  # (B, V)
    u = torch.rand(len(cdf), 1, generator=gen, device=cdf.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u)[:, 0].clamp(max=cdf.shape[-1] - 1)


class _Prefilled:
    """The prompts after prefill: their stacked left-padded cache, per row its prompt features (n, H) and taps
    (n, 3H) or None, and the last prompt features (B, H) the first decode step reads."""

    def __init__(self, cache, feats: list[torch.Tensor], taps: list[torch.Tensor | None], last: torch.Tensor):
        self.cache, self.feats, self.taps, self.last = cache, feats, taps, last


def _prefill(target: TargetModel, enc: list[list[int]], room: int, taps: tuple[int, ...],
             tokens_per_forward: int) -> _Prefilled:
    """Prefill `enc` in chunks of rows sorted by length, each left-padded to its own width and at most
    `tokens_per_forward` padded tokens (a chunk of one length gets no mask at all: transformers skips an all-ones
    mask and SDPA runs its causal kernel); the chunks' caches are stacked left-padded into one cache with `room`
    slots after the longest prompt (`kv_cache.stack_left`)."""
    dev, B = target.device, len(enc)
    lens = [len(e) for e in enc]
    width = max(lens)
    order = sorted(range(B), key=lens.__getitem__)  # chunks of similar lengths pad little
    parts, last = [], [None] * B  # (rows, chunk width, cache); per row its last prompt feature (H,)
    prompt_feat: list = [None] * B
    prompt_taps: list = [None] * B
    for chunk in padded_chunks(lens, order, tokens_per_forward):
        w = lens[chunk[-1]]  # the chunk's own width (rows sorted ascending)
        ids = torch.tensor([[0] * (w - lens[r]) + enc[r] for r in chunk], device=dev)  # (b, w) left-padded
        att = torch.tensor([[0] * (w - lens[r]) + [1] * lens[r] for r in chunk], device=dev)
        cache = kv_cache.new_cache()
        out = target.decoder(input_ids=ids, attention_mask=att, position_ids=(att.cumsum(-1) - 1).clamp(min=0),
                             cache=cache, use_cache=True, output_hidden_states=bool(taps))  # all-ones mask: skipped
        hid = out.last_hidden_state  # (b, w, H)
        tp = torch.cat([out.hidden_states[k] for k in taps], -1) if taps else None  # (b, w, 3H)
        for k, r in enumerate(chunk):
            prompt_feat[r], last[r] = hid[k, w - lens[r]:], hid[k, -1]
            prompt_taps[r] = tp[k, w - lens[r]:] if taps else None
        parts.append((chunk, w, cache))
        del out, tp  # every layer's hidden states when taps are on: not kept past the chunk
    cache = kv_cache.stack_left(parts, lens, width, width + room)
    return _Prefilled(cache, prompt_feat, prompt_taps, torch.stack(last))


def _decode(target: TargetModel, pre: _Prefilled, lens: list[int], new_tokens: int, sample: bool, seed: int,
            taps: tuple[int, ...], temperature: float) -> tuple[list, list, list, torch.Tensor]:
    """Decode every row after its prompt until all have fed EOS or `new_tokens - 1` steps ran. Every step hides
    the padding with boolean masks built here from one (B, L) table, instead of transformers rebuilding them from
    a 2-D mask each step, and appends to the cache in place. Returns per step the fed ids (B,), features (B, H) and
    taps (B, 3H) or None, and per row the continuation tokens fed (B,)."""
    dev, B, width = target.device, len(lens), max(lens)
    valid = torch.zeros(B, width + new_tokens, dtype=torch.bool, device=dev)  # (B, L): slots a row may attend
    for r, n in enumerate(lens):
        valid[r, width - n : width] = True
    pos = torch.tensor(lens, device=dev)[:, None]  # (B, 1) the next token's position in each row
    hid_last = pre.last  # (B, H)
    gen = torch.Generator(device=dev).manual_seed(seed)
    eos = torch.tensor(sorted(target.eos_ids) or [-1], device=dev)
    lm_head = batch_lm_head(target.lm_head_weight, B)  # (B, H) -> (B, V) contiguous logits
    fed_feats, fed_taps, fed_ids = [], [], []  # per decode step: (B, H), (B, 3H), (B,)
    alive = torch.ones(B, dtype=torch.bool, device=dev)  # row still writing (EOS not yet fed)
    lengths = torch.zeros(B, dtype=torch.long, device=dev)  # continuation tokens fed per row
    for step in range(new_tokens - 1):
        logits = lm_head(hid_last)  # (B, V) contiguous
        if target.softcap:
            logits = torch.tanh(logits / target.softcap) * target.softcap
        ids = _pick(logits, sample, gen, temperature)[:, None]  # (B, 1)
        fed_ids.append(ids[:, 0])
        slots = width + step + 1  # cache length once this token is in
        valid[:, slots - 1] = True
        out = target.decoder(input_ids=ids, position_ids=pos + step, cache=pre.cache, use_cache=True,
                             attention_mask=decode_masks(target, valid[:, :slots]),
                             output_hidden_states=bool(taps))
        hid_last = out.last_hidden_state[:, -1]  # (B, H)
        fed_feats.append(hid_last)
        fed_taps.append(torch.cat([out.hidden_states[k][:, -1] for k in taps], -1) if taps else None)
        lengths += alive.long()
        alive &= ~torch.isin(ids[:, 0], eos)
        if not bool(alive.any()):
            break
    return fed_ids, fed_feats, fed_taps, lengths


def _rows(enc: list[list[int]], pre: _Prefilled, fed_ids: list, fed_feats: list, fed_taps: list,
          lengths: torch.Tensor, taps: tuple[int, ...]) -> list[Sequence]:
    """Each row's prompt plus the continuation it fed (EOS included), with the matching features and taps, bf16 on
    the CPU."""
    seqs: list[Sequence] = []
    cont = torch.stack(fed_ids[: len(fed_feats)], 1) if fed_feats else None  # (B, steps)
    feats = torch.stack(fed_feats, 1) if fed_feats else None  # (B, steps, H)
    tapss = torch.stack(fed_taps, 1) if fed_feats and taps else None
    for r, e in enumerate(enc):
        n = int(lengths[r]) if fed_feats else 0
        row_ids = e + (cont[r, :n].tolist() if n else [])
        f, t = pre.feats[r], pre.taps[r]
        if n:
            f = torch.cat([f, feats[r, :n]])
            t = torch.cat([t, tapss[r, :n]]) if taps else None
        seqs.append((row_ids, f.to(torch.bfloat16).cpu(), t.to(torch.bfloat16).cpu() if taps else None))
    return seqs


@torch.inference_mode()
def generate_batch(target: TargetModel, enc: list[list[int]], new_tokens: int, sample: bool, seed: int,
                   taps: tuple[int, ...] = (), tokens_per_forward: int = 4096,
                   temperature: float = 1.0) -> list[Sequence]:
    """Batched generation that keeps the features of every token it feeds (no second forward).

    enc: token ids per row, non-empty, any lengths. Each row's sequence is its prompt plus the continuation up to
    and including EOS; the last sampled token is dropped unless it was fed (its feature would need one more
    forward). Features are the post-norm last hidden states the generation itself computed, so they match what the
    decoder sees at inference (incremental steps), and `taps` (HF hidden_states indices) adds the EAGLE-3 layer
    inputs, concatenated. `temperature` applies when `sample` is set (training data samples at 1;
    core/train/sources.py writes source sentences at a lower one).
    """
    lens = [len(e) for e in enc]
    pre = _prefill(target, enc, new_tokens, taps, tokens_per_forward)
    fed_ids, fed_feats, fed_taps, lengths = _decode(target, pre, lens, new_tokens, sample, seed, taps, temperature)
    kv_cache.free(pre.cache)
    return _rows(enc, pre, fed_ids, fed_feats, fed_taps, lengths, taps)
@functools.lru_cache(maxsize=None)
def _vocab_major_batch(vocab: int, hidden: int, dtype: torch.dtype, rows: int) -> bool:
    """Whether (W @ h^T)^T made contiguous beat linear()'s h @ W^T for a (rows, hidden) x (vocab, hidden) CPU
    product here: timed once per shape on synthetic tensors (a machine fact, so it is cached)."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(vocab, hidden, generator=gen).to(dtype)
    h = torch.randn(rows, hidden, generator=gen).to(dtype)
    best = kernels.fastest({True: lambda: (w @ h.T).T.contiguous(), False: lambda: F.linear(h, w)}, rounds=2)
    return best[True] < best[False]


def batch_lm_head(head: torch.Tensor, rows: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The generation batch's LM head, (rows, H) -> (rows, V) contiguous logits, in the orientation timed faster
    on this machine (which one wins depends on the processor and dtype). The values agree up to the order the GEMM
    sums in (greedy data may differ at numerical near ties, which training does not mind)."""
    if head.device.type == "cpu" and _vocab_major_batch(*head.shape, head.dtype, rows):
        return lambda h: (head @ h.T).T.contiguous()
    return lambda h: F.linear(h, head)


def decode_masks(target: TargetModel, valid: torch.Tensor) -> dict[str, torch.Tensor] | torch.Tensor:
    """(B, L) slots each row may attend -> boolean (B, 1, 1, L) masks for a one-token decode step, per layer type
    (sliding-window layers also drop slots `sliding_window` or more behind the new token; left padding shifts every
    row's positions alike, so the window is the same in slots as in positions). Boolean masks mean "may attend"
    to SDPA, the attention load_target selects; an eager attention would add them to the scores instead."""
    full = valid[:, None, None, :]
    win = target.sliding_window
    if not win or valid.shape[1] <= win:
        windowed = full
    else:
        windowed = full.clone()
        windowed[..., : valid.shape[1] - win] = False
    if target.layer_types is not None:
        return {kind: windowed if kind == "sliding_attention" else full for kind in set(target.layer_types)}
    return windowed  # one mask for every layer: Mistral's window everywhere, or no window at all


@torch.inference_mode()
def features(target: TargetModel, seqs: list[list[int]], taps: tuple[int, ...] = (),
             tokens_per_forward: int = 4096) -> list[Sequence]:
    """Teacher-forced features of given token sequences (text, or earlier continuations), no generation; same
    layout as generate_batch().

    Right-padded forwards of at most `tokens_per_forward` padded tokens (attention over one whole padded block is
    what makes a single large forward slow). Unlike generation, padding is kept here: one unpadded forward per
    length measured slower (many small forwards).
    """
    out_rows: list[Sequence] = []
    for idx in padded_chunks([len(s) for s in seqs], range(len(seqs)), tokens_per_forward):
        chunk = [seqs[i] for i in idx]
        width = max(len(s) for s in chunk)
        ids = torch.tensor([s + [0] * (width - len(s)) for s in chunk], device=target.device)  # (b, S)
        att = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in chunk], device=target.device)
        out = target.decoder(input_ids=ids, attention_mask=att, use_cache=False, output_hidden_states=bool(taps))
        hid = out.last_hidden_state  # (b, S, H)
        tp = torch.cat([out.hidden_states[k] for k in taps], -1) if taps else None  # (b, S, 3H)
        out_rows += [(s, hid[r, : len(s)].to(torch.bfloat16).cpu(),
                      tp[r, : len(s)].to(torch.bfloat16).cpu() if taps else None) for r, s in enumerate(chunk)]
    return out_rows


def padded_chunks(lens: list[int], order: Iterable[int], budget: int) -> list[list[int]]:
    """Consecutive runs of `order` (indices into lens) whose padded size, longest length x rows, stays within
    `budget` tokens; a row longer than the budget goes alone. The forwards of generate_batch and features(), and
    the training batches of fit.batches()."""
    chunks: list[list[int]] = []
    width = 0
    for i in order:
        if chunks and max(width, lens[i]) * (len(chunks[-1]) + 1) <= budget:
            chunks[-1].append(i)
            width = max(width, lens[i])
        else:
            chunks.append([i])
            width = lens[i]
    return chunks


