"""The draft vocabulary from the data: token counts of stored sequences (answers only by default) or of raw pool
rows, the most frequent ids, an existing vocabulary extended by the ids it lacks, and the share of tokens covered."""
from __future__ import annotations

import torch

from core.train.shards import Stored


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
