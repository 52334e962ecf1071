"""Cancellation: a client cancel of the streaming event, the Stop button and a closed stream (tab closed) end the
generation within a step, free both decoders' KV caches, and the next request runs normally."""
from __future__ import annotations

import gc
import os
import threading
import time
import weakref

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from gradio_client import Client  # noqa: E402

from app.handlers import Playground  # noqa: E402
from app.ui import build_demo, launch_options  # noqa: E402
from fakes import tiny_stack  # noqa: E402

PROMPT = "Once upon a time"


class Tracked:
    """Wraps a decoder: sleeps `pause` s after each step (a slow device), counts live generators and steps, and
    closes the inner generator explicitly so its finally block (cache free) runs at once."""

    def __init__(self, decoder, pause: float = 0.03):
        self.decoder, self.pause = decoder, pause
        self.method, self.note = decoder.method, decoder.note
        self.target = decoder.target
        self.live, self.steps, self.lock = 0, 0, threading.Lock()

    def generate(self, prompt_ids, cfg, should_stop=None):
        inner = self.decoder.generate(prompt_ids, cfg, should_stop)
        with self.lock:
            self.live += 1
        try:
            for ev in inner:
                self.steps += 1
                time.sleep(self.pause)
                yield ev
        finally:
            inner.close()
            with self.lock:
                self.live -= 1


def track_caches(target) -> list:
    """Record a weakref to every KV cache the target hands out."""
    refs: list = []
    orig = target.new_cache

    def new_cache():
        c = orig()
        refs.append(weakref.ref(c))
        return c

    target.new_cache = new_cache
    return refs


def caches_empty(refs) -> bool:
    gc.collect()
    for r in refs:
        c = r()
        if c is not None and any(layer.keys is not None for layer in c.layers):
            return False
    return True


def stack():
    tok, b, e = tiny_stack()
    refs = track_caches(b.target)
    return tok, Tracked(b), Tracked(e), refs


def wait_until(cond, timeout: float = 20.0) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    os.environ["GRADIO_TEMP_DIR"] = str(tmp_path_factory.mktemp("gradio"))
    tok, b, e, refs = stack()
    demo = build_demo(tok, b, e, text_every=0.0)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **launch_options())
    client = Client(url, verbose=False)
    yield client, b, e, refs
    client.close()
    demo.close()


def test_client_cancel_stops_generation_and_frees_caches(served):
    client, b, e, refs = served
    job = client.submit(PROMPT, 400, 0.0, 1.0, 0, 24, 6, 6, 10, "none", 0.0, None, "", api_name="/stream")
    assert wait_until(lambda: b.steps + e.steps >= 6), "generation did not start"
    job.cancel()
    assert wait_until(lambda: b.live == 0 and e.live == 0, 15), "decoders still running after cancel"
    steps_at_end = b.steps + e.steps
    assert steps_at_end < 400  # stopped long before max_new_tokens
    time.sleep(0.3)
    assert b.steps + e.steps == steps_at_end  # nothing keeps running in the background
    assert refs and caches_empty(refs)
    out = client.predict(PROMPT, 8, 0.0, 1.0, 0, 24, 6, 6, api_name="/run")  # the next request runs normally
    assert out["identical"] is True and len(out["eagle_token_ids"]) == 8
    assert caches_empty(refs)


def test_stop_button_ends_within_one_step_and_frees_caches():
    tok, b, e, refs = stack()
    pg = Playground(tok, b, e, text_every=0.0)
    gen = pg.stream(PROMPT, 400, 0.0, 1.0, 0, 24, 6, 6)
    record = None
    for _ in range(6):
        record = next(gen)[-1]
    pg.finish(record)  # what the Stop button does (the UI also cancels the event)
    at_stop = b.steps + e.steps
    rest = list(gen)  # the stream finishes by itself: one more step at most per decoder
    assert rest and b.steps + e.steps - at_stop <= 2
    assert b.live == 0 and e.live == 0 and caches_empty(refs)
    assert pg.run(PROMPT, 6)["identical"] is True and caches_empty(refs)


def test_closed_stream_tab_closed_frees_caches(caplog):
    import logging

    tok, b, e, refs = stack()
    pg = Playground(tok, b, e, text_every=0.0)
    gen = pg.stream(PROMPT, 400, 0.0, 1.0, 0, 24, 6, 6)
    for _ in range(5):
        next(gen)
    with caplog.at_level(logging.INFO, logger="eagle_playground.requests"):
        gen.close()  # GeneratorExit inside the race, as when Gradio drops a disconnected session's iterator
    assert b.live == 0 and e.live == 0 and caches_empty(refs)
    assert '"outcome": "stopped"' in caplog.text
    del gen
    gc.collect()
    assert all(r() is None for r in refs)  # nothing holds the caches any more
    assert pg.run(PROMPT, 6)["identical"] is True
