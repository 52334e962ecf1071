"""The EAGLE drafters (EAGLE-1/2 heads and EAGLE-3 heads), implementations of the drafter contract.

The contract (`Drafter`, `DraftPool`) lives beside the loop in core/engine/contract.py; a new drafter is one file
with a head, its drafter and its loader, plus one line in core/drafters/heads.py's registry (the Medusa head in
core/drafters/medusa.py is the example).

EAGLE drafting: the draft cache (`DraftState`) belongs to one decode call and keeps only entries computed from REAL
target features (prompt and accepted tokens); tree-expansion entries are written after them, in place, and the
next commit overwrites them (keeping draft-predicted features costs tau). Pair convention (EAGLE, arXiv 2401.15077
§3.1): the draft input at position i is (embedding of t_{i+1}, feature f_i) and its output is the predicted f_{i+1};
the target LM head on it scores t_{i+2}.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from core.models import choices
from core.drafters.draft_head import EagleHead
from core.drafters.layers import DraftKV, fuse_projections
from core.drafters.eagle3_head import Eagle3Head
from core.engine.config import TreeConfig
from core.engine.contract import DraftPool, unsure
from core.engine.tree import top_frontier
from core.models import kernels
from core.models.target import TargetModel


DRAFT_ROWS = (1, 8)  # row counts the head's layer route is timed at: one accepted token, a draft level's frontier


@dataclass
class DraftState:
    """The EAGLE head's KV over real pairs (slots [0, length) of `kv`; a step's tree expansions are written after
    them and overwritten by the next commit), and its prediction for the next root; one per decode call."""

    kv: DraftKV
    length: int = 0
    feat: torch.Tensor | None = None  # (H,) predicted feature after the last committed token


class EagleDrafter:
    """EAGLE-1/2: binds a draft head to a target; embeddings and LM head rows (reduced vocabulary) come from it."""

    kind = "eagle"
    output_layers: tuple[int, ...] = ()

    def __init__(self, head: EagleHead, target: TargetModel):
        self.check(head, target)
        self.head = head.to(device=target.device, dtype=target.dtype).eval()
        self.target = target
        # the rows it drafts over: the folder's inference vocabulary when it has one, else the head's own
        ids = head.inference_vocab if getattr(head, "inference_vocab", None) is not None else self.head.vocab_ids
        full = len(ids) == target.vocab_size and bool((ids.cpu() == torch.arange(len(ids))).all())
        self.vocab_ids = None if full else ids.to(target.device)
        self.w_draft = self._draft_rows(full)  # (Vd, H)
        self._layers = fuse_projections(self.head)  # q/k/v and gate/up as one product each while drafting
        self._shared = self.w_draft is target.lm_head_weight  # the full vocabulary: the target's own head and timing
        # the acceleration step's choices, plain until `accelerate()` runs (core/pipeline.py decoder_for runs it)
        self.packed = kernels.PackedWeights()
        self.rows_packed = target.packed if self._shared else self.packed
        self.head_kernel = target.head_kernel if self._shared else "linear"
        self.onednn_rows: frozenset[int] = frozenset()

    def accelerate(self) -> "EagleDrafter":
        """The acceleration step for the drafter, after its target's (TargetModel.accelerate): on CPU the head's
        layers and draft rows in oneDNN's packed layout (core/models/kernels.py), kept where timed faster. Each draft
        level multiplies top_k rows by w_draft, so its kernel is timed here as the target's is (the full vocabulary
        reuses the target's choice), and the head's layers run through the packed weights at the row counts timed
        faster; a choices file pins both instead (core/models/choices.py). Returns the drafter."""
        self.head_kernel = self.target.head_kernel if self._shared else "linear"
        if self.target.device.type != "cpu":
            return self
        *_, layers_packed = self.packed.add_within(([] if self._shared else [[self.w_draft]])
                                                   + [[w for w in self._layers if w is not self.w_draft]])
        if not self._shared:
            self.head_kernel = choices.pick("draft_head", lambda: kernels.head_kernel(self.w_draft, packed=self.packed),
                                            kernels.head_candidates(self.w_draft))
        self.onednn_rows = frozenset(choices.pick("draft_onednn_rows", self._time_layers)) \
            if layers_packed else frozenset()
        rows_kept = self.head_kernel == "onednn"
        self.packed.discard(keep=lambda w: (rows_kept if w is self.w_draft else bool(self.onednn_rows)))
        return self

    @property
    def trained(self) -> bool:
        return bool(self.head.trained)

    def _draft_rows(self, full: bool) -> torch.Tensor:
        w = self.target.lm_head_weight
        return w if full else w[self.vocab_ids].detach()  # a copy of the rows, outside any autograd graph

    def _logits(self, feats: torch.Tensor) -> torch.Tensor:
        """(R, H) predicted features -> (R, Vd) logits over the draft vocabulary (the target's LM head rows)."""
        return kernels.head_product(self.w_draft, feats, self.head_kernel, self.rows_packed)

    @torch.inference_mode()
    def _time_layers(self, context: int = 64) -> frozenset[int]:
        """`kernels.body_choice` for the head's layers: one draft pass of each DRAFT_ROWS count after a `context`-
        entry draft cache, plain against routed through the packed weights."""
        tgt, n = self.target, context + max(DRAFT_ROWS)
        gen = torch.Generator().manual_seed(0)
        ids = torch.randint(0, min(1000, tgt.vocab_size), (1, n), generator=gen).to(tgt.device)  # (1, n)
        feats = torch.randn(1, n, tgt.hidden_size, generator=gen).to(device=tgt.device, dtype=tgt.dtype)  # (1, n, H)
        emb = tgt.embed(ids)
        _, past = self.head(emb[:, :context], feats[:, :context], torch.arange(context, device=tgt.device))

        def forward(m: int, routed: bool) -> None:
            with kernels.routed(self.packed, routed):
                self.head(emb[:, context:context + m], feats[:, context:context + m],
                          torch.full((m,), context, device=tgt.device), past)
        return kernels.body_choice(forward, DRAFT_ROWS, rounds=10)  # ~1 ms passes: 10 rounds (~0.1 s) steady it

    def _route(self, rows: int):
        """The context the head's layers run `rows` rows in (the packed oneDNN route where timed faster)."""
        return kernels.linear_route(rows, self.onednn_rows, self.packed, DRAFT_ROWS)

    @staticmethod
    def check(head, target: TargetModel) -> None:
        check_compatible(head, target)

    def start(self) -> DraftState:
        c = self.head.config
        heads = getattr(c, "num_layers", 1) * c.num_key_value_heads  # layers stacked along the head axis
        return DraftState(DraftKV(heads, c.hd, self.target.dtype, self.target.device))

    @torch.inference_mode()
    def commit(self, st: DraftState, features: torch.Tensor, next_ids: torch.Tensor) -> int:
        """Append real pairs: features (1, n, H) (EAGLE-3: (1, n, 3H) taps), next_ids (1, n); one head pass."""
        n = next_ids.shape[1]
        pos = torch.arange(st.length, st.length + n, device=features.device)
        with self._route(n):
            out, _ = self.head(self.target.embed(next_ids), features, pos, st.kv.window(st.length, n))
        st.length += n
        st.feat = out[0, -1]
        return 1

    def _topk(self, feats: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(R, H) predicted features -> top-k (log-probs (R, k), target token ids (R, k))."""
        logp = torch.log_softmax(self._logits(feats).float(), dim=-1)
        vals, idx = torch.topk(logp, k, dim=-1)
        return vals, (self.vocab_ids[idx] if self.vocab_ids is not None else idx)

    @torch.inference_mode()
    def propose(self, st: DraftState, root_token: int, tree: TreeConfig) -> DraftPool:
        """Grow the candidate pool: level 1 from the root's predicted feature (1 x top_k), then depth - 1 expansions
        of the best top_k; every expanded node's top_k children enter the pool (k + (depth-1) k^2 candidates +
        root); the loop reranks. With `tree.stop_below` (dynamic depth) the growth ends before a level whose best
        node's cumulative draft probability is under it: its children could not be worth the pass that drafts them
        (EAGLE-2's scores are calibrated: a node is accepted about as often as exp(score))."""
        root_feat = st.feat
        k = min(tree.top_k, len(self.w_draft))
        pool = DraftPool.rooted(root_token)
        vals, toks = self._topk(root_feat[None], k)
        frontier = pool.add(0, vals[0].tolist(), toks[0].tolist())
        frontier_feat = root_feat[None].expand(len(frontier), -1)  # (k, H): the feature each frontier node pairs with
        cols: dict[int, list[int]] = {0: []}  # node -> tree-expansion slots (after st.length) of its fed ancestors
        n_cols = 0
        for level in range(1, tree.depth):
            if unsure(pool, frontier, tree):
                break  # the frontier is best first: no node of this level is likely enough to expand
            ids = torch.tensor([[pool.tokens[n] for n in frontier]], device=root_feat.device)  # (1, k)
            pos = torch.full((len(frontier),), st.length + level - 1, device=root_feat.device)
            mine = [cols[pool.parents[n]] + [n_cols + i] for i, n in enumerate(frontier)]
            vis = torch.zeros(len(frontier), n_cols + len(frontier), dtype=torch.bool, device=root_feat.device)
            for i, c in enumerate(mine):
                vis[i, c] = True
            mask = torch.cat([torch.ones(len(frontier), st.length, dtype=torch.bool, device=vis.device), vis], 1)
            window = st.kv.window(st.length + n_cols, len(frontier))  # this level's slots, after the earlier ones
            with self._route(len(frontier)):
                out, _ = self.head(self.target.embed(ids), frontier_feat[None], pos, window, mask[None, None])
            pool.forwards += 1
            for i, n in enumerate(frontier):
                cols[n] = mine[i]
            n_cols += len(frontier)
            vals, toks = self._topk(out[0], k)  # (k, k)
            cand: list[int] = []
            for i, n in enumerate(frontier):
                cand += pool.add(n, (vals[i] + pool.scores[n]).tolist(), toks[i].tolist())
            nxt = top_frontier(cand, pool.scores, k)
            row_of = {n: i for i, n in enumerate(frontier)}
            frontier_feat = out[0, [row_of[pool.parents[n]] for n in nxt]]
            frontier = nxt
        return pool  # forwards counts expansion passes only; commit() reports its own pass


class Eagle3Drafter(EagleDrafter):
    """EAGLE-3: the head reads fused low/mid/high target layer taps and scores with its own norm + LM head over the
    draft vocabulary; drafting is otherwise EAGLE-1/2's."""

    kind = "eagle3"

    def __init__(self, head: Eagle3Head, target: TargetModel):
        super().__init__(head, target)
        self.output_layers = head.tap_layers(target.num_layers)

    def _draft_rows(self, full: bool) -> torch.Tensor:
        return self.head.lm_head.weight  # (Vd, H); its length bounds top-k

    def _logits(self, feats: torch.Tensor) -> torch.Tensor:
        """(R, H) pre-norm head outputs -> (R, Vd): the head's draft_logits, its LM head in the timed orientation."""
        return kernels.head_product(self.w_draft, self.head.norm(feats), self.head_kernel, self.rows_packed)

    @staticmethod
    def check(head, target: TargetModel) -> None:
        c = head.config
        th = c.target_hidden_size or c.hidden_size
        if th != target.hidden_size or c.hidden_size != target.hidden_size:
            raise ValueError(f"EAGLE-3 head expects target hidden size {th} (draft {c.hidden_size}); "
                             f"the target's is {target.hidden_size}")
        check_compatible(head, target)


def check_compatible(head, target: TargetModel) -> None:
    """Refuse a head built for another target before any generation (hidden size, vocabulary)."""
    c = head.config
    if c.hidden_size != target.hidden_size:
        raise ValueError(f"head hidden size {c.hidden_size} does not match the target's {target.hidden_size}")
    if c.vocab_size != target.vocab_size:
        raise ValueError(f"head vocabulary {c.vocab_size} does not match the target's {target.vocab_size}")
    if len(head.vocab_ids) and int(head.vocab_ids.max()) >= target.vocab_size:
        raise ValueError("head draft vocabulary holds ids outside the target vocabulary")
