"""core/bench/head_curve.py: tokens and training seconds add up along a fine-tuned head's chain of cards, every
snapshot of a run becomes a point at its share of the run's data, and an evaluate result replaces a card's own."""
from __future__ import annotations

import json

from core.bench.head_curve import main, rows_for


def card(tokens: int, generated: int, secs: float, tau0: float, tau1: float, init: dict | None = None,
         curve: list | None = None, steps: int = 10) -> dict:
    return {"head_type": "eagle", "hardware": {"cpu": "AMD EPYC · avx2"},
            "data": {"stored": {"tokens": 0, "generated": 0},
                     "extra_stored": {"runs/x/shards": {"tokens": tokens, "generated": generated}}},
            "training": {"tokens": tokens, "epochs": 1.0, "steps": steps, "train_seconds": secs, "layers": 2,
                         "curve": curve or []},
            "evaluation": {"results": [{"temperature": 0.0, "tau": tau0}, {"temperature": 1.0, "tau": tau1}]},
            **({"init_card": init} if init else {})}


def test_chain_snapshots_and_replaced_evaluation(tmp_path, capsys):
    first = card(1000, 600, 100.0, 1.4, 1.3)
    second = card(3000, 2000, 300.0, 1.7, 1.5, init=first,
                  curve=[{"step": 5, "tokens_seen": 1500, "tau_t0": 1.6}, {"step": 10, "tokens_seen": 3000,
                                                                           "tau_t0": 1.7}])
    head = tmp_path / "head"
    head.mkdir()
    (head / "training.json").write_text(json.dumps(second))
    rows = rows_for(head, None)
    assert [r["tokens_seen"] for r in rows] == [2500, 4000, 4000]  # snapshots, then the head itself
    assert [r["train_seconds"] for r in rows] == [250, 400, 400]  # the first round's 100 s, then half/all of 300
    assert [r["generated_seen"] for r in rows] == [1600, 2600, 2600]
    assert rows[-1]["tau_t0"] == 1.7 and rows[-1]["tau_t1"] == 1.5 and rows[0]["tau_t1"] is None

    other = tmp_path / "eval.json"
    other.write_text(json.dumps({"cpu": "other", "results": [{"temperature": 0.0, "tau": 1.9}]}))
    assert main([str(head), "--eval", f"{head}={other}", "--json", str(tmp_path / "out.json")]) == 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert out[-1]["tau_t0"] == 1.9 and out[-1]["tau_t1"] is None and out[-1]["cpu"] == "other"
    table = capsys.readouterr().out.strip().splitlines()
    assert len(table) == 2 + 3 and table[-1].endswith("| 1.90 | – |")


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert main([str(tmp_path / "missing")]) == 2
    assert main([str(tmp_path), "--eval", "no-equals-sign"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("[head_curve] error:") for line in err)
