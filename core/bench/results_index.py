"""The results leaderboard, built from the bench JSON files in results/ (no model, no network).

python -m core.bench.results_index [--results results] [--write docs/results.md] [--index results/INDEX.md] [--compress]

Every core.bench JSON (config + per_prompt + summary) gives one row per drafting method it measured (eagle2,
eagle2-head, the -b head, chains, Medusa, lookup): date, the commit that added the file, processor, model, dtype,
head, tree, temperature, speedup against transformers generate() and against our own baseline, tau, T=0
mismatches, and a link to the JSON. Rows are newest first. With --write the table replaces the lines between the
two LEADERBOARD markers of that markdown file; without, it is printed.

results/ is grouped by what a file measures, one folder each (FOLDERS below: bench/, heads/, training/, kernels/,
serving/, gpu/); both the leaderboard and the index walk every folder, and the index lists each folder's files
under its own heading.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from core.bench.jsonfile import XZ, compress_results, is_json, read_json
from core.cli import Parser, run

DRAFTING = ("eagle2", "eagle2-head", "eagle2-head-b", "eagle2-chain", "eagle2-chain-b", "eagle2-greedy-tree",
            "medusa", "lookup")
BEGIN, END = "<!-- LEADERBOARD BEGIN (core/bench/results_index.py) -->", "<!-- LEADERBOARD END -->"
FOLDERS = {  # results/'s folders: what the files in each measure
    "bench": "core.bench runs: speed and tau of each drafting method against transformers generate() and our own "
             "baseline (Spec-Bench, MT-bench, presets, tree sweeps, the app's defaults), their console logs, and the "
             "time split of a run (scripts/probes/why_check.py)",
    "heads": "draft heads compared: tau per head and round, tau against training data (core/bench/head_curve.py), a "
             "re-chosen draft vocabulary, the best tree for a perfect drafter (scripts/probes/oracle_tau.py)",
    "training": "training rounds: held-out curves and A/B arms of a round, data-generation throughput",
    "kernels": "kernel routes and attention: A/B switches of the LM-head and body routes, the row-invariant attention "
               "against SDPA, bf16 row probes, profiles",
    "serving": "the same heads served by vLLM (scripts/vllm_side.py)",
    "gpu": "the GPU check's CPU reference (scripts/gpu_check.py --write-reference)",
}
HEADER = ("| date | commit | processor | model | dtype | method | head | tree | T | vs generate() | vs baseline | tau "
          "| mismatches (unexplained) | JSON |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def is_bench(data: object) -> bool:
    """A core.bench result: a dict with config and summary."""
    return isinstance(data, dict) and isinstance(data.get("config"), dict) and isinstance(data.get("summary"), dict)


def tree_text(tree: object) -> str:
    """A TreeConfig dict -> 'T,D,K,L[,S]'; anything else (an auto plan, None) as short text."""
    if isinstance(tree, dict) and "total_tokens" in tree:
        parts = [tree["total_tokens"], tree["depth"], tree["top_k"], tree.get("lookup", 0)]
        if tree.get("stop_below"):
            parts.append(tree["stop_below"])
        return ",".join(str(p) for p in parts)
    if isinstance(tree, dict):
        return "auto"
    return "auto" if tree in (None, "auto") else str(tree)[:24]


def method_head_tree(config: dict, method: str) -> tuple[str, str]:
    """(head, tree) a method ran with, from the bench config's fields."""
    if method == "lookup":
        return "none (prompt lookup)", tree_text(config.get("tree"))
    if method == "medusa":
        return str(config.get("medusa_head") or "shipped Medusa head"), tree_text(config.get("tree"))
    b = method.endswith("-b")
    head = config.get("head_b" if b else "head") or "shipped default"
    if method.startswith("eagle2-chain"):
        return str(head), tree_text(config.get("chain_tree")) if config.get("chain_tree") else "chain"
    if method.startswith("eagle2-head"):
        tree = config.get("head_tree_b" if b else "head_tree") or config.get("tree")
        return str(head), tree_text(tree)
    return str(head), tree_text(config.get("tree"))


def num(x: object, fmt: str = "{:.2f}", suffix: str = "") -> str:
    return fmt.format(x) + suffix if isinstance(x, (int, float)) else "–"


def rows_of(path: Path, data: dict, commit: str, rel: str | None = None) -> list[tuple[str, str]]:
    """(sort key, markdown row) per drafting method of one bench result; rel is its path under results/."""
    rel = rel or path.name
    c, summary = data["config"], data["summary"]
    cpu = (c.get("machine") or {}).get("cpu") or "not recorded"
    date = str(c.get("date", ""))[:10] or "?"
    t = c.get("temperature")
    out = []
    for m in DRAFTING:
        s = summary.get(m)
        if not isinstance(s, dict):
            continue
        head, tree = method_head_tree(c, m)
        mism = "–"
        if t == 0 and isinstance(s.get("mismatches"), int):
            mism = f"{s['mismatches']} ({num(s.get('unexplained_mismatches'), '{}')})"
        row = (f"| {date} | {commit} | {cpu} | {c.get('model', '?')} | {c.get('dtype', '?')} | {m} | {head} | {tree} "
               f"| {num(t, '{:g}')} | {num(s.get('speedup_vs_hf'), suffix='x')} "
               f"| {num(s.get('speedup_vs_baseline'), suffix='x')} | {num(s.get('tau'))} | {mism} "
               f"| [{path.name}](../results/{rel}) |")
        out.append((str(c.get("date", "")) + path.name + m, row))
    return out


def added_commits(results: Path) -> dict[str, str]:
    """File name -> short hash of the commit that added it (empty when git is unavailable)."""
    try:
        log = subprocess.run(["git", "log", "-M", "--diff-filter=A", "--format=@%h", "--name-only", "--",
                              str(results)],
                             capture_output=True, text=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    commits, current = {}, ""
    for line in log.splitlines():
        if line.startswith("@"):
            current = line[1:]
        elif line.strip():
            commits.setdefault(Path(line).name, current)  # the newest add first; a move into a folder is no add
    return commits


def leaderboard(results: Path) -> str:
    """The markdown table, newest first."""
    commits = added_commits(results)
    rows = []
    for path in sorted(p for p in results.rglob("*") if is_json(p)):
        try:
            data = read_json(path)
        except (OSError, ValueError):
            continue
        if is_bench(data):
            name = path.name.removesuffix(XZ)  # a compressed file keeps the commit that added its plain form
            rows += rows_of(path, data, commits.get(name, commits.get(path.name, "?")),
                            path.relative_to(results).as_posix())
    rows.sort(key=lambda r: r[0], reverse=True)
    return HEADER + "\n" + "\n".join(r for _, r in rows)


OTHER = {  # files that are not core.bench results: what wrote them and what they hold
    ".log": "console log of the run that wrote the JSON of the same name",
    ".txt": "plain-text report of a script (A/B switches, profiles, commit lists)",
    ".jsonl": "one JSON record per line (data throughput, oracle tau per prompt)",
    ".md": "markdown report of a script",
}


def index(results: Path) -> str:
    """results/INDEX.md: one line per file saying what it is, grouped by folder (files at the top first)."""
    lines = ["# results/: what each file is", "",
             "Data only: core.bench JSON (config + per_prompt + summary), their console logs, and a few script "
             "reports, one folder per kind of measurement. HTML reports are written on request (`--html`) and not "
             "committed (.gitignore). The leaderboard built from these files is docs/results.md (`python -m "
             "core.bench.results_index --write docs/results.md --index results/INDEX.md` rebuilds both).", ""]
    folders = sorted((p for p in results.iterdir() if p.is_dir()), key=lambda p: (p.name not in FOLDERS, p.name))
    top = [p for p in sorted(results.iterdir()) if p.is_file() and p.name != "INDEX.md"]
    if folders:
        lines += ["| folder | files | what |", "|---|---|---|"]
        lines += [f"| [{d.name}/](#{d.name}) | {sum(1 for p in d.rglob('*') if p.is_file())} "
                  f"| {FOLDERS.get(d.name, '')} |" for d in folders]
        lines.append("")
    if top:
        lines += table(top, results)
    for d in folders:
        lines += [f"## {d.name}/", "", FOLDERS.get(d.name, ""), ""] if d.name in FOLDERS else [f"## {d.name}/", ""]
        lines += table(sorted(p for p in d.rglob("*") if p.is_file()), d)
    return "\n".join(lines).rstrip("\n") + "\n"


def table(files: list[Path], under: Path) -> list[str]:
    """A markdown table naming what each file is (paths relative to `under`), and a blank line."""
    lines = ["| file | what |", "|---|---|"]
    for path in files:
        what = OTHER.get(path.suffix, "")
        if is_json(path):
            try:
                data = read_json(path)
            except (OSError, ValueError):
                data = None
            if is_bench(data):
                c = data["config"]
                what = (f"core.bench: {c.get('model', '?')}, {c.get('dtype', '?')}, T={num(c.get('temperature'), '{:g}')}"
                        f", {c.get('n_prompts', '?')} prompts, methods {', '.join(data['summary'])}; "
                        f"{str(c.get('date', ''))[:10]}")
            elif isinstance(data, dict) and "bench_commands" in data:
                what = "core/bench/measure_defaults.py: README's table rows, the app's settings and the bench commands"
            elif isinstance(data, dict) and "engine" in data:
                what = f"scripts/vllm_side.py: {data.get('engine')} {data.get('version', '')} on {data.get('model', '?')}"
            elif isinstance(data, dict) and isinstance(data.get("what"), str):  # a file that says what it is
                what = data["what"]
            elif isinstance(data, list) and data and all(isinstance(r, dict) and "tokens_seen" in r for r in data):
                what = f"core/bench/head_curve.py: τ against training data, {len(data)} heads and snapshots from their cards"
            else:
                what = "probe data of a script (scripts/bf16_rows_probe.py)"
        lines.append(f"| {path.relative_to(under).as_posix()} | {what} |")
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    """`python -m core.bench.results_index`: the leaderboard (printed, or written into --write's marked block) and the
    file index; bad input (a missing file, a file without the block) is one line and exit status 2 (core/cli.py)."""
    return run("core.bench.results_index", _main, argv)


def _main(argv: list[str] | None) -> int:
    p = Parser(prog="python -m core.bench.results_index", description=__doc__.splitlines()[0])
    p.add_argument("--results", default="results", help="folder of bench JSON files")
    p.add_argument("--write", default=None, help="markdown file whose LEADERBOARD block is replaced")
    p.add_argument("--index", default=None, help="also write the file index here (results/INDEX.md)")
    p.add_argument("--compress", action="store_true",
                   help="first keep every JSON result over 20 KB compressed (NAME.json.xz) and point the repository's "
                        "docs, recipes and code at the new names (core/bench/jsonfile.py)")
    a = p.parse_args(argv)
    if a.compress:
        for old, new in compress_results(Path(a.results).resolve(), Path.cwd().resolve()):
            print(f"{old} -> {new}")
    if a.index:
        Path(a.index).write_text(index(Path(a.results)))
    table = leaderboard(Path(a.results))
    if not a.write:
        print(table)
        return 0
    doc = Path(a.write)
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{doc} has no {BEGIN} ... {END} block")
    head, rest = text.split(BEGIN, 1)
    doc.write_text(head + BEGIN + "\n" + table + "\n" + END + rest.split(END, 1)[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
