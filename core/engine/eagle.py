"""EAGLE-2 speculative decoding (arXiv 2406.16858) over a stock transformers target: lossless, greedy or sampled.

Per step: 1 draft a dynamic tree plus the context-lookup chain (the chain alone while a copy is in progress, doubling
while copies are taken whole), 2 verify it in one target forward, 3 accept (longest greedy match or exact
multi-candidate sampling), 4 commit (compact the target cache; the accepted features wait for the draft head's next
proposal, which reads them all in one pass, so copy steps run no head pass at all), 5 emit.
tau = new tokens / target forwards (bonus token included).

A draft pool whose scores are not finite (a broken head: NaN or inf weights or features) is dropped for that step:
the step verifies the root alone (plus any lookup chain, itself lossless), so the answer is the target's own token,
and the step's note says so (NON_FINITE_DRAFT_NOTE). Target logits that are not finite still stop the request: no
answer would be the target's then.
"""
from __future__ import annotations

from typing import Callable, Iterator

import torch

from core.engine import kv_cache, tree
from core.engine.config import DecodeConfig, all_finite, check_finite
from core.engine.contract import Drafter, Target, bit_exact, chain_room
from core.engine.lookup import context_draft, copied
from core.engine.events import StepEvent, TreeNode
from core.engine.sampling import Peak, finite, margin_fields, new_generator, peak, pick, target_probs
from core.engine.timing import now
from core.engine.tree_logits import TreeLogits
from core.engine.verify import accept_greedy, accept_sampled


NON_FINITE_DRAFT_NOTE = "draft scores were NaN or inf: this step answered with the target's own token"


class Eagle2Decoder:
    """The loop for any `Drafter` (core/drafters/eagle.py): EAGLE-1/2, EAGLE-3, Medusa or context lookup alone.
    `method` names the lane in events and the bench ("eagle2" for the EAGLE heads, else the drafter's kind)."""

    def __init__(self, target: Target, drafter: Drafter, method: str | None = None):
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
            root, top = pick(logits, s, gen)  # greedy: the margin the token won by (core/engine/exactness.py)
            produced, done = 1, self._done(root, 1, cfg)
            t2 = now(tgt.device)
            n_commit = dr.commit(dstate, draft_in, torch.tensor([prompt_ids[1:] + [root]], device=tgt.device)) \
                if drafting and not done else 0  # a finished call never drafts
            t3 = now(tgt.device)
            pending: list[tuple[torch.Tensor, list[int]]] = []  # accepted (features (1, n, F), next ids) not yet read
            history = list(prompt_ids) + [root]  # what context lookup searches
            yield StepEvent(0, self.method, (root,), verify_ms=(t1 - t0) * 1e3, draft_ms=(t3 - t2) * 1e3,
                            step_ms=(t3 - t0) * 1e3, draft_forwards=n_commit, finished=done, note=self.note,
                            bit_exact=bit_exact(tgt, 1), **margin_fields([top]))
            step, copying, chain_len = 0, False, cfg.tree.lookup
            room = chain_room(tgt, cfg.tree.total_tokens)  # exact mode: a verify stays within the probed rows
            while not done and not (should_stop and should_stop()):
                step += 1
                t0 = now(tgt.device)
                # 1. draft: grow the candidate pool, keep the best total_tokens nodes (parents always kept); while
                #    the last step accepted copied tokens, the lookup chain drafts alone (no head pass)
                reach = min(chain_len, max(cfg.tree.lookup, cfg.max_new_tokens - produced))
                chain = context_draft(history, reach if room is None else min(reach, room))
                proposing = drafting and not (chain and copying)
                n_commit = self._read(dstate, pending) if proposing else 0  # the head catches up in one pass
                pool = dr.propose(dstate, root, cfg.tree) if proposing else None
                t_grown = now(tgt.device)
                note, passes = self.note, (pool.forwards if pool else 0)
                if pool is not None and not all_finite(pool.scores):  # a broken head: verify the root alone
                    pool, note = None, NON_FINITE_DRAFT_NOTE
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
                kids = tree.children(parents)
                logits = tgt.tree_logits(hidden[0], kids)  # (N, V) rows, all now or as the walk reads them
                t2 = now(tgt.device)
                # 3. accept: only the rows the walk visits are reduced (about tau of N), each once, checked for NaN/inf
                row = self._peaks(logits)
                if s.greedy:
                    path, bonus = accept_greedy(kids, tokens, lambda n: row(n).id)
                else:
                    path, bonus = accept_sampled(kids, tokens, lambda n: target_probs(finite(logits[n]), s), gen)
                accepted = [tokens[i] for i in path[1:]] + [bonus]
                n_copied = copied(chain, accepted[:-1])
                copying = n_copied > 0  # a copy in progress: the next chain doubles while copies take it whole
                chain_len = min(2 * chain_len, cfg.tree.copy_lookup) if chain and n_copied == len(chain) \
                    else cfg.tree.lookup
                new, done = self._clip(accepted, produced, cfg)
                tops = [row(n) for n in path[:len(new)]] if s.greedy else []  # token k was chosen at path[k]
                # 4. commit: compact the target cache to the accepted path; the real features wait for the head
                kv_cache.keep(cache, prefix, path)
                if drafting and not done:  # the head never reads past the last step
                    pending.append((draft_in[:, path], accepted))  # (1, len(path), F): t_i.. paired with t_{i+1}..
                root = bonus
                produced += len(new)
                history += new
                # 5. emit
                nodes = tuple(
                    TreeNode(i, parents[i], tokens[i], depths[i], pool.scores[kept[i]] if pool and i < n_head else 0.0,
                             i in path, "root" if i == 0 else "head" if i < n_head else "lookup")
                    for i in range(len(tokens))
                )
                t5 = now(tgt.device)  # step time = draft (commit, propose) + verify (target forward) + the rest
                verify_ms = (t2 - t1) * 1e3 + logits.ms  # + the LM-head rows the walk computed on demand
                yield StepEvent(step, self.method, tuple(new), nodes, tuple(path),
                                draft_ms=(t_grown - t0) * 1e3, verify_ms=verify_ms,
                                step_ms=(t5 - t0) * 1e3, finished=done, note=note,
                                draft_forwards=passes + n_commit, bit_exact=bit_exact(tgt, len(tokens)),
                                **margin_fields(tops))
        finally:
            kv_cache.free(cache)  # the drafter's per-call state (dstate) goes with this frame

    def _read(self, dstate, pending: list[tuple[torch.Tensor, list[int]]]) -> int:
        """Commit every accepted step the drafter has not read yet in one pass (several after a copy); empties
        `pending`. Returns the draft passes run (0 when nothing waited)."""
        if not pending:
            return 0
        feats = torch.cat([f for f, _ in pending], dim=1)  # (1, n, F)
        ids = torch.tensor([[t for _, acc in pending for t in acc]], device=feats.device)  # (1, n)
        pending.clear()
        return self.drafter.commit(dstate, feats, ids)

    @staticmethod
    def _peaks(logits: TreeLogits) -> Callable[[int], Peak]:
        """Row n of the verify logits (N, V) -> its Peak (greedy id, top logit, margin), each row reduced once
        (accept and the margins visit the same rows) and checked for NaN / inf."""
        seen: dict[int, Peak] = {}

        def row(n: int) -> Peak:
            if n not in seen:
                seen[n] = peak(logits[n])
                check_finite("target logits", [seen[n].logit])
            return seen[n]
        return row

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
