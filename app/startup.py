"""Start-up helpers of the app: the token-level lanes, the verify profile and the warm-up (the tree plan of `--tree`
is core.engine.autotree.auto_or_parse, which the bench's measure_defaults shares).

No layout and no per-request work here; app.py calls these once before serving.
"""
import logging
from pathlib import Path

from core.engine.config import DecodeConfig
from core.engine.exactness import short_name


def verify_costs(target) -> dict[int, float]:
    """Verify ms by tree size on this machine (core.engine.autotree.verify_profile, three rounds), for the "why this
    speedup" what-if; a second or two at start-up for a small target."""
    from core.engine.autotree import verify_profile

    return verify_profile(target, sizes=(1, 2, 4, 8, 12, 16, 24, 32, 48, 64), rounds=3)


def compare_decoders(target, medusa_head: str | Path | None = None) -> dict:
    """The token-level lanes the UI offers beside EAGLE-2: prompt lookup always (no weights), and a Medusa head when
    a folder is given or the preset registry names one for the loaded target (static/heads/gemma-3-270m-medusa for
    the gemma-3-270m preset; looked up by the target's own name, so another model never gets Gemma's head)."""
    from core.pipeline import decoder_for, default_medusa_head

    lanes = {"lookup": decoder_for(None, target)}  # method "lookup"
    path = medusa_head or default_medusa_head(target.name)
    if path:
        lanes["medusa"] = decoder_for(path, target)
    return lanes


def dtype_note(target, short: bool = False) -> str:
    """"fp32" or, when load_target timed bf16 against fp32 on this CPU, "fp32; timed here: bf16 837 ms, fp32 291 ms
    per step + verify" (a one-token step plus a 16-node verify), then the LM-head product timed fastest when it is
    not linear() ("; LM head: onednn") and how many weights are packed for oneDNN ("; 127 weights packed");
    short: "fp32 (timed faster here)"."""
    name, timed = short_name(target.dtype), target.dtype_timing
    kernel = getattr(target, "head_kernel", "linear")
    packed = len(getattr(target, "packed", ()))
    head = ("" if kernel == "linear" else f"; LM head: {kernel}") + (f"; {packed} weights packed" if packed else "")
    if not timed:
        return name + ("" if short else head)
    if short:
        return f"{name} (timed faster here)"
    return (f"{name}; timed here: " + ", ".join(f"{k} {v:.0f} ms" for k, v in timed.items()) + " per step + verify"
            + head)


def info_line(target, eagle, head_arg: str | None = None) -> str:
    """The markdown line above the race: target, device, dtype and the draft head the EAGLE-2 lane drafts with
    (kind, depth, size; its folder when given with --head)."""
    from core.drafters.heads import describe_head

    from core.models import choices

    line = f"Target **{target.name}** · {target.device.type} · {dtype_note(target, short=True)}"
    head = getattr(eagle.drafter, "head", None)
    if head is not None:
        line += f" · head: {describe_head(head)}"
    line += f" (`{head_arg}`)" if head_arg else ""
    if getattr(target, "head_kernel", None) is None:  # not a loaded TargetModel: no kernel routes to show
        return line
    return line + " · " + choices.short(choices.describe(target, eagle.drafter))  # pinned or timed (core/models/choices.py)


def configure_logging(level: str) -> None:
    """The app's log format, and Gradio's own start-up HTTP probes kept quiet."""
    logging.basicConfig(level=level, format="[eagle-playground] %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)


def warm_up(tokenizer, baseline, eagle, *more, tokens: int = 8) -> None:
    """One short greedy generation per decoder (`more`: the token-level lanes) so the first user's timings exclude
    one-off start-up costs."""
    ids = list(tokenizer.encode("The quick brown fox"))
    cfg = DecodeConfig(max_new_tokens=tokens)
    for dec in (baseline, eagle, *more):
        for _ in dec.generate(ids, cfg, None):
            pass
