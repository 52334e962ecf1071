"""Training data: read prompts/text, generate continuations with the target (self-distillation), store features.

Two sources, mixed by --prefill-share and --n-text: on-policy (the target continues a prompt; the features are the
ones its own generation computed) and prefill-only (one teacher-forced forward over existing text, a prompt's own
text, or an earlier run's sequences; no generation, so volume is cheap but off-policy).

Shards (safetensors) hold, per batch of sequences: `ids` (int32, concatenated tokens), `feat` (bf16 (n, H) target
features: the post-norm last hidden state), optional `taps` (bf16 (n, 3H): the EAGLE-3 layer inputs), `offsets`
(int64 sequence starts, plus the end) and `generated` (tokens written by the target per sequence). A run resumes by
skipping shards that already exist.
"""
from __future__ import annotations

import functools
import json
import random
import time
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from core.models import kernels
from core.engine import kv_cache
from core.models.target import TargetModel

EVAL_FILES = ("spec_bench_questions.jsonl", "mt_bench_questions.jsonl")


def read_pool(prompts: str | None, text: str | None, n_prompts: int, n_text: int, seed: int,
              min_prompt_chars: int = 0, sources: tuple[str, ...] = ()) -> list[dict]:
    """Rows {kind: 'prompt'|'text', id, body}, shuffled with a fixed seed. Evaluation files are refused.

    `min_prompt_chars` keeps only prompts at least that long (a second round of long-context data: passages and
    documents followed by their instruction, which a short --max-prompt cuts off). `sources` keeps only prompts whose
    `source` field is one of them (a round aimed at one kind of request, e.g. chat turns); a name no row carries is
    an error, so a typo cannot silently empty the pool.
    """
    rows: list[dict] = []
    for path, kind, key, n in ((prompts, "prompt", "prompt", n_prompts), (text, "text", "text", n_text)):
        if not path or n <= 0:
            continue
        if Path(path).name in EVAL_FILES:
            raise ValueError(f"{path} is an evaluation set; it must not be used for training")
        items = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
        if kind == "prompt" and min_prompt_chars:
            items = [it for it in items if len(it[key]) >= min_prompt_chars]
        if kind == "prompt" and sources:
            present = {it.get("source") for it in items}
            if missing := sorted(set(sources) - present):
                raise ValueError(f"{path} has no prompts from {', '.join(missing)}; "
                                 f"its sources: {', '.join(sorted(str(x) for x in present))}")
            items = [it for it in items if it.get("source") in sources]
        random.Random(seed).shuffle(items)
        rows += [{"kind": kind, "id": it.get("id", str(i)), "body": it[key]} for i, it in enumerate(items[:n])]
    random.Random(seed + 1).shuffle(rows)
    return rows


Sequence = tuple[list[int], torch.Tensor, torch.Tensor | None]  # ids (S,), feat (S, H) bf16, taps (S, 3H) bf16


class Stored(NamedTuple):
    """One stored training sequence as training reads it back (load_shards)."""
    ids: torch.Tensor  # (S,) int64: prompt + answer
    feat: torch.Tensor  # (S, H) bf16: the target's post-norm last hidden states
    taps: torch.Tensor | None  # (S, 3H) bf16: EAGLE-3 layer inputs, when loaded
    start: int  # index of the first answer token (S - generated); 0 for a text row, which is all answer


def chat_prompt(tok, text: str, max_prompt: int) -> list[int]:
    """One user turn in the chat template, assistant turn opened, at most `max_prompt` tokens: a long text is cut
    inside the user's words, so the template's tail (`<|im_start|>assistant\n` for Qwen) always survives. (Cutting
    the wrapped ids instead dropped that tail in 6.8 % of round 5's rows, and the target then continued the user's
    text instead of answering it.)"""
    def wrap(t: str) -> list[int]:
        return tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False)

    ids = tok(wrap(text), add_special_tokens=True).input_ids
    if len(ids) <= max_prompt:
        return ids
    words = tok(text, add_special_tokens=False).input_ids
    keep = max(0, len(words) - (len(ids) - max_prompt))
    while True:  # re-tokenising a cut text can merge differently: shorten until it fits
        ids = tok(wrap(tok.decode(words[:keep])), add_special_tokens=True).input_ids
        if len(ids) <= max_prompt or keep == 0:
            return ids[-max_prompt:] if len(ids) > max_prompt else ids
        keep = max(0, keep - max(1, len(ids) - max_prompt))


def template_tail(tok) -> list[int]:
    """The ids the chat template puts after a user's text to open the assistant's turn (empty without a
    template): what every on-policy training prompt must end with."""
    if not getattr(tok, "chat_template", None):
        return []
    a = tok.apply_chat_template([{"role": "user", "content": "x"}], add_generation_prompt=True, tokenize=False)
    b = tok.apply_chat_template([{"role": "user", "content": "x"}], add_generation_prompt=False, tokenize=False)
    return tok(a[len(b):] if a.startswith(b) else "", add_special_tokens=False).input_ids


def answers_opened(seqs: list[Stored], tail: list[int]) -> list[bool]:
    """Per stored sequence: False when the target generated an answer to a prompt that does not end with the chat
    template's `tail` (an old round cut the wrapped prompt, so the 'answer' continues the user's text)."""
    n = len(tail)
    return [not n or sq.start == 0 or sq.ids[max(0, sq.start - n):sq.start].tolist() == tail for sq in seqs]


def _pick(logits: torch.Tensor, sample: bool, gen: torch.Generator, temperature: float = 1.0) -> torch.Tensor:
    """(B, V) logits -> (B,) next ids: greedy by torch.max, sampled at `temperature` by the inverse CDF.

    torch.max over a contiguous (B, V) row is several times faster than argmax on this CPU
    (docs/results-history.md, "Where the time goes"). Sampling draws one uniform per row against the cumulative
    softmax: at batch 48 over Gemma's 262k vocabulary it costs about 115 ms a step, against about 700 ms for
    multinomial or an exponential race (both draw a random number per vocabulary entry on one thread).
    """
    if not sample:
        return logits.max(-1).indices
    cdf = torch.softmax(logits.float() / temperature, -1).cumsum(-1)  # (B, V)
    u = torch.rand(len(cdf), 1, generator=gen, device=cdf.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u)[:, 0].clamp(max=cdf.shape[-1] - 1)


@torch.inference_mode()
def generate_batch(target: TargetModel, enc: list[list[int]], new_tokens: int, sample: bool, seed: int,
                   taps: tuple[int, ...] = (), tokens_per_forward: int = 4096,
                   temperature: float = 1.0) -> list[Sequence]:
    """Batched generation that keeps the features of every token it feeds (no second forward).

    enc: token ids per row, non-empty, any lengths. Each row's sequence is its prompt plus the continuation up to and including
    EOS; the last sampled token is dropped unless it was fed (its feature would need one more forward). Features are
    the post-norm last hidden states the generation itself computed, so they match what the decoder sees at
    inference (incremental steps), and `taps` (HF hidden_states indices) adds the EAGLE-3 layer inputs, concatenated.
    `temperature` applies when `sample` is set (training data samples at 1; core/train/sources.py writes source
    sentences at a lower one).

    Prefill runs in chunks of rows sorted by length, each left-padded to its own width and at most
    `tokens_per_forward` padded tokens (a chunk of one length gets no mask at all: transformers skips an all-ones
    mask and SDPA runs its causal kernel); on the throughput script's prompts these chunks ran 1,785 and 1,945
    tokens/s against 805 and 1,668 for one unpadded forward per length, and a single 48-row padded prefill about
    1,000. Their caches are stacked left-padded into one growing cache (`kv_cache.stack_left`); every decode step
    hides the padding with boolean masks built here from one (B, L) table, instead of transformers rebuilding them
    from a 2-D mask each step, and appends in place (no per-step copy of the whole cache).
    """
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
    cache = kv_cache.stack_left(parts, lens, width, width + new_tokens)
    valid = torch.zeros(B, width + new_tokens, dtype=torch.bool, device=dev)  # (B, L): slots a row may attend
    for r, n in enumerate(lens):
        valid[r, width - n : width] = True
    pos = torch.tensor(lens, device=dev)[:, None]  # (B, 1) the next token's position in each row
    hid_last = torch.stack(last)  # (B, H)
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
        out = target.decoder(input_ids=ids, position_ids=pos + step, cache=cache, use_cache=True,
                             attention_mask=decode_masks(target, valid[:, :slots]),
                             output_hidden_states=bool(taps))
        hid_last = out.last_hidden_state[:, -1]  # (B, H)
        fed_feats.append(hid_last)
        fed_taps.append(torch.cat([out.hidden_states[k][:, -1] for k in taps], -1) if taps else None)
        lengths += alive.long()
        alive &= ~torch.isin(ids[:, 0], eos)
        if not bool(alive.any()):
            break
    kv_cache.free(cache)
    seqs: list[Sequence] = []
    cont = torch.stack(fed_ids[: len(fed_feats)], 1) if fed_feats else None  # (B, steps)
    feats = torch.stack(fed_feats, 1) if fed_feats else None  # (B, steps, H)
    tapss = torch.stack(fed_taps, 1) if fed_feats and taps else None
    for r, e in enumerate(enc):
        n = int(lengths[r]) if fed_feats else 0
        row_ids = e + (cont[r, :n].tolist() if n else [])
        f, t = prompt_feat[r], prompt_taps[r]
        if n:
            f = torch.cat([f, feats[r, :n]])
            t = torch.cat([t, tapss[r, :n]]) if taps else None
        seqs.append((row_ids, f.to(torch.bfloat16).cpu(), t.to(torch.bfloat16).cpu() if taps else None))
    return seqs


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
    on this machine. On the AMX Xeon linear() was the measured path; on an AVX2-only EPYC in fp32 the
    vocabulary-major product ran about 1.6x faster at 96 rows over Gemma's 262k vocabulary. The values agree up to
    the order the GEMM sums in (greedy data may differ at numerical near ties, which training does not mind)."""
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

    Right-padded forwards of at most `tokens_per_forward` padded tokens: one 48 x 768 forward ran at about 250
    tokens/s on 2 CPU cores (attention over the whole padded block), chunks of about 4k tokens at about 1,000, and
    2,315 on 96 length-sorted text rows on a faster day. Unlike generation, padding is kept here: giving each length
    its own unpadded forward measured slower on those rows (2,086 tokens/s; 58 lengths, many small forwards).
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


def stored_prompts(dirs: list[Path]) -> set[tuple[int, ...]]:
    """Token sequences earlier runs started from: each stored sequence less the tokens the target generated.

    A prompt row whose encoding is in this set was already continued by an earlier round (same prompt, same cut);
    `plan_batches(exclude=...)` leaves it out so a new round spends its time on prompts no round has seen.
    """
    seen: set[tuple[int, ...]] = set()
    for d in dirs:
        for path in sorted(Path(d).glob("shard_*.safetensors")):
            with safe_open(str(path), "pt") as sh:  # ids and offsets only; the features stay on disk
                ids, off = sh.get_tensor("ids").tolist(), sh.get_tensor("offsets").tolist()
                gen = sh.get_tensor("generated").tolist() if "generated" in sh.keys() else [0] * (len(off) - 1)
            seen.update(tuple(ids[a : b - g]) for a, b, g in zip(off[:-1], off[1:], gen))
    return seen


def plan_batches(rows: list[dict], tok, batch: int, max_prompt: int, max_text: int, prefill_share: float,
                 seed: int, exclude: set[tuple[int, ...]] | None = None) -> list[dict]:
    """Group rows into batches of one kind and similar length.

    Each batch is {"kind": "generate"|"prefill", "enc": [ids...], "sample": bool, "seed": int}. Prompts are
    continued by the target (on-policy) unless drawn into the prefill share (the prompt's own text, teacher-forced);
    text rows and `ids` rows (sequences of an earlier run, --reprefill) are always prefilled. Rows are sorted by
    token length before batching, so a batch holds similar lengths and its padded prefill chunks pad little.
    Prompts whose encoding is in `exclude` (`stored_prompts` of earlier rounds) are left out.
    """
    rng = random.Random(seed)
    gen_rows, pre_rows = [], []
    for r in rows:
        if r["kind"] == "prompt":  # `enc`: already encoded within max_prompt (chat_prompt)
            e = r["enc"] if "enc" in r else tok(r["body"], add_special_tokens=True).input_ids[:max_prompt]
            if exclude and tuple(e) in exclude:
                continue
            (pre_rows if rng.random() < prefill_share else gen_rows).append(e)
        elif r["kind"] == "ids":  # an earlier run's sequence (prompt + the target's continuation)
            pre_rows.append(list(r["ids"]))
        else:
            pre_rows.append(tok(r["body"], add_special_tokens=True).input_ids[:max_text])
    plan = []
    for kind, encs in (("generate", gen_rows), ("prefill", pre_rows)):
        encs = sorted((e for e in encs if len(e) >= 2), key=len)
        for i in range(0, len(encs), batch):
            plan.append({"kind": kind, "enc": encs[i : i + batch]})
    rng.shuffle(plan)  # a run cut short still holds a mix of lengths and kinds
    return plan


def build_shards(target: TargetModel, tok, rows: list[dict], out_dir: Path, batch: int, max_prompt: int,
                 new_tokens: int, max_text: int, sample_share: float, seed: int, prefill_share: float = 0.0,
                 taps: tuple[int, ...] = (), max_shards: int = 0, log=None,
                 exclude: set[tuple[int, ...]] | None = None) -> dict:
    """Write shard_{i:05d}.safetensors for every planned batch not yet on disk; returns throughput counts.

    A shard holds `ids` (int32, concatenated), `feat` (bf16 (n, H)), optional `taps` (bf16 (n, 3H), EAGLE-3),
    `offsets` (int64 starts plus the end) and `generated` (int64 per sequence: tokens written by the target).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    plan = plan_batches(rows, tok, batch, max_prompt, max_text, prefill_share, seed, exclude)
    if max_shards:
        plan = plan[:max_shards]
    stats = {"generate": [0, 0, 0.0], "prefill": [0, 0, 0.0]}  # kind -> [tokens written, generated, seconds]
    bar = tqdm(plan, desc="data", unit="batch")
    for i, b in enumerate(bar):
        path = out_dir / f"shard_{i:05d}.safetensors"
        if path.exists():
            continue
        t0 = time.time()
        if b["kind"] == "generate":
            sample = random.Random(seed + i).random() < sample_share
            seqs = generate_batch(target, b["enc"], new_tokens, sample, seed + i, taps)
        else:
            seqs = features(target, b["enc"], taps)
        gen = [len(s[0]) - len(e) if b["kind"] == "generate" else 0 for s, e in zip(seqs, b["enc"])]
        keep = [j for j, s in enumerate(seqs) if len(s[0]) >= 4]
        seqs, gen = [seqs[j] for j in keep], [gen[j] for j in keep]
        if not seqs:
            continue
        shard = shard_tensors(seqs, gen)
        offsets = shard["offsets"]
        save_file(shard, str(path.with_suffix(".tmp")))
        path.with_suffix(".tmp").rename(path)
        st = stats[b["kind"]]
        st[0] += int(offsets[-1])
        st[1] += sum(gen)
        st[2] += time.time() - t0
        if log:
            log(f"shard {i} {b['kind']} rows {len(seqs)} tokens {int(offsets[-1])} generated {sum(gen)} "
                f"in {time.time() - t0:.1f}s")
        bar.set_postfix(tokens=int(offsets[-1]))
    return {k: {"tokens": v[0], "generated": v[1], "seconds": round(v[2], 1),
                "tokens_per_s": round(v[0] / v[2], 1) if v[2] else None,
                "generated_per_s": round(v[1] / v[2], 1) if v[2] and v[1] else None} for k, v in stats.items()}


def shard_tensors(seqs: list[Sequence], generated: list[int]) -> dict[str, torch.Tensor]:
    """One shard's tensors (the layout build_shards documents) from (ids, feat, taps or None) sequences and the
    tokens the target generated in each; `taps` only when the sequences carry them."""
    shard = {"ids": torch.tensor([t for s in seqs for t in s[0]], dtype=torch.int32),
             "feat": torch.cat([s[1] for s in seqs]).contiguous(),
             "offsets": torch.tensor([0] + [len(s[0]) for s in seqs], dtype=torch.long).cumsum(0),
             "generated": torch.tensor(generated, dtype=torch.long)}
    if seqs and seqs[0][2] is not None:
        shard["taps"] = torch.cat([s[2] for s in seqs]).contiguous()
    return shard


def load_shards(out_dir: Path, taps: bool = False) -> list[Stored]:
    """Every stored sequence of the shards in out_dir, in file order (Stored: ids, feat, taps or None, start).

    taps=True requires every shard to hold EAGLE-3 layer taps (a shard written for an EAGLE-1/2 head does not).
    """
    seqs = []
    for path in sorted(out_dir.glob("shard_*.safetensors")):
        d = load_file(str(path))
        if taps and "taps" not in d:
            raise ValueError(f"{path} has no EAGLE-3 layer taps (written for an EAGLE-1/2 head); "
                             "regenerate it or use --reprefill on its folder")
        off = d["offsets"].tolist()
        gen = d["generated"].tolist() if "generated" in d else [0] * (len(off) - 1)
        for a, b, g in zip(off[:-1], off[1:], gen):
            seqs.append(Stored(d["ids"][a:b].long(), d["feat"][a:b], d["taps"][a:b] if taps else None,
                               (b - a - g) if g else 0))
    return seqs


def shard_counts(out_dir: Path) -> dict:
    """Tokens stored and tokens the target generated, over the shards in out_dir (for the training card)."""
    tokens = generated = 0
    for path in sorted(out_dir.glob("shard_*.safetensors")):
        with safe_open(str(path), "pt") as d:  # counts only; the features stay on disk
            tokens += int(d.get_tensor("offsets")[-1])
            generated += int(d.get_tensor("generated").sum()) if "generated" in d.keys() else 0
    return {"tokens": tokens, "generated": generated}


def data_counts(seqs: list[tuple], vocab: int, answers: bool = True) -> torch.Tensor:
    """(vocab,) token frequencies of stored sequences (ids first in each tuple): of the answers only (from each
    Stored's `start`, what a draft head is asked to guess) unless `answers` is False or a sequence has no start."""
    counts = torch.zeros(vocab, dtype=torch.long)
    for sq in seqs:
        ids = sq[0][sq.start:] if answers and isinstance(sq, Stored) else sq[0]
        counts += torch.bincount(ids, minlength=vocab)
    return counts


def draft_vocab(seqs: list[tuple], size: int, vocab: int, prior: torch.Tensor | None = None,
                answers: bool = True) -> tuple[torch.Tensor, float]:
    """Most frequent `size` token ids of the data (sorted ascending) and the share of data tokens they cover.

    `prior` (token counts of the whole text pool, tokenized only) breaks ties among ids the generated data never
    used, so a small run still gets a sensible vocabulary.
    """
    counts = data_counts(seqs, vocab, answers)
    score = counts.double() + (1e-6 * prior.double() / max(1.0, float(prior.max())) if prior is not None else 0.0)
    top = torch.topk(score, min(size, vocab)).indices.sort().values
    return top, coverage(counts, top)


def coverage(counts: torch.Tensor, vocab_ids: torch.Tensor) -> float:
    """The share of data tokens (`counts`, (V,) from data_counts) whose id is in the draft vocabulary `vocab_ids`."""
    return float(counts[vocab_ids.cpu()].sum() / max(1, int(counts.sum())))


def vocab_coverage(seqs: list[tuple], vocab_ids: torch.Tensor, vocab: int, answers: bool = True) -> float:
    """The share of the data's tokens (answers only, by default) a draft vocabulary covers."""
    return coverage(data_counts(seqs, vocab, answers), vocab_ids)


def extend_vocab(seqs: list[tuple], vocab_ids: torch.Tensor, n: int, vocab: int,
                 answers: bool = True) -> tuple[torch.Tensor, float]:
    """`vocab_ids` plus the `n` most frequent ids of the data it lacks (sorted ascending), and the share of data
    tokens the result covers.

    An EAGLE-1/2 head predicts a feature and scores it against the target's LM-head rows of its draft vocabulary,
    so adding rows changes no trained weight: a head fine-tuned on a new kind of text (another language) keeps its
    vocabulary and gains the tokens that text needs, at the cost of a larger draft LM head.
    """
    counts = data_counts(seqs, vocab, answers)
    have = torch.zeros(vocab, dtype=torch.bool)
    have[vocab_ids] = True
    missing = counts.masked_fill(have, -1)
    add = torch.topk(missing, min(n, int((~have).sum()))).indices
    add = add[missing[add] > 0]  # never add ids the data does not use
    ids = torch.cat([vocab_ids.cpu(), add]).sort().values
    return ids, coverage(counts, ids)


def token_counts(tok, rows: list[dict], vocab: int) -> torch.Tensor:
    """Token frequencies of raw pool rows (tokenizer only, no model)."""
    counts = torch.zeros(vocab, dtype=torch.long)
    for r in rows:
        ids = torch.tensor(tok(r["body"]).input_ids, dtype=torch.long)
        counts += torch.bincount(ids[ids < vocab], minlength=vocab)
    return counts
