"""EAGLE Playground: plain decoding vs EAGLE-2 speculative decoding, side by side (Gradio app).

`python app.py --help` lists the flags. Loads the models once, warms them up, then serves; nothing happens at import.
"""
from __future__ import annotations

import argparse
import os
import sys

from app.env import env_args


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="EAGLE Playground: baseline vs EAGLE-2 decoding side by side",
                                epilog="Every flag can also be set by an environment variable: EAGLE_ and the flag's "
                                       "name in capitals, e.g. EAGLE_TREE=auto, EAGLE_MAX_NEW_TOKENS_CAP=512, "
                                       "EAGLE_SHARE=1 (the command line wins; docs/usage.md).")
    p.add_argument("--model", default=None, help="a preset (default qwen2.5-coder-0.5b-instruct, a chat model; "
                   "gemma-3-270m: base model; smollm2-135m-instruct: fast chat), a local folder or hub id")
    p.add_argument("--head", default=None, help="EAGLE draft-head folder (default: the one shipped for the model)")
    p.add_argument("--medusa-head", default=None, help="Medusa head folder for the token-level lane (default: shipped)")
    p.add_argument("--device", default=None, help="cuda | mps | cpu (default: best available)")
    p.add_argument("--dtype", default=None, help="bf16 | fp16 | fp32 | auto (default: on CPU the faster one, timed)")
    p.add_argument("--choices", default=None, help="pin dtype/kernels from FILE or write them there (core/choices.py)")
    p.add_argument("--host", default=None, help="bind address (default 127.0.0.1, or $GRADIO_SERVER_NAME)")
    p.add_argument("--port", type=int, default=None, help="port (default 7860, or $GRADIO_SERVER_PORT)")
    p.add_argument("--share", action="store_true", help="also open a temporary public *.gradio.live link")
    p.add_argument("--log-level", default="INFO", type=str.upper, choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--max-new-tokens-cap", type=int, default=1024, help="per-request cap on new tokens")
    p.add_argument("--max-prompt-tokens", type=int, default=4096, help="per-request cap on prompt tokens")
    p.add_argument("--request-seconds", type=float, default=300.0, help="wall-clock budget of one request")
    p.add_argument("--queue-size", type=int, default=32, help="requests waiting at most; more are told 'Queue is full'")
    p.add_argument("--queue-wait", type=float, default=600.0, help="queue deadline (s): longer waits are told 'busy'")
    p.add_argument("--trust-remote-code", action="store_true", help="allow a hub model's own code (off by default)")
    p.add_argument("--tree", default=None, help="'auto': measure this machine at start-up and plan one tree for greedy and one for sampled requests; or T,D,K[,L[,S]] for all (S: dynamic depth's stop_below)")
    p.add_argument("--prompt-mode", default="auto", choices=["auto", "raw", "chat"], help="auto: chat if templated")
    p.add_argument("--system", default=None, help="system prompt for chat mode")
    args = p.parse_args(env_args(p) + (sys.argv[1:] if argv is None else list(argv)))
    if min(args.max_new_tokens_cap, args.max_prompt_tokens, args.queue_size) < 1:
        p.error("--max-new-tokens-cap, --max-prompt-tokens and --queue-size must be at least 1")
    if not (0 < args.request_seconds < float("inf") and 0 < args.queue_wait < float("inf")):
        p.error("--request-seconds and --queue-wait must be positive numbers")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no phone-home calls (offline machines)
    from app.launch import start  # imports torch and gradio: never at import time of app.py

    start(args).block_thread()


if __name__ == "__main__":
    try:
        main()
    except ValueError as e:  # unknown model, unreadable head, chat mode without a template: one line, non-zero exit
        raise SystemExit(f"[eagle-playground] error: {e}") from None
