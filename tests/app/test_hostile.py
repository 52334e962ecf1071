"""Hostile use of an exposed app, each case with the behaviour that answers it (docs/trust.md, hardening table):
upload size and cache sweep, the queue's deadline and cheap events off the queue, a planned tree clamped to the
limits, escaped tree labels, draft-id maps checked at load. (NaN draft scores: tests/engine/test_hardening_engine.py; training
resume: tests/train/test_train.py; stop strings: tests/engine/test_stops.py.)"""
from __future__ import annotations

import json
import os
import threading

import pytest
import torch

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402
from gradio_client import Client  # noqa: E402

from app.handlers import Playground  # noqa: E402
from app.inputs import Limits  # noqa: E402
from app.plots import tree_figure  # noqa: E402
from app.ui import DELETE_CACHE, MAX_UPLOAD, build_demo, launch_options  # noqa: E402
from core.engine.autotree import TreePlan  # noqa: E402
from core.engine.config import TreeConfig  # noqa: E402
from core.engine.events import StepEvent, TreeNode  # noqa: E402
from fakes import Paced, tiny_stack  # noqa: E402

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    os.environ["GRADIO_TEMP_DIR"] = str(tmp_path_factory.mktemp("gradio"))
    tok, baseline, eagle = tiny_stack()
    demo = build_demo(tok, baseline, eagle, max_new_tokens=32)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **launch_options())
    yield demo, url
    demo.close()


def test_uploads_are_capped_and_the_cache_is_swept(server):
    """Gradio's upload route exists on every app: a file over MAX_UPLOAD is refused (HTTP 413), a small one is
    accepted, and the Blocks sweep their temporary files (delete_cache)."""
    import httpx

    demo, url = server
    assert MAX_UPLOAD == "1mb" and demo.delete_cache == DELETE_CACHE
    big = httpx.post(f"{url}gradio_api/upload", files={"files": ("big.bin", b"\0" * (2 * 1024 * 1024))}, timeout=30)
    assert big.status_code == 413, big.status_code
    small = httpx.post(f"{url}gradio_api/upload", files={"files": ("s.txt", b"hello")}, timeout=30)
    assert small.status_code == 200
    assert Client(url, verbose=False).predict(PROMPT, 4, api_name="/run")["identical"] is True  # still serving


def test_run_api_takes_stop_strings(server):
    """/run over HTTP: `stop` (a list of strings) ends both lanes at the same token."""
    _, url = server
    c = Client(url, verbose=False)
    full = c.predict(PROMPT, 24, api_name="/run")
    stop = full["baseline_text"].strip()[8:12]
    out = c.predict(PROMPT, 24, stop=[stop], api_name="/run")
    assert stop in out["baseline_text"] and len(out["baseline_token_ids"]) < 24
    assert out["identical"] is True and out["eagle_token_ids"] == out["baseline_token_ids"]


def test_cheap_events_never_take_a_place_in_the_queue(server):
    """Only device work is queued (the two generation endpoints, and the picker's model switch and head change,
    which load weights); the step scrubber, Stop, the lane choice and the slider bookkeeping run outside the queue,
    so scrubbing can neither fill it nor wait behind a generation."""
    demo, _ = server
    queued = sorted(fn.name for fn in demo.fns.values() if fn.queue)
    assert queued == ["head", "run", "stream", "switch"], queued
    assert any(fn.name == "show_step" and not fn.queue for fn in demo.fns.values())


def test_a_request_that_waited_past_the_queue_deadline_is_answered_busy(tmp_path):
    """queue_wait 0.5 s: a second request queued behind a slow one (about 2 s of paced steps) has waited past
    the deadline when its turn comes and is told the server is busy; the first completes, and the app serves
    the next request normally."""
    tok, b, e = tiny_stack()
    demo = build_demo(tok, Paced(b, 0.05), Paced(e, 0.05), limits=Limits(queue_wait=0.5))
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **launch_options())
    try:
        first = {}
        t = threading.Thread(target=lambda: first.update(r=Client(url, verbose=False).predict(
            PROMPT, 24, api_name="/run")))
        t.start()
        import time

        while not any(job for job in (demo._queue.active_jobs or []) if job):  # the first one is running
            time.sleep(0.02)
        with pytest.raises(Exception, match="waited .* for its turn"):
            Client(url, verbose=False).predict(PROMPT, 4, api_name="/run")
        t.join()
        assert len(first["r"]["eagle_token_ids"]) == 24
        assert Client(url, verbose=False).predict(PROMPT, 4, api_name="/run")["identical"] is True
    finally:
        demo.close()


def test_a_planned_tree_wider_than_the_limits_is_clamped_for_run():
    """`app.py --tree 200,6,6`: a /run without tree fields runs the plan clamped to the limits instead of being
    refused; explicit fields are still validated."""
    tok, b, e = tiny_stack()
    pg = Playground(tok, b, e, trees=TreePlan.fixed(TreeConfig(200, 6, 6), "given"))
    out = pg.run(PROMPT, 8)
    assert out["identical"] is True and out["tree"]["total_tokens"] == Limits().total_tokens
    assert pg.planned_tree(0.0, False)[0] == Limits().total_tokens
    with pytest.raises(gr.Error, match="total_tokens must be between 1 and 128"):
        pg.run(PROMPT, 8, total_tokens=200)


def test_tree_labels_are_escaped():
    """Gemma has tokens "<b>" and "<sup>": plotly would render them as formatting; they show as text instead."""
    nodes = (TreeNode(0, -1, 1, 0, 0.0, True, "root"), TreeNode(1, 0, 2, 1, -0.1, True),
             TreeNode(2, 0, 3, 1, -0.5, False), TreeNode(3, 1, 4, 2, 0.0, False, "lookup"))
    ev = StepEvent(1, "eagle2", (2, 5), nodes, (0, 1), step_ms=1.0)
    labels = {1: "<b>", 2: "<sup>", 3: "a&b", 4: "<br>", 5: "</b>"}
    fig = tree_figure(ev, lambda t: labels[t])
    texts = [x for tr in fig.data if tr.text is not None for x in tr.text]
    custom = [str(c) for tr in fig.data if tr.customdata is not None for row in tr.customdata for c in row]
    shown = texts + custom
    assert "&lt;b&gt;" in shown and "&lt;sup&gt;" in shown and "a&amp;b" in shown and "&lt;/b&gt;" in shown
    assert not any(s in ("<b>", "<sup>", "<br>", "</b>") for s in shown)


def test_negative_eagle12_draft_ids_are_refused_at_load(tmp_path):
    from safetensors.torch import load_file, save_file

    from core.drafters.draft_head import HeadConfig, init_head, load_head, save_head

    c = HeadConfig(64, 128, 4, 2, 128, draft_vocab_size=32)
    save_head(init_head(c, torch.arange(32) * 2), tmp_path, dtype=torch.float32)
    assert len(load_head(tmp_path).vocab_ids) == 32  # as saved: fine
    sd = load_file(str(tmp_path / "model.safetensors"))
    sd["d2t"] = sd["d2t"].clone()
    sd["d2t"][0] = -5  # draft id 0 -> target id -5
    save_file(sd, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="outside the target vocabulary"):
        load_head(tmp_path)


def test_eagle3_d2t_of_the_wrong_length_is_refused_at_load(tmp_path):
    from safetensors.torch import load_file, save_file

    from core.drafters.eagle3_head import Eagle3Config, init_eagle3_head, save_eagle3_head
    from core.drafters.heads import load_any_head

    c = Eagle3Config(64, 96, 4, 2, 128, 48)
    save_eagle3_head(init_eagle3_head(c, torch.zeros(48, dtype=torch.long)), tmp_path, dtype=torch.float32)
    assert len(load_any_head(tmp_path).vocab_ids) == 48
    sd = load_file(str(tmp_path / "model.safetensors"))
    sd["d2t"] = sd["d2t"][:40].clone()  # 40 offsets for 48 LM-head rows
    save_file(sd, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="d2t has 40 entries for a draft vocabulary of 48"):
        load_any_head(tmp_path)
