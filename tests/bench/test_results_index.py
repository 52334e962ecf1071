"""core/bench/results_index.py: the leaderboard and the file index built from bench JSON files, and results/ staying
data (no HTML pages, under 10 MB)."""
import json
import subprocess
from pathlib import Path

from core.bench.results_index import BEGIN, END, index, leaderboard, main

ROOT = Path(__file__).resolve().parents[2]


def bench(date: str, t: float, summary: dict) -> dict:
    return {"config": {"date": date, "temperature": t, "model": "m", "dtype": "bfloat16", "n_prompts": 2,
                       "machine": {"cpu": "AMD EPYC · avx2"}, "head": "static/heads/m",
                       "tree": {"total_tokens": 16, "depth": 5, "top_k": 4, "lookup": 10, "stop_below": 0.0}},
            "per_prompt": [], "summary": summary}


def test_one_row_per_drafting_method_newest_first(tmp_path):
    (tmp_path / "old.json").write_text(json.dumps(bench("2026-12-01T10:00", 0.0, {
        "hf": {"speedup_vs_hf": 1.0}, "eagle2": {"speedup_vs_hf": 2.5, "speedup_vs_baseline": 1.9, "tau": 3.1,
                                                 "mismatches": 2, "unexplained_mismatches": 0}})))
    (tmp_path / "new.json").write_text(json.dumps(bench("2026-12-03T10:00", 1.0, {
        "eagle2": {"speedup_vs_hf": None, "speedup_vs_baseline": 1.2, "tau": 1.5, "mismatches": None}})))
    (tmp_path / "probe.json").write_text(json.dumps({"pad": 1}))  # not a bench result: no row
    (tmp_path / "defaults_2026-12-03.json").write_text(json.dumps({"rows": [], "bench_commands": []}))
    rows = [r for r in leaderboard(tmp_path).splitlines()[2:]]
    assert len(rows) == 2
    assert "2026-12-03" in rows[0] and "| 1 |" in rows[0] and "| – | 1.20x |" in rows[0]
    assert "2.50x | 1.90x | 3.10 | 2 (0) |" in rows[1] and "16,5,4,10" in rows[1] and "AMD EPYC · avx2" in rows[1]
    assert "[old.json](../results/old.json)" in rows[1]
    listing = index(tmp_path)
    assert "| old.json | core.bench: m, bfloat16, T=0, 2 prompts, methods hf, eagle2; 2026-12-01 |" in listing
    assert "| probe.json |" in listing
    assert "| defaults_2026-12-03.json | core/bench/measure_defaults.py:" in listing


def test_write_replaces_only_the_marked_block(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "a.json").write_text(json.dumps(bench("2026-12-01", 0.0, {"eagle2": {"tau": 2.0}})))
    doc = tmp_path / "doc.md"
    doc.write_text(f"intro\n{BEGIN}\nstale\n{END}\noutro\n")
    assert main(["--results", str(tmp_path / "r"), "--write", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("intro\n") and text.endswith("outro\n") and "stale" not in text and "a.json" in text
    (tmp_path / "plain.md").write_text("no markers")
    assert main(["--results", str(tmp_path / "r"), "--write", str(tmp_path / "plain.md")]) == 2


def committed_results() -> list[Path]:
    """results/ as committed (an HTML report written locally on request is ignored by git, so not counted)."""
    try:
        out = subprocess.run(["git", "ls-files", "results"], cwd=ROOT, capture_output=True, text=True, check=True,
                             timeout=60).stdout
        return [ROOT / line for line in out.splitlines() if (ROOT / line).is_file()]
    except (OSError, subprocess.SubprocessError):  # an unpacked archive without git: every file counts
        return [p for p in (ROOT / "results").rglob("*") if p.is_file()]


def test_results_hold_data_not_pages():
    files = committed_results()
    assert files
    assert not [p.name for p in files if p.suffix == ".html"]
    assert sum(p.stat().st_size for p in files) < 10 * 1024 * 1024
    assert (ROOT / "results" / "INDEX.md").is_file()


def test_index_names_what_each_kind_of_file_is(tmp_path):
    (tmp_path / "curve.json").write_text(json.dumps([{"head": "h", "tokens_seen": 10, "tau_t0": 1.5}]))
    (tmp_path / "vllm.json").write_text(json.dumps({"engine": "vllm", "version": "0.32.0", "model": "m"}))
    (tmp_path / "other.json").write_text(json.dumps([1, 2]))
    (tmp_path / "round.json").write_text(json.dumps({"what": "a round's held-out curves", "run": {}}))
    text = index(tmp_path)
    assert "| round.json | a round's held-out curves |" in text
    assert "| curve.json | core/bench/head_curve.py: τ against training data, 1 heads and snapshots" in text
    assert "| vllm.json | scripts/vllm_side.py: vllm 0.32.0 on m |" in text
    assert "| other.json | probe data of a script" in text


def test_index_and_leaderboard_walk_the_folders(tmp_path):
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "b.json").write_text(json.dumps(bench("2026-12-02", 0.0, {"eagle2": {"tau": 2.0}})))
    (tmp_path / "bench" / "b.log").write_text("log")
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "ab.txt").write_text("a/b")
    (tmp_path / "top.json").write_text(json.dumps(bench("2026-12-01", 0.0, {"eagle2": {"tau": 1.0}})))
    table = leaderboard(tmp_path)
    assert "[b.json](../results/bench/b.json)" in table and "[top.json](../results/top.json)" in table
    text = index(tmp_path)
    assert text.index("| top.json |") < text.index("## bench/") < text.index("| b.json |") < text.index("## kernels/")
    assert "| b.log | console log" in text and "| ab.txt | plain-text report" in text
    assert "| [bench/](#bench) | 2 | core.bench runs" in text


def test_compressed_results_are_read_linked_and_referenced_by_their_new_names(tmp_path, monkeypatch):
    """--compress keeps a result over the limit as NAME.json.xz: the leaderboard and the index read it and link
    the new name, the docs and recipes naming its path are pointed at it, and a small file stays plain text."""
    from core.bench.jsonfile import read_json, write_json

    repo = tmp_path / "repo"
    (repo / "results" / "bench").mkdir(parents=True)
    (repo / "docs").mkdir()
    big = bench("2026-12-03", 0.0, {"eagle2": {"tau": 2.5}}) | {"per_prompt": [{"text": "x" * 30_000}]}
    write_json(repo / "results" / "bench" / "big.json", big)
    write_json(repo / "results" / "bench" / "small.json", bench("2026-12-02", 0.0, {"eagle2": {"tau": 2.0}}))
    (repo / "docs" / "a.md").write_text("see [big](../results/bench/big.json), results/bench/big.json.\n"
                                        "and results/bench/big.jsonl and results/bench/small.json\n")
    (repo / "README.md").write_text("`--json results/bench/big.json`\n")
    monkeypatch.chdir(repo)
    assert main(["--results", "results", "--compress"]) == 0
    assert not (repo / "results" / "bench" / "big.json").exists()
    assert read_json(repo / "results" / "bench" / "big.json.xz") == big
    assert (repo / "results" / "bench" / "big.json.xz").stat().st_size < 5_000
    assert (repo / "results" / "bench" / "small.json").exists()
    assert (repo / "docs" / "a.md").read_text() == ("see [big](../results/bench/big.json.xz), results/bench/big.json.xz.\n"
                                                   "and results/bench/big.jsonl and results/bench/small.json\n")
    assert (repo / "README.md").read_text() == "`--json results/bench/big.json.xz`\n"
    table = leaderboard(repo / "results")
    assert "[big.json.xz](../results/bench/big.json.xz)" in table and "| 2.50 |" in table
    assert "| big.json.xz | core.bench: " in index(repo / "results")
    write_json(tmp_path / "w.json.xz", {"a": 1})  # a writer given an .xz name writes it compressed
    assert read_json(tmp_path / "w.json.xz") == {"a": 1} and (tmp_path / "w.json.xz").read_bytes()[:1] != b"{"
