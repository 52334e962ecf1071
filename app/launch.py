"""The app's start-up sequence, run once by app.py: ZeroGPU first, then load, warm up, plan the tree, build, serve.

Its own module so that app.py stays a thin entry point and `spaces` is imported before anything touches CUDA (on
ZeroGPU it must come first); everything heavy is imported inside `start`.
"""
from __future__ import annotations

import argparse
import time


def start(args: argparse.Namespace):
    """Load the model and head that `args` (app.parse_args) name, build the UI and start serving; returns the demo."""
    from app import zerogpu  # first: on ZeroGPU `spaces` must be imported before anything touches CUDA

    plan = zerogpu.startup(zerogpu.spaces_module() is not None, args.device, args.dtype, args.tree)
    from app.inputs import Limits
    from app.startup import auto_or_parse, compare_decoders, configure_logging, dtype_note, info_line, warm_up
    from app.startup import verify_costs  # verify ms by tree size on this machine, for the "why" what-if
    from app.ui import build_demo, serve
    from core.pipeline import build_decoders

    configure_logging(args.log_level)
    if plan.note:
        print(f"[eagle-playground] {plan.note}", flush=True)
    t0 = time.perf_counter()
    print(f"[eagle-playground] loading model {args.model or 'default'}, head {args.head or 'default'} ...", flush=True)
    target, tok, baseline, eagle = build_decoders(args.model, args.head, plan.device, plan.dtype,
                                                  trust_remote_code=args.trust_remote_code, choices_file=args.choices)
    print(f"[eagle-playground] loaded {target.name} on {target.device} ({dtype_note(target)}) in "
          f"{time.perf_counter() - t0:.1f} s{'; warming up ...' if plan.warm_up else ''}", flush=True)
    compare = compare_decoders(target, args.medusa_head)  # the token-level lanes (Medusa, lookup)
    if plan.warm_up:
        warm_up(tok, baseline, eagle, *compare.values())
    tree = auto_or_parse(plan.tree, eagle, tok)
    demo = build_demo(tok, baseline, eagle, info=info_line(target, eagle, args.head),
                      max_new_tokens=args.max_new_tokens_cap, max_prompt_tokens=args.max_prompt_tokens, tree=tree,
                      prompt_mode=args.prompt_mode, system=args.system, verify_ms=verify_costs(target),
                      compare=compare,
                      limits=Limits(seconds=args.request_seconds, queue=args.queue_size, queue_wait=args.queue_wait))
    print(f"[eagle-playground] ready at {serve(demo, args.host, args.port, args.share)}", flush=True)
    return demo
