"""Where bf16 EAGLE-2 and the baseline part ways on CPU, and whether fixed-shape forwards make them agree.

A token's hidden state computed in a one-token decode step and the same token computed as one row of an N-row tree
verify can differ in bf16, and a greedy near tie then flips the path. This probe answers two questions:

1. `trace`: which op first makes a row's result depend on how many rows ride along. Forward hooks on every module
   of the default model record the output for the same token computed alone and as row 0 of an N-row chain
   (N = 2, 6, 16, 33), on the same cached prefix; it prints the first module whose row-0 output differs. It also
   probes the bare bf16 kernels: for each of the model's linear shapes, which row counts M give bitwise the same
   row-0 result (oneDNN picks its blocking by M).
2. `pad`: pad every decode forward after the prefill (one-token steps and tree verifies alike) to R rows, the pads
   attending only to themselves and cropped from the cache afterwards, so every matmul runs at one M. It decodes
   the Spec-Bench prompts with the baseline and EAGLE-2 at R = 0 (as shipped) and at R, interleaved per prompt, and
   counts outputs that differ from the same-R baseline, with wall times.

    python scripts/bf16_rows_probe.py trace
    python scripts/bf16_rows_probe.py pad --rows 32 --questions ../shared/data/spec_bench_questions.jsonl \
        --per-category 5 --max-new-tokens 128 --tree 12,2,8,10 --json results/bf16_rows_probe.json

Results and conclusions: README, "Exactness you can see".
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.engine import kv_cache
from core import pipeline  # noqa: E402
from core.engine.baseline import BaselineDecoder  # noqa: E402
from core.bench.cli import read_questions, select_questions  # noqa: E402
from core.engine.config import DecodeConfig, SamplingConfig, TreeConfig  # noqa: E402
from core.drafters.eagle import EagleDrafter  # noqa: E402
from core.engine.eagle import Eagle2Decoder  # noqa: E402
from core.models.target import TargetModel, load_target  # noqa: E402

PROMPT = "The following is a short guide to making sourdough bread at home. Step 1:"


class FixedRows(TargetModel):
    """The target with every post-prefill forward padded to `rows` rows (pads see only themselves, then are cropped
    from the cache), so one-token steps and tree verifies run the same matmul shapes."""

    def __init__(self, base: TargetModel, rows: int) -> None:
        super().__init__(base.model, base.name)
        self.rows = rows

    def forward(self, ids, cache, parents=None, depths=None, anc=None, output_layers=()):
        t, prefix = ids.shape[1], cache.get_seq_length()
        if self.rows == 0 or prefix == 0 or t >= self.rows:
            return super().forward(ids, cache, parents, depths, anc, output_layers)
        if parents is None:  # a chain: node i's parent is i - 1
            parents, depths = [-1] + list(range(t - 1)), list(range(t))
            anc = torch.ones(t, t, dtype=torch.bool).tril_()
        n = self.rows - t
        ids2 = torch.cat([ids, ids[:, :1].expand(1, n)], dim=1)  # (1, rows)
        anc2 = torch.zeros(self.rows, self.rows, dtype=torch.bool)
        anc2[:t, :t] = anc.cpu()
        anc2[t:, t:] = torch.eye(n, dtype=torch.bool)
        h, taps = super().forward(ids2, cache, list(parents) + [-1] * n, list(depths) + [0] * n, anc2, output_layers)
        kv_cache.crop(cache, prefix + t)
        return h[:, :t], (taps[:, :t] if taps is not None else None)


def linear_classes() -> list[dict]:
    """For each linear shape of the default model: the ranges of M whose row-0 output is bitwise that of M's class."""
    torch.manual_seed(0)
    out = []
    for n_out, n_in, name in [(1024, 640, "q_proj"), (256, 640, "k/v_proj"), (640, 1024, "o_proj"),
                              (2048, 640, "gate/up_proj"), (640, 2048, "down_proj")]:
        w = (torch.randn(n_out, n_in) * 0.05).bfloat16()
        x = torch.randn(96, n_in).bfloat16()
        classes: list[list[int]] = []
        rows = {m: F.linear(x[:m], w)[0] for m in range(1, 97)}
        for m, r in rows.items():
            for c in classes:
                if torch.equal(rows[c[0]], r):
                    c.append(m)
                    break
            else:
                classes.append([m])
        out.append({"op": name, "shape": [n_out, n_in], "row0_classes": [[c[0], c[-1]] for c in classes]})
    return out


def trace(target: TargetModel, tok) -> dict:
    """First module whose output for token x differs between a one-token forward and row 0 of an N-row chain."""
    ids = tok(PROMPT, return_tensors="pt").input_ids
    cache = target.new_cache()
    h, _ = target.forward(ids, cache)
    first = int(target.logits(h[0, -1]).argmax())
    chain = [first] + tok(" Mix the flour and water", add_special_tokens=False).input_ids
    rec: dict[str, torch.Tensor] = {}
    order: list[str] = []

    def hook(name):
        def f(_mod, _inp, out):
            o = out[0] if isinstance(out, tuple) else out
            if torch.is_tensor(o) and o.dim() == 3:
                rec[name] = o[0, 0].detach().clone()  # row 0
                if name not in order:
                    order.append(name)
        return f

    handles = [m.register_forward_hook(hook(n)) for n, m in target.decoder.named_modules() if n]
    result = {}
    try:
        for n_rows in (2, 6, 16, 33):
            toks = (chain * 10)[:n_rows]
            rec.clear()
            ha, _ = target.forward(torch.tensor([toks[:1]]), copy.deepcopy(cache))
            alone = dict(rec)
            rec.clear()
            hb, _ = target.forward(torch.tensor([toks]), copy.deepcopy(cache))
            diff = next((n for n in order if n in alone and not torch.equal(alone[n], rec[n])), None)
            la, lb = target.logits(ha[0, 0]), target.logits(hb[0])[0]
            result[n_rows] = {"first_differing_module": diff, "logits_equal": bool(torch.equal(la, lb)),
                              "hidden_max_abs_diff": float((ha[0, 0].float() - hb[0, 0].float()).abs().max())}
            print(f"rows {n_rows}: {result[n_rows]}", flush=True)
    finally:
        for hd in handles:
            hd.remove()
    return result


def decode(decoder, ids: list[int], cfg: DecodeConfig) -> tuple[list[int], float]:
    t0 = time.perf_counter()
    toks = [x for ev in decoder.generate(ids, cfg) for x in ev.new_token_ids]
    return toks, time.perf_counter() - t0


def pad(target: TargetModel, tok, a: argparse.Namespace) -> dict:
    """Baseline vs EAGLE-2 at R = 0 and R = a.rows, interleaved per prompt; mismatches and wall times per R."""
    qs = select_questions(read_questions(a.questions), frozenset(), a.per_category, 0, False)
    cfg = DecodeConfig(a.max_new_tokens, SamplingConfig(temperature=0.0), TreeConfig.parse(a.tree))
    stats = {}
    for rows in (0, a.rows):
        t = FixedRows(target, rows)
        head = pipeline.read_head(a.head or pipeline.default_head(None), t)
        stats[rows] = {"target": t, "baseline": BaselineDecoder(t), "eagle": Eagle2Decoder(t, EagleDrafter(head, t)),
                       "mismatches": 0, "divergence_at": [], "baseline_s": 0.0, "eagle_s": 0.0}
    for i, q in enumerate(qs):
        ids = pipeline.encode_prompt(tok, q["turns"][0], "auto")  # as core.bench feeds it
        for rows in ((0, a.rows) if i % 2 == 0 else (a.rows, 0)):  # alternate order against drift
            s = stats[rows]
            b, tb = decode(s["baseline"], ids, cfg)
            e, te = decode(s["eagle"], ids, cfg)
            d = next((j for j, (u, v) in enumerate(zip(b, e)) if u != v), None)
            s["mismatches"] += d is not None
            s["divergence_at"].append(d)
            s["baseline_s"] += tb
            s["eagle_s"] += te
        print(f"[{i + 1}/{len(qs)}] " + "; ".join(f"R={r}: {stats[r]['mismatches']} differ" for r in stats),
              flush=True)
    return {str(r): {k: v for k, v in s.items() if k not in ("target", "baseline", "eagle")}
            for r, s in stats.items()} | {"prompts": len(qs), "tree": a.tree, "max_new_tokens": a.max_new_tokens}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["trace", "pad"])
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--questions", default="../shared/data/spec_bench_questions.jsonl")
    p.add_argument("--per-category", type=int, default=5)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--tree", default="12,2,8,10")
    p.add_argument("--head", default=None, help="EAGLE head folder (default: the shipped one)")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    torch.set_num_threads(2)
    target, tok = load_target(None, dtype="bf16")
    if a.mode == "trace":
        result = {"linear_row0_classes": linear_classes(), "model_trace": trace(target, tok)}
    else:
        result = {"pad": pad(target, tok, a)}
    text = json.dumps(result, indent=1)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
