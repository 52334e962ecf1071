"""EAGLE-2 drafting: run the draft head on real target features, then grow the dynamic draft tree.

The draft cache (`DraftState`) belongs to one decode call and holds only entries computed from REAL target
features (prompt and accepted tokens); tree-expansion entries live in a temporary list thrown away after each step
(vllm#14649: keeping draft-predicted features costs 8-15 % tau).

Pair convention (arXiv 2401.15077 §3.1): the draft input at position i is (embedding of t_{i+1}, feature f_i) and
its output is the predicted f_{i+1}; the target LM head on it scores t_{i+2}.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from core.config import TreeConfig
from core.draft_head import EagleHead
from core.models import TargetModel
from core.tree import top_frontier


@dataclass
class DraftState:
    """The draft head's KV over real pairs; one per decode call."""

    kv: tuple[torch.Tensor, torch.Tensor] | None = None  # each (1, kvh, L, d)
    length: int = 0

    def free(self) -> None:
        self.kv = None


@dataclass
class DraftPool:
    """All candidate nodes of one step (root at 0), before the rerank."""

    parents: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    forwards: int = 0


class EagleDrafter:
    """Binds a draft head to a target: embeddings and LM head rows (reduced vocabulary) come from the target."""

    def __init__(self, head: EagleHead, target: TargetModel):
        check_compatible(head, target)
        self.head = head.to(device=target.device, dtype=target.dtype).eval()
        self.target = target
        ids = self.head.vocab_ids
        full = len(ids) == target.vocab_size and bool((ids.cpu() == torch.arange(len(ids))).all())
        # EAGLE-3 heads have their own LM head over the draft vocabulary and read target layer taps
        self.eagle3 = bool(getattr(head, "is_eagle3", False))
        self.output_layers: tuple[int, ...] = head.tap_layers(target.num_layers) if self.eagle3 else ()
        if self.eagle3:
            self.w_draft = self.head.lm_head.weight  # (Vd, H); used for its length only
        else:
            self.w_draft = target.lm_head_weight if full else target.lm_head_weight[ids.to(target.device)]  # (Vd, H)
        self.vocab_ids = None if full else ids.to(target.device)

    def new_state(self) -> DraftState:
        return DraftState()

    @torch.inference_mode()
    def extend(self, st: DraftState, features: torch.Tensor, next_ids: torch.Tensor) -> torch.Tensor:
        """Append real pairs. features (1, n, H) of tokens t_i.. (EAGLE-3: the (1, n, 3H) taps named by
        output_layers); next_ids (1, n) = t_{i+1}... Returns f^ (H,)."""
        n = next_ids.shape[1]
        pos = torch.arange(st.length, st.length + n, device=features.device)
        out, kv = self.head(self.target.embed(next_ids), features, pos, st.kv)
        st.kv = kv if st.kv is None else (torch.cat([st.kv[0], kv[0]], 2), torch.cat([st.kv[1], kv[1]], 2))
        st.length += n
        return out[0, -1]

    def _topk(self, feats: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(R, H) predicted features -> top-k (log-probs (R, k), target token ids (R, k))."""
        logits = self.head.draft_logits(feats) if self.eagle3 else feats @ self.w_draft.T
        logp = torch.log_softmax(logits.float(), dim=-1)
        vals, idx = torch.topk(logp, k, dim=-1)
        return vals, (self.vocab_ids[idx] if self.vocab_ids is not None else idx)

    @torch.inference_mode()
    def grow(self, st: DraftState, root_token: int, root_feat: torch.Tensor, tree: TreeConfig) -> DraftPool:
        """Grow the candidate pool: level 1 from root_feat (1 x top_k), then depth - 1 expansions of the best top_k.

        Every expanded node's top_k children enter the pool (k + (depth-1) k^2 candidates + root); the caller reranks.
        """
        k = min(tree.top_k, len(self.w_draft))
        pool = DraftPool(parents=[-1], tokens=[root_token], scores=[0.0])
        vals, toks = self._topk(root_feat[None], k)
        frontier = self._add(pool, 0, vals[0].tolist(), toks[0].tolist())
        frontier_feat = root_feat[None].expand(len(frontier), -1)  # (k, H): the feature each frontier node pairs with
        tmp_k: list[torch.Tensor] = []
        tmp_v: list[torch.Tensor] = []
        cols: dict[int, list[int]] = {0: []}  # node -> temporary-cache columns of its fed ancestors (and itself)
        n_cols = 0
        for level in range(1, tree.depth):
            ids = torch.tensor([[pool.tokens[n] for n in frontier]], device=root_feat.device)  # (1, k)
            pos = torch.full((len(frontier),), st.length + level - 1, device=root_feat.device)
            mine = [cols[pool.parents[n]] + [n_cols + i] for i, n in enumerate(frontier)]
            vis = torch.zeros(len(frontier), n_cols + len(frontier), dtype=torch.bool, device=root_feat.device)
            for i, c in enumerate(mine):
                vis[i, c] = True
            mask = torch.cat([torch.ones(len(frontier), st.length, dtype=torch.bool, device=vis.device), vis], 1)
            past = self._past(st, tmp_k, tmp_v)
            out, (kk, vv) = self.head(self.target.embed(ids), frontier_feat[None], pos, past, mask[None, None])
            pool.forwards += 1
            tmp_k.append(kk)
            tmp_v.append(vv)
            for i, n in enumerate(frontier):
                cols[n] = mine[i]
            n_cols += len(frontier)
            vals, toks = self._topk(out[0], k)  # (k, k)
            cand: list[int] = []
            for i, n in enumerate(frontier):
                cand += self._add(pool, n, (vals[i] + pool.scores[n]).tolist(), toks[i].tolist())
            nxt = top_frontier(cand, pool.scores, k)
            row_of = {n: i for i, n in enumerate(frontier)}
            frontier_feat = out[0, [row_of[pool.parents[n]] for n in nxt]]
            frontier = nxt
        return pool  # forwards counts expansion passes only; each extend() is counted by the step that runs it

    @staticmethod
    def _add(pool: DraftPool, parent: int, scores: list[float], tokens: list[int]) -> list[int]:
        start = len(pool.tokens)
        pool.parents += [parent] * len(tokens)
        pool.tokens += tokens
        pool.scores += scores
        return list(range(start, len(pool.tokens)))

    @staticmethod
    def _past(st: DraftState, tk: list[torch.Tensor], tv: list[torch.Tensor]):
        ks = ([st.kv[0]] if st.kv is not None else []) + tk
        vs = ([st.kv[1]] if st.kv is not None else []) + tv
        return (torch.cat(ks, 2), torch.cat(vs, 2)) if ks else None


def check_compatible(head: EagleHead, target: TargetModel) -> None:
    """Refuse a head built for another target before any generation (hidden size, vocabulary)."""
    c = head.config
    if getattr(head, "is_eagle3", False):
        th = c.target_hidden_size or c.hidden_size
        if th != target.hidden_size or c.hidden_size != target.hidden_size:
            raise ValueError(f"EAGLE-3 head expects target hidden size {th} (draft {c.hidden_size}); "
                             f"the target's is {target.hidden_size}")
    if c.hidden_size != target.hidden_size:
        raise ValueError(f"head hidden size {c.hidden_size} does not match the target's {target.hidden_size}")
    if c.vocab_size != target.vocab_size:
        raise ValueError(f"head vocabulary {c.vocab_size} does not match the target's {target.vocab_size}")
    if len(head.vocab_ids) and int(head.vocab_ids.max()) >= target.vocab_size:
        raise ValueError("head draft vocabulary holds ids outside the target vocabulary")
