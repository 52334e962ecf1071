"""core/bench/measure_defaults.py: the bench runs with app.py's own settings (EAGLE_* included) and the app's tree plan,
at T=0 and T=1, and writes the JSON files and README's rows."""
import json

from core.bench import measure_defaults as md
from test_bench import stack  # noqa: F401  (the tiny model, head and questions on disk)


def test_runs_the_apps_defaults_at_both_temperatures(stack, tmp_path, monkeypatch, capsys):  # noqa: F811
    for k in ("EAGLE_TREE", "EAGLE_PROMPT_MODE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("EAGLE_MODEL", stack["model"])
    monkeypatch.setenv("EAGLE_HEAD", stack["head"])
    monkeypatch.setenv("EAGLE_DEVICE", "cpu")
    monkeypatch.setenv("EAGLE_DTYPE", "fp32")
    rc = md.main(["--questions", stack["questions"], "--limit", "2", "--per-category", "0", "--max-new-tokens", "8",
                  "--out", str(tmp_path), "--date", "2026-12-06", "--split", "all"])
    out = capsys.readouterr().out
    assert rc == 0, out
    summary = json.loads((tmp_path / "defaults_2026-12-06.json").read_text())
    assert summary["tree_source"].startswith("auto")  # the app plans its trees on this machine by default
    for t, regime in ((0, "greedy"), (1, "sampled")):
        res = json.loads((tmp_path / f"defaults_2026-12-06_t{t}.json").read_text())
        c = res["config"]
        assert c["temperature"] == t and c["model"] == stack["model"] and c["head"] == stack["head"]
        assert c["methods"] == ["hf", "baseline", "eagle2"] and c["n_prompts"] == 2 and c["max_new_tokens"] == 8
        tree = c["tree"]  # the app's own plan for the regime, passed as a fixed tree
        assert f"{tree['total_tokens']},{tree['depth']},{tree['top_k']},{tree['lookup']},{tree['stop_below']}" == \
            summary["trees"][regime]
        assert c["split"] == "all"
    rows = summary["rows"]
    assert [r["T"] for r in rows] == [0.0, 1.0] and all(r["vs_baseline"] > 0 and r["tau"] >= 1 for r in rows)
    assert all(r["median_vs_baseline"] > 0 and r["loops"] is not None for r in rows)
    assert "copied by context lookup" in out and "ending in a loop" in out
    assert out.count("\n| 0 |") == 1 and out.count("\n| 1 |") == 1 and "vs our baseline" in out


def test_missing_questions_file_is_one_line(tmp_path, capsys):
    assert md.main(["--questions", str(tmp_path / "none.jsonl")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
