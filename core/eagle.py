"""EAGLE-2 speculative decoding (arXiv 2406.16858) over a stock transformers target: lossless, greedy or sampled.

Per step: 1 draft a dynamic tree plus the context-lookup chain (the chain alone while a copy is in progress), 2 verify
it in one target forward, 3 accept (longest greedy match or exact multi-candidate sampling), 4 commit (compact the
target cache, feed accepted features to the draft), 5 emit.
tau = new tokens / target forwards (bonus token included).
"""
from __future__ import annotations

from typing import Callable, Iterator

import torch

from core import kv_cache, tree
from core.config import DecodeConfig, check_finite
from core.drafter import Drafter
from core.lookup import context_draft, copied
from core.events import StepEvent, TreeNode
from core.exactness import top2
from core.models import TargetModel
from core.sampling import new_generator, next_token, row_max, target_probs
from core.timing import now
from core.verify import accept_greedy, accept_sampled


class Eagle2Decoder:
    """The loop for any `Drafter` (core/drafter.py): EAGLE-1/2, EAGLE-3, Medusa or context lookup alone.
    `method` names the lane in events and the bench ("eagle2" for the EAGLE heads, else the drafter's kind)."""

    def __init__(self, target: TargetModel, drafter: Drafter, method: str | None = None):
        self.target, self.drafter = target, drafter
        self.method = method or ("eagle2" if drafter.kind in ("eagle", "eagle3") else drafter.kind)
        self.note = "" if drafter.trained else "untrained head: lossless but drafts are guesses"

    @torch.inference_mode()
    def generate(
        self, prompt_ids: list[int], cfg: DecodeConfig, should_stop: Callable[[], bool] | None = None
    ) -> Iterator[StepEvent]:
        """Yield one StepEvent per target forward until EOS, max_new_tokens, or should_stop()."""
        tgt, dr, s = self.target, self.drafter, cfg.sampling
        gen = new_generator(s.seed)  # CPU uniforms: the same seeded tokens on any device
        cache, dstate = tgt.new_cache(), dr.start()
        drafting = cfg.tree.total_tokens > 1
        try:
            # 0. prefill: the target's first token, then the draft reads every prompt feature
            t0 = now(tgt.device)
            ids = torch.tensor([prompt_ids], device=tgt.device)  # (1, P)
            hidden, taps = tgt.forward(ids, cache, output_layers=dr.output_layers)  # (1, P, H); EAGLE-3 taps
            draft_in = hidden if taps is None else taps  # the features this head reads
            logits = tgt.logits(hidden[0, -1])  # (V,)
            t1 = now(tgt.device)
            root = next_token(logits, s, gen)
            margins, tops = top2(logits[None])  # the margin each emitted token won by (core/exactness.py)
            t2 = now(tgt.device)
            n_commit = dr.commit(dstate, draft_in, torch.tensor([prompt_ids[1:] + [root]], device=tgt.device)) \
                if drafting else 0
            t3 = now(tgt.device)
            produced, done = 1, self._done(root, 1, cfg)
            history = list(prompt_ids) + [root]  # what context lookup searches
            yield StepEvent(0, self.method, (root,), verify_ms=(t1 - t0) * 1e3, draft_ms=(t3 - t2) * 1e3,
                            step_ms=(t3 - t0) * 1e3, draft_forwards=n_commit, finished=done, note=self.note,
                            margins=tuple(margins), top_logits=tuple(tops))
            step, copying = 0, False
            while not done and not (should_stop and should_stop()):
                step += 1
                t0 = now(tgt.device)
                # 1. draft: grow the candidate pool, keep the best total_tokens nodes (parents always kept); while
                #    the last step accepted copied tokens, the lookup chain drafts alone (no head pass)
                chain = context_draft(history, cfg.tree.lookup)
                pool = dr.propose(dstate, root, cfg.tree) if drafting and not (chain and copying) else None
                t_grown = now(tgt.device)
                if pool:
                    check_finite("draft scores", pool.scores)
                kept = tree.select_nodes(pool.parents, pool.scores, cfg.tree.total_tokens) if pool else [0]
                parents = tree.subtree_parents(pool.parents, kept) if pool else [-1]
                tokens = [pool.tokens[i] for i in kept] if pool else [root]
                # 1b. context lookup: graft the tokens that followed the last occurrence of the current suffix
                parents, tokens, n_head = tree.graft(parents, tokens, chain)
                depths = tree.depths(parents)
                t1 = now(tgt.device)
                # 2. verify: one target forward over the whole tree (positions = prefix + depth, ancestor mask)
                prefix = cache.get_seq_length()
                hidden, taps = tgt.forward(torch.tensor([tokens], device=tgt.device), cache, parents, depths,
                                           tree.ancestor_mask(parents), output_layers=dr.output_layers)  # (1, N, H)
                draft_in = hidden if taps is None else taps
                logits = tgt.logits(hidden[0])  # (N, V)
                t2 = now(tgt.device)
                # 3. accept: only the rows the walk visits are reduced (about tau of N), each checked for NaN/inf
                kids = tree.children(parents)
                if s.greedy:
                    path, bonus = accept_greedy(kids, tokens, lambda n: self._row(logits, n)[1])
                else:
                    path, bonus = accept_sampled(kids, tokens, lambda n: target_probs(self._row(logits, n)[0], s), gen)
                accepted = [tokens[i] for i in path[1:]] + [bonus]
                copying = copied(chain, accepted[:-1]) > 0
                new, done = self._clip(accepted, produced, cfg)
                margins, tops = top2(logits[path[:len(new)]])  # (len(new), V): new token k was chosen at path[k]
                # 4. commit: compact the target cache to the accepted path; the draft reads the real features
                kv_cache.keep(cache, prefix, path)
                t3 = now(tgt.device)
                n_commit = dr.commit(dstate, draft_in[:, path], torch.tensor([accepted], device=tgt.device)) \
                    if drafting and not done else 0
                t4 = now(tgt.device)
                root = bonus
                produced += len(new)
                history += new
                # 5. emit
                nodes = tuple(
                    TreeNode(i, parents[i], tokens[i], depths[i], pool.scores[kept[i]] if pool and i < n_head else 0.0,
                             i in path, "root" if i == 0 else "head" if i < n_head else "lookup")
                    for i in range(len(tokens))
                )
                t5 = now(tgt.device)  # step time = draft (propose, commit) + verify (target forward) + the rest
                yield StepEvent(step, self.method, tuple(new), nodes, tuple(path),
                                draft_ms=(t_grown - t0 + t4 - t3) * 1e3, verify_ms=(t2 - t1) * 1e3,
                                step_ms=(t5 - t0) * 1e3, finished=done, note=self.note,
                                draft_forwards=(pool.forwards if pool else 0) + n_commit,
                                margins=tuple(margins), top_logits=tuple(tops))
        finally:
            kv_cache.free(cache)  # the drafter's per-call state (dstate) goes with this frame

    @staticmethod
    def _row(logits: torch.Tensor, n: int) -> tuple[torch.Tensor, int]:
        """Row n of the verify logits (V,), checked finite, and its greedy token (one max reduction for both)."""
        best, idx = row_max(logits[n])
        check_finite("target logits", best)
        return logits[n], int(idx)

    def _done(self, tok: int, produced: int, cfg: DecodeConfig) -> bool:
        return (cfg.stop_on_eos and tok in self.target.eos_ids) or produced >= cfg.max_new_tokens

    def _clip(self, new: list[int], produced: int, cfg: DecodeConfig) -> tuple[list[int], bool]:
        """Cut the step's tokens at the first EOS and at max_new_tokens; never return tokens past either."""
        out = []
        for tok in new:
            out.append(tok)
            if self._done(tok, produced + len(out), cfg):
                return out, True
        return out, False
