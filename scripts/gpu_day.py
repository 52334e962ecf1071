"""One GPU command, ready for the day a GPU is lent: `bash scripts/gpu_day.sh [--out DIR]` (docs/trust.md §5).

A GPU machine lent for checks has about 15 minutes, no network and no room for the presets' weights, so this program
needs none of them and imports no gradio:
1. tests/system/test_cuda.py on tiny models (fp32 equivalence of every drafter, seeded sampling, chi-square), in a pytest
   child; the app-handler test is deselected where gradio is not installed and the packaged-model test always.
2. Each real architecture with random weights (the three offline presets' configs, read from the installed
   packages' config.json where they are, else the numbers below, and a Llama-3.1-8B config with an EAGLE-sized
   head): fp32 greedy EAGLE-2 equals plain decoding (the presets), then in bf16 the plain step, the verify cost by
   tree size (core.engine.autotree.verify_profile), the draft pass and EAGLE-2 end to end against the baseline
   (an untrained head: tau near 1, so it measures the overhead; any bf16 divergence must be a near tie).
3. The speedup each shipped head's CPU-measured tau (static/heads/*/training.json, T=0) would give on this device:
   tau x plain step / (draft + verify at the card's tree + the rest of a step), app/why.py's formula.
Writes gpu_day.json and gpu_day.txt under --out ($OUT by default) and exits 1 on any failure, including a phase
the time budget left out. `--device cpu` is the dry run: the same phases on reduced sizes (tests collected, not run).
"""
from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.cli import Parser, fail  # noqa: E402

# The real architectures' numbers, where the preset's package is not installed (the GPU machine has none of them).
ARCHS: dict[str, dict] = {
    "qwen2.5-coder-0.5b-instruct": dict(
        model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rope_theta=1000000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=False),
    "gemma-3-270m": dict(
        model_type="gemma3_text", hidden_size=640, intermediate_size=2048, num_hidden_layers=18,
        num_attention_heads=4, num_key_value_heads=1, head_dim=256, vocab_size=262144, max_position_embeddings=32768,
        sliding_window=512, query_pre_attn_scalar=256, rms_norm_eps=1e-6, tie_word_embeddings=True,
        layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 3),
    "smollm2-135m-instruct": dict(
        model_type="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
        num_key_value_heads=3, vocab_size=49152, max_position_embeddings=8192, rope_theta=100000.0,
        rms_norm_eps=1e-5, tie_word_embeddings=True),
    "llama-3.1-8b": dict(
        model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0,
        rms_norm_eps=1e-5, tie_word_embeddings=False),
}
BIG = "llama-3.1-8b"  # bf16 only: its fp32 copy would take 32 GB and the time of the whole check
# The official EAGLE-LLaMA3.1-Instruct-8B head: one decoder layer of the target's own geometry.
BIG_HEAD = dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                vocab_size=128256, head_dim=128)
KEYS = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings", "rope_theta", "rms_norm_eps",
        "tie_word_embeddings", "sliding_window", "query_pre_attn_scalar", "layer_types")
INIT_STD = 0.3  # fp32 identity runs: decisive logits (the stock 0.02 makes every logit a near tie)


class Sizes(NamedTuple):
    """How much each phase does: the GPU's full run, or the CPU dry run's reduced one."""

    tokens: int  # new tokens per end-to-end run
    prefix: int  # prompt length
    verify_sizes: tuple[int, ...]
    rounds: int
    reduced: bool


FULL = Sizes(64, 64, (1, 2, 4, 8, 16, 32, 64), 5, False)
DRY = Sizes(12, 16, (1, 4, 16), 2, True)
CARD_TREE = (16, 6, 6)  # the tree every shipped card's tau was measured at (total tokens, depth, top-k)


class Report:
    """What the run found: environment, tests, per-architecture timings, predictions and the failures."""

    def __init__(self, device: str):
        self.device = device
        self.env: dict = {}
        self.tests: dict = {}
        self.archs: dict = {}
        self.predictions: list = []
        self.failures: list = []
        self.wall_s = 0.0


class Budget:
    """The time budget: phases ask before starting and are left out (a failure) once it is spent."""

    def __init__(self, seconds: float):
        self.end = time.perf_counter() + seconds

    def left(self) -> float:
        """Seconds left (negative once spent)."""
        return self.end - time.perf_counter()


def parse_args(argv: list[str] | None):
    """The flags; ValueError (one line) for a device or architecture this does not know."""
    p = Parser(prog="gpu_day", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (the dry run, reduced sizes)")
    p.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "artifacts" / "gpu_day"))
    p.add_argument("--budget-s", type=float, default=None, help="time budget (default 330 on cuda, 60 on cpu)")
    p.add_argument("--archs", default=",".join(ARCHS), help="comma-separated, from: " + ", ".join(ARCHS))
    a = p.parse_args(argv)
    if a.device not in ("cuda", "cpu"):
        raise ValueError(f"--device must be cuda or cpu, got {a.device!r}")
    bad = [n for n in a.archs.split(",") if n not in ARCHS]
    if bad:
        raise ValueError(f"unknown architecture {bad[0]!r} (known: {', '.join(ARCHS)})")
    if a.budget_s is None:
        a.budget_s = 330.0 if a.device == "cuda" else 60.0
    return a


# ------------------------------------------------------------------------------------------ environment and tests


def environment(device: str) -> dict:
    """Versions and the device, with the pins from requirements.txt beside them."""
    import torch
    import transformers

    pins = dict(re.findall(r"^(torch|transformers)==(\S+)", (ROOT / "requirements.txt").read_text(), re.M))
    env = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
           "pins": pins, "gradio_installed": _installed("gradio"), "device_name": platform.processor() or "cpu"}
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("no CUDA device (run with --device cpu for the dry run)")
        env["device_name"] = torch.cuda.get_device_name(0)
        env["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    return env


def _installed(name: str) -> bool:
    """Whether `name` can be found without importing it (False where it is blocked or absent)."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def pytest_counts(text: str) -> dict[str, int]:
    """The counts of pytest's summary line ("3 passed, 1 skipped, 27 deselected in 9.1s"; "27 tests collected")."""
    counts = {k: 0 for k in ("passed", "failed", "error", "skipped", "deselected", "collected")}
    for n, what in re.findall(r"(\d+)(?:/\d+)? (passed|failed|errors?|skipped|deselected|tests? collected)", text):
        key = "error" if what.startswith("error") else "collected" if "collected" in what else what
        counts[key] += int(n)
    return counts


def cuda_tests(device: str, out: Path, seconds: float) -> dict:
    """tests/system/test_cuda.py in a pytest child: run on cuda, collected only on the dry run; its log under `out`."""
    select = "cuda and not real_model"  # the packaged Gemma's weights are not on a GPU machine
    deselect = [] if _installed("gradio") else ["app_handler"]  # the one test that needs the app
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", select, "tests/system/test_cuda.py"]
    if deselect:
        args += ["-k", " and ".join(f"not {d}" for d in deselect)]
    if device != "cuda":
        args.append("--collect-only")
    try:
        proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=max(seconds, 1))
        log, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        log, rc = f"{e.stdout or ''}\ntimed out after {seconds:.0f} s", 124
    (out / "pytest_cuda.log").write_text(log)
    last = [ln for ln in log.strip().splitlines() if ln.strip()]
    counts = pytest_counts(last[-1] if last else "")
    ran = device == "cuda"
    ok = rc == 0 and counts["failed"] == counts["error"] == 0 and (counts["passed"] if ran else counts["collected"]) > 0
    return {"ran": ran, "ok": ok, "rc": rc, "counts": counts, "deselected_for": deselect + ["real_model"],
            "summary": last[-1] if last else "", "command": " ".join(args[1:])}


# ------------------------------------------------------------------------------------------ building models


def arch_config(name: str) -> tuple[dict, str]:
    """The architecture's numbers: the installed preset's config.json where it is there, else ARCHS; and which."""
    from core.models.presets import get_preset

    preset = get_preset(name)
    if preset is not None and preset.installed():
        folder = _dense_folder(preset)
        if folder is not None and (folder / "config.json").is_file():
            cfg = json.loads((folder / "config.json").read_text())
            rope = cfg.get("rope_parameters") or {}
            cfg.setdefault("rope_theta", (rope.get("full_attention", rope) or {}).get("rope_theta"))
            keep = {k: cfg[k] for k in KEYS if cfg.get(k) is not None}
            if not keep["model_type"].startswith("gemma3"):
                keep.pop("layer_types", None)  # all full attention: the count follows num_hidden_layers
            return keep, str(folder / "config.json")
    return dict(ARCHS[name]), "scripts/gpu_day.py ARCHS"


def _dense_folder(preset) -> Path | None:
    """The preset's dense copy when it was already made (never builds one: that takes minutes)."""
    from core.models.weights import cache_root

    folder = cache_root() / f"{preset.name}-bf16"
    return folder if folder.is_dir() else None


def reduce(cfg: dict) -> dict:
    """The dry run's copy of an architecture: the same family, attention layout and window rule at toy size."""
    small = dict(cfg, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=1 if cfg["num_key_value_heads"] == 1 else 2, head_dim=16, vocab_size=512,
                 max_position_embeddings=2048)
    small.pop("layer_types", None)
    if cfg["model_type"].startswith("gemma3"):  # one sliding and one full layer, a window the prompt passes
        small["layer_types"] = ["sliding_attention", "full_attention"]
        small["sliding_window"], small["query_pre_attn_scalar"] = 8, 16
    return small


def build_target(cfg: dict, device: str, dtype, seed: int = 0, std: float | None = None):
    """A TargetModel with random weights (std `std`, norms left at 1) built on `device` in `dtype`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from core.models.target import TargetModel

    fields = dict(cfg)
    model_type = fields.pop("model_type")
    rope = fields.pop("rope_theta", None)
    config = AutoConfig.for_model(model_type, **fields, initializer_range=std or 0.02, bos_token_id=None,
                                  eos_token_id=None, pad_token_id=None)
    if rope and not model_type.startswith("gemma3"):  # Gemma 3 keeps its own (local 10k, global 1M)
        config.rope_parameters = {"rope_type": "default", "rope_theta": rope}
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    model.generation_config.eos_token_id = None
    target = TargetModel(model, name=cfg["model_type"])
    target.eos_ids = frozenset()
    return target


def cards() -> list[dict]:
    """Each shipped head's card: folder, model, kind, config and the T=0 tau with the tree it was measured at."""
    out = []
    for path in sorted((ROOT / "static" / "heads").glob("*/training.json")):
        card = json.loads(path.read_text())
        greedy = [r for r in (card.get("evaluation") or {}).get("results", []) if r.get("temperature") == 0.0]
        tree = greedy[0]["tree"] if greedy else {}
        out.append({"head": path.parent.name, "model": card.get("model"), "kind": card.get("head_type", "eagle"),
                    "config": json.loads((path.parent / "config.json").read_text()),
                    "tau": greedy[0]["tau"] if greedy else None,
                    "tree": (tree.get("total_tokens"), tree.get("depth"), tree.get("top_k")) if tree else CARD_TREE})
    return out


def head_for(card: dict | None, target, reduced: bool):
    """A random-weight head shaped like a shipped one (its config.json), or the official EAGLE head of the 8B target
    when `card` is None; reduced sizes follow the dry run's target."""
    import torch

    from core.drafters.draft_head import HeadConfig, init_head
    from core.drafters.medusa import MedusaConfig, init_medusa_head

    h, v = target.hidden_size, target.vocab_size
    cfg = (card or {}).get("config", {})
    draft = min(int(cfg.get("draft_vocab_size") or 0), v // 2) if reduced else int(cfg.get("draft_vocab_size") or 0)
    ids = torch.arange(draft) if draft else None
    if card and card["kind"] == "medusa":
        c = MedusaConfig(h, v, num_heads=int(cfg.get("medusa_num_heads", 5)), draft_vocab_size=draft)
        return init_medusa_head(c, ids)
    if reduced:
        c = HeadConfig.for_target(h, v, draft)
    elif card is None:
        c = HeadConfig(**BIG_HEAD)
    else:
        c = HeadConfig.from_json(cfg)
    return init_head(c, ids, seed=1)


# ------------------------------------------------------------------------------------------ measuring


def prompt_ids(vocab: int, n: int) -> list[int]:
    """A fixed random prompt (ids from a seeded generator) inside the vocabulary."""
    import torch

    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(7)).tolist()


def decode(decoder, prompt: list[int], tokens: int, tree: tuple[int, int, int] = CARD_TREE) -> list:
    """One greedy decode's events (the tree, without context lookup, as the cards measured tau)."""
    from core.engine.config import DecodeConfig, TreeConfig

    return list(decoder.generate(prompt, DecodeConfig(tokens, tree=TreeConfig(*tree, lookup=0))))


def ids_of(events: list) -> list[int]:
    """Every new token id of a decode, in order."""
    return [t for e in events for t in e.new_token_ids]


def fp32_identity(cfg: dict, device: str, sizes: Sizes, card: dict | None) -> dict:
    """fp32 greedy: EAGLE-2 (a random head shaped like the shipped one) equals plain decoding token for token."""
    import torch

    from core.engine.baseline import BaselineDecoder
    from core.pipeline import decoder_for

    target = build_target(cfg, device, torch.float32, std=INIT_STD)
    prompt = prompt_ids(target.vocab_size, sizes.prefix)
    want = ids_of(decode(BaselineDecoder(target), prompt, sizes.tokens))
    got = ids_of(decode(decoder_for(head_for(card, target, sizes.reduced), target), prompt, sizes.tokens))
    first = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), None)
    return {"identical": got == want, "tokens": len(want), "distinct_tokens": len(set(want)), "first_mismatch": first}


def median(xs: list[float]) -> float:
    """The median, 0 for no values."""
    return statistics.median(xs) if xs else 0.0


def tokens_per_s(events: list) -> float:
    """New tokens over the compute time core measured for them."""
    return sum(len(e.new_token_ids) for e in events) / max(sum(e.step_ms for e in events) / 1e3, 1e-9)


def race(target, head, prompt: list[int], tokens: int, tree: tuple[int, int, int]) -> dict:
    """Plain decoding against EAGLE-2 with `head` on one target (after a short warm-up of each): step costs, tau,
    speedup, and whether a divergence is a near tie (core/engine/exactness.py)."""
    from core.engine.baseline import BaselineDecoder
    from core.engine.exactness import divergence_of
    from core.pipeline import decoder_for

    base_dec, eagle_dec = BaselineDecoder(target), decoder_for(head, target)
    decode(base_dec, prompt, 4, tree), decode(eagle_dec, prompt, 4, tree)  # warm-up: kernels, allocator
    base, eagle = decode(base_dec, prompt, tokens, tree), decode(eagle_dec, prompt, tokens, tree)
    steps = [e for e in eagle if e.step > 0]
    draft, verify = median([e.draft_ms for e in steps]), median([e.verify_ms for e in steps])
    other = max(median([e.step_ms - e.draft_ms - e.verify_ms for e in steps]), 0.0)
    div = divergence_of(base, eagle, target.dtype)
    return {"kind": eagle_dec.drafter.kind, "tree": list(tree),
            "plain_step_ms": median([e.step_ms for e in base if e.step > 0]),
            "draft_ms": draft, "verify_ms": verify, "other_ms": other, "tau": len(ids_of(eagle)) / max(len(eagle), 1),
            "baseline_tokens_per_s": tokens_per_s(base), "eagle_tokens_per_s": tokens_per_s(eagle),
            "measured_speedup": tokens_per_s(eagle) / max(tokens_per_s(base), 1e-9),
            "identical": ids_of(base) == ids_of(eagle),
            "divergence_near_tie": None if div is None else bool(div.near_tie)}


def time_arch(name: str, device: str, sizes: Sizes, heads: list[dict]) -> dict:
    """One architecture: fp32 identity (not the 8B), then bf16 verify profile and a race per drafter."""
    import torch

    from core.engine.autotree import verify_profile

    cfg, source = arch_config(name)
    cfg = reduce(cfg) if sizes.reduced else cfg
    out: dict = {"config_source": source, "config": {k: v for k, v in cfg.items() if k != "layer_types"}}
    if name != BIG:
        out["fp32"] = fp32_identity(cfg, device, sizes, heads[0] if heads else None)
    target = build_target(cfg, device, torch.bfloat16)
    out["parameters_m"] = round(sum(p.numel() for p in target.model.parameters()) / 1e6, 1)
    out["verify_ms"] = {str(k): v for k, v in verify_profile(target, sizes.verify_sizes, sizes.prefix,
                                                             sizes.rounds).items()}
    prompt = prompt_ids(target.vocab_size, sizes.prefix)
    out["races"] = {(h["head"] if h else "eagle-official-size"): race(target, head_for(h, target, sizes.reduced),
                                                                      prompt, sizes.tokens, CARD_TREE)
                    for h in (heads or [None])}
    del target
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def arch_failures(name: str, result: dict) -> list[str]:
    """The pass criteria of one architecture's results."""
    fails = []
    fp32 = result.get("fp32")
    if fp32 is not None and not fp32["identical"]:
        fails.append(f"{name}: fp32 EAGLE-2 differs from plain decoding at token {fp32['first_mismatch']}")
    for head, r in result.get("races", {}).items():
        if r["divergence_near_tie"] is False:
            fails.append(f"{name}: bf16 {head} diverges from plain decoding where no rounding explains it")
        if not (r["plain_step_ms"] > 0 and r["verify_ms"] > 0):
            fails.append(f"{name}: {head} recorded no step timings")
    return fails


def predict(card: dict, result: dict) -> dict:
    """app/why.py's formula on this device's costs and the card's CPU-measured tau: tau x plain / drafting step."""
    from core.engine.autotree import interpolate

    r = result["races"][card["head"]]
    verify = interpolate({int(k): v for k, v in result["verify_ms"].items()}, card["tree"][0])
    step = r["draft_ms"] + verify + r["other_ms"]
    plain = r["plain_step_ms"]
    return {"head": card["head"], "model": card["model"], "kind": card["kind"], "cpu_tau": card["tau"],
            "tree": list(card["tree"]), "plain_step_ms": plain, "draft_ms": r["draft_ms"], "verify_ms": verify,
            "other_ms": r["other_ms"], "break_even_tau": step / plain if plain else None,
            "predicted_speedup": card["tau"] * plain / step if step and card["tau"] else None}


# ------------------------------------------------------------------------------------------ the run


TEST_SHARE = 0.55  # at most this share of the budget for the cuda tests; the timings take the rest
TEST_FLOOR_S = 60.0  # but never less: pytest's start alone (torch, transformers) can take half a minute


def run(a, report: Report, out: Path) -> None:
    """The phases in order, each inside the budget; an error in one is a failure and the next still runs."""
    budget = Budget(a.budget_s)
    report.env = environment(a.device)
    report.tests = cuda_tests(a.device, out, max(budget.left() * TEST_SHARE, TEST_FLOOR_S))
    if not report.tests["ok"]:
        report.failures.append(f"cuda tests: {report.tests['summary'] or 'no summary'} (rc {report.tests['rc']})")
    sizes = FULL if a.device == "cuda" else DRY
    if a.device == "cpu":
        import torch

        torch.set_num_threads(1)  # toy sizes are dispatch-bound: more threads only contend (tests/conftest.py)
    shipped = cards()
    for name in a.archs.split(","):
        if budget.left() <= 0:
            report.archs[name] = {"skipped": "time budget spent"}
            report.failures.append(f"{name}: not measured, the time budget was spent")
            continue
        heads = [c for c in shipped if c["model"] == name]
        try:
            report.archs[name] = time_arch(name, a.device, sizes, heads)
        except Exception as e:  # noqa: BLE001 - one architecture's error is reported, the others still run
            report.archs[name] = {"error": f"{type(e).__name__}: {e}"}
            report.failures.append(f"{name}: {type(e).__name__}: {e}")
            continue
        report.failures += arch_failures(name, report.archs[name])
        report.predictions += [predict(c, report.archs[name]) for c in heads]


def text(report: Report) -> str:
    """The short text report: environment, tests, each architecture's costs, the predictions and the verdict."""
    e, t = report.env, report.tests
    lines = [f"gpu_day on {report.device} ({e.get('device_name')}): torch {e.get('torch')}, transformers "
             f"{e.get('transformers')} (pins {e.get('pins')}), {report.wall_s:.0f} s",
             f"cuda tests: {'PASS' if t.get('ok') else 'FAIL'}  {t.get('summary')}"]
    for name, r in report.archs.items():
        if "races" not in r:
            lines.append(f"{name}: {r}")
            continue
        fp32 = r.get("fp32")
        lines.append(f"{name} ({r['parameters_m']} M params, bf16): verify ms by tree size "
                     + ", ".join(f"{k}:{v:.2f}" for k, v in r["verify_ms"].items())
                     + ("" if fp32 is None else f"; fp32 EAGLE-2 == plain: {fp32['identical']}"))
        for head, x in r["races"].items():
            lines.append(f"  {head}: plain {x['plain_step_ms']:.2f} ms, draft {x['draft_ms']:.2f}, verify "
                         f"{x['verify_ms']:.2f}, other {x['other_ms']:.2f}; untrained tau {x['tau']:.2f}, "
                         f"end to end x{x['measured_speedup']:.2f}; bf16 identical {x['identical']}")
    for p in report.predictions:
        speed = "n/a" if p["predicted_speedup"] is None else f"x{p['predicted_speedup']:.2f}"
        lines.append(f"predicted: {p['head']} (CPU tau {p['cpu_tau']}) -> {speed} here "
                     f"(break-even tau {p['break_even_tau']:.2f})")
    lines.append("PASS" if not report.failures else f"FAIL ({len(report.failures)}):")
    lines += [f"  {f}" for f in report.failures]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the check, write the report, print its text; 0 when everything passed, 1 on a failure, 2 on bad input."""
    try:
        a = parse_args(argv)
    except ValueError as e:
        return fail("gpu_day", e)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    report = Report(a.device)
    try:
        run(a, report, out)
    except ValueError as e:
        return fail("gpu_day", e)
    report.wall_s = time.perf_counter() - t0
    (out / "gpu_day.json").write_text(json.dumps(report.__dict__, indent=1) + "\n")
    (out / "gpu_day.txt").write_text(text(report))
    print(text(report), end="")
    return 0 if not report.failures else 1


if __name__ == "__main__":
    sys.exit(main())
