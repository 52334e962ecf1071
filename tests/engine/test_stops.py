"""Stop strings (core/engine/stops.py) for the CLI, the app's lanes and /run: a generation ends at the first token whose
text completes a stop string, the string stays in the output, and greedy lanes stay token-identical."""
from __future__ import annotations

import json

import gradio as gr
import pytest

from core.engine.events import StepEvent
from core.engine.stops import MAX_STOPS, check_stops, stop_at
from fakes import tiny_stack

PROMPT = "Once upon a time"


def first_stop(decode, ids: list[int], stop: str) -> int:
    """The specification: the shortest prefix of ids whose text contains `stop` (its length)."""
    return next(k for k in range(1, len(ids) + 1) if stop in decode(ids[:k]))


def test_stop_at_cuts_the_step_after_the_completing_token_and_closes_the_decoder():
    closed = []

    def events():
        try:
            yield StepEvent(0, "eagle2", (ord("a"),), margins=(1.0,), top_logits=(5.0,))
            yield StepEvent(1, "eagle2", tuple(map(ord, "bcXYd")), margins=(1.0,) * 5, top_logits=(5.0,) * 5)
            yield StepEvent(2, "eagle2", tuple(map(ord, "efg")))
        finally:
            closed.append(True)

    decode = lambda ids: "".join(map(chr, ids))  # noqa: E731
    out = list(stop_at(events(), decode, ("XY",)))
    assert [decode(list(e.new_token_ids)) for e in out] == ["a", "bcXY"]
    assert out[-1].finished and len(out[-1].margins) == len(out[-1].top_logits) == 4
    assert closed == [True]  # the decoder's generator was closed (its finally frees its caches)
    assert [e.new_token_ids for e in stop_at(events(), decode, ())] == [e.new_token_ids for e in events()]


def test_stop_strings_are_validated():
    assert check_stops(None) == () and check_stops("") == () and check_stops("###") == ("###",)
    assert check_stops(["a", "", "b"]) == ("a", "b")
    for bad, msg in [(["x"] * (MAX_STOPS + 1), "at most"), (["y" * 65], "at most 64"), ([3], "strings"),
                     (7, "strings")]:
        with pytest.raises(ValueError, match=msg):
            check_stops(bad)


def test_both_lanes_stop_at_the_same_token_and_stay_identical():
    """A stop string taken from the middle of the greedy output: /run's two lanes end at the same token, the
    spec's shortest prefix containing it, and the texts keep it."""
    from app.handlers import Playground

    tok, b, e = tiny_stack()
    pg = Playground(tok, b, e)
    full = pg.run(PROMPT, 40)
    ids = full["baseline_token_ids"]
    decode = lambda x: tok.decode(x, skip_special_tokens=True)  # noqa: E731
    stop = decode(ids[18:21]).strip()[:6]
    assert stop
    k = first_stop(decode, ids, stop)
    out = pg.run(PROMPT, 40, stop=[stop])
    assert out["baseline_token_ids"] == ids[:k] == out["eagle_token_ids"] and out["identical"] is True
    assert stop in out["eagle_text"] and k < len(ids)
    with pytest.raises(gr.Error, match="at most 4 stop strings"):
        pg.run(PROMPT, 8, stop=["a", "b", "c", "d", "e"])
    views = list(pg.stream(PROMPT, 40, 0.0, 1.0, 0, 16, 6, 6, 10, "none", 0.0, None, stop + "\n"))
    live = views[-2][-1]  # the live record (the last view holds only its compact form)
    assert live.ids("eagle") == ids[:k] == live.ids("baseline")  # the UI's textbox: one stop string per line


def test_cli_generate_stops(tmp_path, capsys):
    from test_generate_cli import word_tokenizer

    from conftest import tiny_model
    from core.generate import main

    tiny_model("llama").save_pretrained(tmp_path / "model")
    word_tokenizer().save_pretrained(tmp_path / "model")
    common = ["--model", str(tmp_path / "model"), "--prompt", "w3 w17 w42 w5 w9 w11", "--max-new-tokens", "30",
              "--dtype", "fp32", "--device", "cpu", "--json"]
    runs = {}
    for method in ("baseline", "eagle2"):
        assert main([*common, "--method", method]) == 0
        runs[method] = json.loads(capsys.readouterr().out)
    ids = runs["baseline"]["token_ids"]
    decode = lambda x: word_tokenizer().decode(x, skip_special_tokens=True)  # noqa: E731
    stop = decode(ids[12:14])
    k = first_stop(decode, ids, stop)
    for method in ("baseline", "eagle2"):
        assert main([*common, "--method", method, "--stop", stop, "--stop", "never-said"]) == 0
        r = json.loads(capsys.readouterr().out)
        assert r["token_ids"] == ids[:k] and r["text"].endswith(stop)
    assert main([*common, "--stop", "z" * 65]) == 2
    assert "at most 64" in capsys.readouterr().err
