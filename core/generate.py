"""Command-line generation with either decoder.

    python -m core.generate --prompt "The capital of France is" --method eagle2 --max-new-tokens 64 [--json]

Prints the text then a one-line summary, or with --json one JSON object: method, model, head (null for baseline),
prompt_mode, prompt_tokens, token_ids (generated only), text, stats (RunStats fields + note). As in the app, a model
whose tokenizer has a chat template (the SmolLM2 and Qwen2.5-Coder presets) gets the prompt as one user turn
(--prompt-mode auto); the base Gemma 3 270M takes raw text. Bad input exits with status 2 and
one line on stderr, no traceback. Arguments are validated before torch and transformers are imported, so typos fail
fast.
"""
from __future__ import annotations

import argparse
import json
import sys

from core.cli import Parser, run
from core.engine.config import DecodeConfig, SamplingConfig, TreeConfig
from core.engine.stops import check_stops, stop_at

UNTRAINED = "untrained (freshly initialised)"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The CLI flags; tree defaults come from TreeConfig."""
    tree = TreeConfig()
    p = Parser(prog="python -m core.generate", description="Generate with the baseline or EAGLE-2 decoder.")
    p.add_argument("--prompt", required=True, help="prompt text (encoded with the model's tokenizer, BOS added)")
    p.add_argument("--model", default=None,
                   help="a preset (default qwen2.5-coder-0.5b-instruct; gemma-3-270m is the base model), a local "
                        "folder, or a hub id")
    p.add_argument("--head", default=None,
                   help="EAGLE-1/2 or EAGLE-3 head folder; default: the head the model's preset names (static/heads/ "
                        "for the default model and the offline presets), else a freshly initialised (untrained) head")
    p.add_argument("--method", choices=["baseline", "eagle2"], default="eagle2")
    p.add_argument("--prompt-mode", choices=["auto", "raw", "chat"], default="auto",
                   help="chat: one user turn of the model's chat template; raw: the text as is; auto (default): chat "
                        "when the tokenizer has a template")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tree", default=tree.spec(),
                   help="total_tokens,depth,top_k[,lookup[,stop_below]]: tree nodes per step (root included), draft "
                        "levels, branching per expanded node, context-lookup tokens (0 = off), and dynamic depth (no "
                        "level below one whose best guess is under stop_below; 0 = off); the same syntax as the app "
                        "and core.bench (default %(default)s)")
    p.add_argument("--dtype", default=None,
                   help="fp32 | bf16 | fp16 | auto (default auto: on CPU the faster of bf16 and fp32 here; bf16 on GPUs)")
    p.add_argument("--device", default=None, help="cpu | cuda | mps | auto (default: auto)")
    p.add_argument("--stop", action="append", default=[], metavar="TEXT",
                   help="stop once the generated text contains TEXT (kept in the output); repeat for several")
    p.add_argument("--choices", default=None, metavar="FILE",
                   help="pin dtype and kernel routes from FILE, or write this run's there (core/models/choices.py; also "
                        "$EAGLE_CHOICES)")
    p.add_argument("--attention", default=None, choices=["auto", "invariant", "sdpa"],
                   help="the target's attention: sdpa (default; $EAGLE_ATTENTION), invariant (row-invariant: a "
                        "tree verify equals plain decoding's steps bit for bit; docs/trust.md) or auto (invariant "
                        "where supported)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text + summary")
    p.add_argument("--trust-remote-code", action="store_true", help="allow a hub model's own code (off by default)")
    return p.parse_args(argv)


def decode_config(args: argparse.Namespace) -> DecodeConfig:
    """Validated configuration (ValueError on out-of-range values)."""
    if not args.prompt.strip():
        raise ValueError("prompt is empty")
    check_stops(getattr(args, "stop", []))
    return DecodeConfig(
        max_new_tokens=args.max_new_tokens,
        sampling=SamplingConfig(temperature=args.temperature, top_p=args.top_p, seed=args.seed),
        tree=TreeConfig.parse(args.tree),
    )


def generate(args: argparse.Namespace) -> dict:
    """Load, run one decoder, and return the JSON-able result."""
    cfg = decode_config(args)
    _quiet_libraries()
    from core.models import choices
    from core import pipeline, prompt
    from core.engine.events import summarize

    target, tokenizer, baseline, eagle = pipeline.build_decoders(
        args.model, args.head, args.device, args.dtype, trust_remote_code=getattr(args, "trust_remote_code", False),
        choices_file=getattr(args, "choices", None), attention=getattr(args, "attention", None))
    mode = getattr(args, "prompt_mode", "auto")
    prompt_ids = prompt.encode_prompt(tokenizer, args.prompt, mode)
    prompt.check_prompt_fits(target, prompt_ids, cfg)
    decoder = eagle if args.method == "eagle2" else baseline
    text = lambda ids: tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    events = list(stop_at(decoder.generate(prompt_ids, cfg), text, check_stops(getattr(args, "stop", []))))
    ids = [t for e in events for t in e.new_token_ids]
    stats = summarize(events).as_dict()
    stats["note"] = events[0].note if events else ""
    head = args.head or pipeline.default_head(args.model)
    return {
        "method": args.method,
        "model": target.name,
        "head": None if args.method == "baseline" else str(head) if head else UNTRAINED,
        "prompt_mode": prompt.prompt_mode(tokenizer, mode),
        "prompt_tokens": len(prompt_ids),
        "token_ids": ids,
        "text": prompt.decode(tokenizer, ids),
        "stats": stats,
        "choices": choices.describe(target, eagle.drafter),  # dtype and kernel routes in force (core/models/choices.py)
    }


def summary_line(result: dict) -> str:
    s = result["stats"]
    line = (f"[{result['method']}] {s['new_tokens']} tokens in {s['seconds']:.2f} s ({s['tokens_per_s']:.1f} tok/s), "
            f"tau {s['tau']:.2f}, {s['target_forwards']} target forwards")
    if result["method"] == "eagle2":
        line += f", accept rate {s['accept_rate']:.2f}, head {result['head']}"
    return line + (f"; note: {s['note']}" if s["note"] else "")


def main(argv: list[str] | None = None) -> int:
    """CLI entry point (eagle-generate): a bad flag or input is one line and exit status 2 (core/cli.py; DecodeError
    is a ValueError), Ctrl-C status 130."""
    args = parse_args(argv)
    return run("", lambda _argv: _emit(generate(args), args.json))


def _emit(result: dict, as_json: bool) -> int:
    """Print the text and its summary line, or one JSON object."""
    if as_json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        print(result["text"])
        print(summary_line(result))
    return 0


def _quiet_libraries() -> None:
    """Keep stderr for our own messages: no transformers info/warnings or weight-loading progress bars."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


if __name__ == "__main__":
    sys.exit(main())
