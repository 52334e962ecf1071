"""README's "What you will see": core.bench run with exactly what `python app.py` runs, at T=0 and T=1.

python -m core.bench.measure_defaults --questions FILE.jsonl [--limit 30 | --per-category 5] [--max-new-tokens 128]
    [--out results/bench] [--date YYYY-MM-DD]

The app's settings are read the way app.py reads them (app.parse_args with no flags, so EAGLE_* variables count):
model, head, device and dtype as given (default: the default model and its shipped head, the best device, on CPU
the faster dtype timed at load). The tree is the app's own plan (core.engine.autotree.auto_or_parse, which app/main.py
calls: the engine default, a given T,D,K[,L[,S]], or with EAGLE_TREE=auto the plans measured on this machine for
greedy and for sampled requests), passed to the bench as a fixed tree: its greedy tree at T=0, its sampled tree at T=1. The bench then
races transformers' generate(), our baseline and EAGLE-2 (--methods hf,baseline,eagle2) with the UI's default
answer length (128 new tokens) and top-p 1.

Writes results/bench/defaults_<date>_t0.json and _t1.json (core.bench results, picked up by docs/results.md) and
results/bench/defaults_<date>.json (the table rows, the settings and the command), and prints the markdown rows of
README's table: T, speedup against our baseline and against generate() (ratio of mean tokens/s), tau, the median
per-prompt speedup against our baseline, prompts, processor, date.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import statistics
import sys
from pathlib import Path

from core.bench.jsonfile import read_json, write_json
from core.cli import Parser, fail

ROOT = Path(__file__).resolve().parents[2]  # the repository (app.py, results/)
UI_MAX_NEW_TOKENS = 128  # the UI's default answer length (app/ui.py)


def app_args() -> argparse.Namespace:
    """app.py's parsed settings with no command-line flags (its EAGLE_* environment variables apply). app.py is read
    as a file, not imported: this tool measures what the app runs, and core/ imports nothing from app/ (its flags
    parse without gradio; docs/ARCHITECTURE.md §2)."""
    spec = importlib.util.spec_from_file_location("app_entry", ROOT / "app.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.parse_args([])


def tree_spec(tree) -> str:
    """A TreeConfig -> the bench's T,D,K,L,S."""
    return f"{tree.total_tokens},{tree.depth},{tree.top_k},{tree.lookup},{tree.stop_below}"


def app_trees(args: argparse.Namespace) -> tuple[object, object, str]:
    """(greedy tree, sampled tree, source) exactly as app.py plans them; 'auto' loads the app's decoders to measure."""
    from core.engine.autotree import auto_or_parse

    if args.tree != "auto":
        plan = auto_or_parse(args.tree, None, None)
        return plan.greedy, plan.sampled, plan.source
    from core.pipeline import build_decoders

    _, tok, _, eagle = build_decoders(args.model, args.head, args.device, args.dtype,
                                      trust_remote_code=args.trust_remote_code)
    plan = auto_or_parse("auto", eagle, tok)
    return plan.greedy, plan.sampled, plan.source


def bench_argv(args: argparse.Namespace, tree, temperature: float, a: argparse.Namespace, out: Path) -> list[str]:
    """core.bench's arguments for one temperature, with the app's model, head, device and dtype when set."""
    argv = ["--questions", a.questions, "--max-new-tokens", str(a.max_new_tokens), "--methods", a.methods,
            "--temperature", str(temperature), "--tree", tree_spec(tree), "--split", a.split, "--json", str(out)]
    if a.limit:
        argv += ["--limit", str(a.limit)]
    if a.per_category:
        argv += ["--per-category", str(a.per_category)]
    for flag, value in (("--model", args.model), ("--head", args.head), ("--device", args.device),
                        ("--dtype", args.dtype)):
        if value:
            argv += [flag, value]
    if args.trust_remote_code:
        argv.append("--trust-remote-code")
    if args.prompt_mode == "raw":
        argv.append("--raw")
    return argv


def median_speedup(result: dict, method: str = "eagle2", reference: str = "baseline") -> float | None:
    """The median over prompts of method tokens/s over reference tokens/s."""
    by = {}
    for r in result["per_prompt"]:
        by.setdefault(r["question_id"], {})[r["method"]] = r["tokens_per_s"]
    ratios = [v[method] / v[reference] for v in by.values() if v.get(method) and v.get(reference)]
    return statistics.median(ratios) if ratios else None


def table_row(result: dict) -> dict:
    """One row of README's table from a bench result."""
    c, s = result["config"], result["summary"]["eagle2"]
    return {"T": c["temperature"], "vs_baseline": s.get("speedup_vs_baseline"), "vs_generate": s.get("speedup_vs_hf"),
            "tau": s.get("tau"), "median_vs_baseline": median_speedup(result), "prompts": c["n_prompts"],
            "copied_share": s.get("copied_share"), "loops": s.get("loops"),
            "mismatches": s.get("mismatches"), "processor": (c.get("machine") or {}).get("cpu") or c.get("device"),
            "device": c.get("device"), "dtype": c.get("dtype"), "model": c.get("model"), "date": str(c["date"])[:10]}


def markdown(row: dict) -> str:
    def x(v):
        return f"{v:.2f}x" if isinstance(v, (int, float)) else "–"

    tau = f"{row['tau']:.2f}" if isinstance(row["tau"], (int, float)) else "–"
    copied = f"{row['copied_share']:.0%}" if isinstance(row.get("copied_share"), (int, float)) else "–"
    loops = row.get("loops")
    loops = f"{loops} of {row['prompts']}" if isinstance(loops, int) else "–"
    return (f"| {row['T']:g} | **{x(row['vs_baseline'])}** | {x(row['vs_generate'])} | {tau} "
            f"| {x(row['median_vs_baseline'])} | {copied} | {loops} | {row['prompts']} "
            f"| {row['processor']}, {row['dtype']} | {row['date']} |")


HEADER = ("| T | EAGLE-2 vs our baseline | vs transformers generate() | τ (tokens per target pass) "
          "| median per prompt | accepted drafts copied by context lookup | outputs ending in a loop | prompts "
          "| processor, dtype | date |\n|---|---|---|---|---|---|---|---|---|---|")


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m core.bench.measure_defaults", description=__doc__.splitlines()[0])
    p.add_argument("--questions", required=True, help="Spec-Bench or MT-bench question.jsonl (docs/usage.md)")
    p.add_argument("--limit", type=int, default=0, help="first N prompts")
    p.add_argument("--per-category", type=int, default=5, help="first N prompts per category (default 5: 30 of "
                   "Spec-Bench's six groups); 0 for all")
    p.add_argument("--max-new-tokens", type=int, default=UI_MAX_NEW_TOKENS)
    p.add_argument("--methods", default="hf,baseline,eagle2",
                   help="core.bench methods (hf, baseline and eagle2 make the table; more, e.g. eagle2-head,hf-pld, "
                        "land in the JSON)")
    p.add_argument("--split", default="test", choices=["test", "dev", "all"],
                   help="question split (default test: published numbers never use the dev rows)")
    p.add_argument("--out", default=str(ROOT / "results" / "bench"), help="folder for the JSON files")
    p.add_argument("--date", default=datetime.date.today().isoformat(), help="date in the file names")
    a = p.parse_args(argv)
    if not Path(a.questions).is_file():
        return fail("core.bench.measure_defaults", f"questions file {a.questions!r} not found")
    from core.bench import cli as bench

    args = app_args()
    greedy, sampled, source = app_trees(args)
    print(f"[defaults] app settings: model {args.model or 'default'}, head {args.head or 'default'}, tree {source}: "
          f"greedy {tree_spec(greedy)}, sampled {tree_spec(sampled)}", flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, commands = [], []
    for temperature, tree in ((0.0, greedy), (1.0, sampled)):
        path = out / f"defaults_{a.date}_t{int(temperature)}.json"
        argv_t = bench_argv(args, tree, temperature, a, path)
        commands.append("python -m core.bench " + " ".join(argv_t))
        rc = bench.main(argv_t)
        if rc != 0:
            return rc
        rows.append(table_row(read_json(path)))
    summary = {"what": "README 'What you will see': core.bench with python app.py's own defaults",
               "command": "python -m core.bench.measure_defaults " + " ".join(sys.argv[1:] if argv is None else argv),
               "bench_commands": commands, "tree_source": source,
               "trees": {"greedy": tree_spec(greedy), "sampled": tree_spec(sampled)}, "rows": rows}
    write_json(out / f"defaults_{a.date}.json", summary)
    print(HEADER)
    for row in rows:
        print(markdown(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
