"""The app's start-up: flags (each with an EAGLE_ environment variable), load the models once, warm them up, then
serve. `python app.py` and the `eagle-playground` console command both land here; nothing happens at import, and
everything heavy is imported inside `main` (on ZeroGPU `spaces` must come before anything touches CUDA).

`python app.py --help` lists the flags.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from app.env import env_args
from core.cli import Parser, run

PROG = "[eagle-playground]"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, environment variables first (app/env.py); a bad flag, value or variable is one line and exit
    status 2 (core/cli.py's Parser), `--help` argparse's own."""
    p = Parser(description="EAGLE Playground: baseline vs EAGLE-2 decoding side by side",
                                epilog="Every flag can also be set by an environment variable: EAGLE_ and the flag's "
                                       "name in capitals, e.g. EAGLE_TREE=auto, EAGLE_MAX_NEW_TOKENS_CAP=512, "
                                       "EAGLE_SHARE=1 (the command line wins; docs/usage.md).")
    p.add_argument("--model", default=None, help="a preset (default qwen2.5-coder-0.5b-instruct, a chat model; "
                   "gemma-3-270m: base model; smollm2-135m-instruct: fast chat), a local folder or hub id")
    p.add_argument("--head", default=None, help="EAGLE draft-head folder (default: the one shipped for the model)")
    p.add_argument("--medusa-head", default=None, help="Medusa head folder for the token-level lane (default: shipped)")
    p.add_argument("--device", default=None, help="cuda | mps | cpu (default: best available)")
    p.add_argument("--dtype", default=None, help="bf16 | fp16 | fp32 | auto (default: on CPU the faster one, timed)")
    p.add_argument("--choices", default=None, help="pin dtype/kernels from FILE or write them there (core/models/choices.py)")
    p.add_argument("--attention", default=None, choices=["auto", "invariant", "sdpa"],
                   help="sdpa (default) | invariant: bit-exact tree verifies (docs/trust.md) | auto: where supported")
    p.add_argument("--host", default=None, help="bind address (default 127.0.0.1, or $GRADIO_SERVER_NAME)")
    p.add_argument("--port", type=int, default=None, help="port (default 7860, or $GRADIO_SERVER_PORT)")
    p.add_argument("--share", action="store_true", help="also open a temporary public *.gradio.live link")
    p.add_argument("--log-level", default="INFO", type=str.upper, choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--max-new-tokens-cap", type=int, default=1024, help="per-request cap on new tokens")
    p.add_argument("--max-prompt-tokens", type=int, default=4096, help="per-request cap on prompt tokens")
    p.add_argument("--request-seconds", type=float, default=300.0, help="wall-clock budget of one request")
    p.add_argument("--queue-size", type=int, default=32, help="requests waiting at most; more are told 'Queue is full'")
    p.add_argument("--queue-wait", type=float, default=600.0, help="queue deadline (s): longer waits are told 'busy'")
    p.add_argument("--max-loaded-models", type=int, default=2, help="models in memory at once, shared by every "
                   "visitor (each visitor picks their own; the least recently used is dropped, reloaded on demand)")
    p.add_argument("--trust-remote-code", action="store_true", help="allow a hub model's own code (off by default)")
    p.add_argument("--tree", default="auto", help="'auto' (default): measure this machine at start-up and plan one "
                   "tree for greedy and one for sampled requests; 'default': the engine's fixed tree; or T,D,K[,L[,S]] "
                   "for all (S: dynamic depth's stop_below)")
    p.add_argument("--prompt-mode", default="auto", choices=["auto", "raw", "chat"], help="auto: chat if templated")
    p.add_argument("--system", default=None, help="system prompt for chat mode")
    args = p.parse_args(env_args(p) + (sys.argv[1:] if argv is None else list(argv)))
    if min(args.max_new_tokens_cap, args.max_prompt_tokens, args.queue_size, args.max_loaded_models) < 1:
        p.error("--max-new-tokens-cap, --max-prompt-tokens, --queue-size and --max-loaded-models must be at least 1")
    if not (0 < args.request_seconds < float("inf") and 0 < args.queue_wait < float("inf")):
        p.error("--request-seconds and --queue-wait must be positive numbers")
    return args


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, load the model and head they name, build the UI and serve until stopped."""
    args = parse_args(argv)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no phone-home calls (offline machines)
    import app.zerogpu as zerogpu  # first: on ZeroGPU `spaces` must be imported before anything touches CUDA

    plan = zerogpu.startup(zerogpu.spaces_module() is not None, args.device, args.dtype, args.tree)
    from app.inputs import Limits
    from app.startup import compare_decoders, configure_logging, dtype_note, info_line, warm_up
    from app.startup import verify_costs  # verify ms by tree size on this machine, for the "why" what-if
    from app.ui import build_demo, serve
    from core.engine.autotree import auto_or_parse
    from core.pipeline import build_decoders

    configure_logging(args.log_level)
    if plan.note:
        print(f"[eagle-playground] {plan.note}", flush=True)
    t0 = time.perf_counter()
    print(f"[eagle-playground] loading model {args.model or 'default'}, head {args.head or 'default'} ...", flush=True)
    target, tok, baseline, eagle = build_decoders(args.model, args.head, plan.device, plan.dtype,
                                                  trust_remote_code=args.trust_remote_code, choices_file=args.choices,
                                                  **({"attention": args.attention} if args.attention else {}))
    print(f"[eagle-playground] loaded {target.name} on {target.device} ({dtype_note(target)}) in "
          f"{time.perf_counter() - t0:.1f} s{'; warming up ...' if plan.warm_up else ''}", flush=True)
    compare = compare_decoders(target, args.medusa_head)  # the token-level lanes (Medusa, lookup)
    if plan.warm_up:
        warm_up(tok, baseline, eagle, *compare.values())
    tree = auto_or_parse(plan.tree, eagle, tok)
    verify_ms = tree.verify_ms or verify_costs(target)  # for the "why" what-if: the auto plan's profile when it ran
    demo = build_demo(tok, baseline, eagle, info=info_line(target, eagle, args.head),
                      max_new_tokens=args.max_new_tokens_cap, max_prompt_tokens=args.max_prompt_tokens, tree=tree,
                      prompt_mode=args.prompt_mode, system=args.system, verify_ms=verify_ms,
                      compare=compare, max_loaded_models=args.max_loaded_models,
                      limits=Limits(seconds=args.request_seconds, queue=args.queue_size, queue_wait=args.queue_wait))
    print(f"[eagle-playground] ready at {serve(demo, args.host, args.port, args.share)}", flush=True)
    demo.block_thread()
    return 0


def cli(argv: list[str] | None = None) -> int:
    """Console entry point: an unknown model, an unreadable head or chat mode without a template is one line and exit
    status 2 (core/cli.py)."""
    return run(PROG, main, argv)
