"""The model and head picker (app/picker.py): the offered presets, switching once per model, head folders checked
and refused when they do not fit, uploads unpacked safely."""
from __future__ import annotations

import zipfile

import pytest
import torch

from app.handlers import Playground
from app.picker import Bundle, Picker, head_folder, offered
from app.state import Choice
from core.drafters.draft_head import HeadConfig, init_head, save_head
from core.models.presets import PRESETS
from fakes import tiny_stack


def test_offered_presets_installed_offline_or_named(monkeypatch):
    installed = [p.name for p in PRESETS if p.offline and p.installed()]
    assert offered("") == installed
    # left out: hub presets (offered only when named) and offline presets whose package is not installed
    assert all(not p.offline or not p.installed() for p in PRESETS if p.name not in offered(""))
    assert offered("nope, " + installed[0]) == installed[:1] if installed else True
    monkeypatch.setenv("EAGLE_PRESETS", ",".join(reversed(installed)))
    assert offered() == list(reversed(installed))


SEEDS = {"a": 1, "b": 2}


def make_picker(loads, keep: int = 2):
    """A Playground serving a tiny Llama at start, two fake presets "a" and "b" (tiny Llamas of other seeds, so
    their outputs differ), at most `keep` bundles in memory."""
    def loader(name):
        loads.append(name)
        tok, b, e = tiny_stack(seed=SEEDS[name])
        return Bundle(name, tok, b, e, {}, None, f"Target **{name}**")

    tok, b, e = tiny_stack()
    pg = Playground(tok, b, e, text_every=0, plot_every=0, charts_every=0, offered=["a", "b"], loader=loader,
                    max_loaded=keep)
    return pg, Picker(pg.models, ["a", "b"])


def test_switch_loads_once_and_serves_the_new_decoders():
    """A switch is the session's choice: loaded once, shared, the start-up model still served to everyone else;
    at most `keep` bundles in memory (the start-up one counts), the least recently used dropped."""
    loads = []
    pg, picker = make_picker(loads)
    old = pg.eagle
    choice, msg = picker.switch("a")
    assert "loaded in" in msg and choice == Choice("a") and pg.models.peek(choice).eagle is not old
    assert pg.model == "tiny-llama" and pg.eagle is old  # nobody else's model changed
    assert "already loaded" in picker.switch("tiny-llama")[1] and pg.models.peek(None).eagle is old
    picker.switch("a")
    assert loads == ["a"]  # loaded once
    picker.switch("b")  # keep=2: the start-up model stays, "a" (the least recently used other) is dropped
    assert pg.models.names() == ["tiny-llama", "b"] and pg.models.peek(Choice("a")) is None
    with pytest.raises(ValueError, match="not offered"):
        picker.switch("c")


def test_head_that_does_not_fit_is_refused_and_the_served_head_stays(tmp_path):
    pg, picker = make_picker([])
    vocab = pg.baseline.target.vocab_size
    save_head(init_head(HeadConfig.for_target(32, vocab)), tmp_path / "h32", dtype=torch.float32)
    save_head(init_head(HeadConfig.for_target(64, vocab + 5)), tmp_path / "v", dtype=torch.float32)
    eagle = pg.eagle
    with pytest.raises(ValueError, match="does not fit tiny-llama: head hidden size 32"):
        picker.try_head(None, str(tmp_path / "h32"))
    with pytest.raises(ValueError, match="vocabulary"):
        picker.try_head(None, str(tmp_path / "v"))
    assert pg.eagle is eagle
    save_head(init_head(HeadConfig.for_target(64, vocab)), tmp_path / "ok", dtype=torch.float32)
    choice, msg = picker.try_head(None, str(tmp_path / "ok"))
    assert "tiny-llama + ok" in msg and "vLLM" in msg and pg.models.peek(choice).eagle is not eagle
    assert choice.name == "tiny-llama + ok" and pg.eagle is eagle  # bound to that session only


def test_uploads_zip_or_files_and_refuses_escaping_members(tmp_path):
    save_head(init_head(HeadConfig.for_target(64, 320)), tmp_path / "h", dtype=torch.float32)
    z = tmp_path / "h.zip"
    with zipfile.ZipFile(z, "w") as f:
        for p in (tmp_path / "h").iterdir():
            f.write(p, f"h/{p.name}")
    assert (head_folder(files=[str(z)]) / "config.json").exists()
    assert (head_folder(files=[str(p) for p in (tmp_path / "h").iterdir()]) / "model.safetensors").exists()
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as f:
        f.writestr("../evil/config.json", "{}")
    with pytest.raises(ValueError, match="outside"):
        head_folder(files=[str(bad)])
    with pytest.raises(ValueError, match="choose a head folder"):
        head_folder()


def test_past_runs_keep_their_tokenizer_for_tree_labels():
    pg, picker = make_picker([])
    record = list(pg.stream("Once upon a time", 4, 0.0, 1.0, 0, 8, 3, 2, 0))[-1][-1]
    assert pg.label_for(record) == pg.label  # the start-up model: the Playground's own labeller
    choice, _ = picker.switch("a")
    other = list(pg.stream("Once upon a time", 4, 0.0, 1.0, 0, 8, 3, 2, 0, choice=choice))[-1][-1]
    label = pg.label_for(other)  # a run on "a": labels in a's tokenizer
    assert label != pg.label and label(pg.tok.encode("hello")[0]) == pg.label(pg.tok.encode("hello")[0])
    assert pg.label_for(None) == pg.label


def test_a_load_never_stops_serving_and_runs_in_flight_finish_on_their_decoders():
    import threading

    release, started = threading.Event(), threading.Event()

    def slow_loader(name):
        started.set()
        release.wait(30)
        tok, b, e = tiny_stack(seed=1)
        return Bundle(name, tok, b, e)

    tok, b, e = tiny_stack()
    pg = Playground(tok, b, e, text_every=0, plot_every=0, charts_every=0, offered=["a"], loader=slow_loader)
    picker = Picker(pg.models, ["a"])
    expected = pg.run("Once upon a time", 12)["eagle_token_ids"]
    stream = pg.stream("Once upon a time", 12, 0.0, 1.0, 0, 8, 3, 2, 0)
    next(stream)  # a run in flight on the first model
    chosen = []
    loading = threading.Thread(target=lambda: chosen.append(picker.switch("a")))
    loading.start()
    assert started.wait(30)
    assert pg.run("Once upon a time", 12)["eagle_token_ids"] == expected  # served while the load runs
    release.set()
    loading.join(30)
    assert chosen[0][0] == Choice("a") and pg.model == "tiny-llama" and pg.eagle is e
    *_, last = stream  # the run in flight ends on the decoders it started with
    record = last[-1]
    assert record.model == "tiny-llama"
    assert record.finished_run["summary"]["lanes"]["eagle2"]["token_ids"] == expected
