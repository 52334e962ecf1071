"""Bounded load: 12 concurrent gradio_client sessions against an app launched on loopback with a tiny model. All
complete, each output equals the single-user run of the same request (temperature 0), queued users see their
place, and the app still answers afterwards. Throughput and p50/p95 latency are printed (pytest -s) and written to
artifacts/load_test.json; nothing is asserted about timing."""
from __future__ import annotations

import json
import os
import statistics
import threading
import time
from pathlib import Path

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from gradio_client import Client  # noqa: E402
from gradio_client.utils import Status  # noqa: E402

from app.handlers import Playground  # noqa: E402
from app.ui import build_demo, launch_options  # noqa: E402
from fakes import tiny_stack  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
USERS = 12
NEW_TOKENS = 16
PROMPTS = ["Once upon a time", "The capital of France is", "def add(a, b):", "1. eggs\n2. milk",
           "héllo wörld", "emoji 🦅🚀", "The quick brown fox", "There was a little fox",
           "日本語のテキスト", "return a + b", "The capital of Italy", "naïve café"]


def request(i: int) -> tuple:
    return (PROMPTS[i % len(PROMPTS)], NEW_TOKENS, 0.0, 1.0, i, 24, 6, 6)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    os.environ["GRADIO_TEMP_DIR"] = str(tmp_path_factory.mktemp("gradio"))
    tok, baseline, eagle = tiny_stack()
    demo = build_demo(tok, baseline, eagle)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **launch_options())
    yield url
    demo.close()


def test_twelve_concurrent_sessions(url):
    tok, baseline, eagle = tiny_stack()
    single = Playground(tok, baseline, eagle)
    expected = [single.run(*request(i)) for i in range(USERS)]  # one user at a time, in process

    clients = [Client(url, verbose=False) for _ in range(USERS)]  # one session each
    results: list = [None] * USERS
    latency: list = [0.0] * USERS
    ranks: list = [[] for _ in range(USERS)]
    start = threading.Barrier(USERS)

    def user(i: int) -> None:
        start.wait()
        t0 = time.perf_counter()
        job = clients[i].submit(*request(i), api_name="/run")
        while not job.done():
            st = job.status()
            if st.code == Status.IN_QUEUE and st.rank is not None:
                ranks[i].append(st.rank)
            time.sleep(0.01)
        results[i] = job.result()
        latency[i] = time.perf_counter() - t0

    t0 = time.perf_counter()
    threads = [threading.Thread(target=user, args=(i,)) for i in range(USERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    wall = time.perf_counter() - t0
    assert not any(t.is_alive() for t in threads), "a session did not finish"

    for i in range(USERS):
        got, want = results[i], expected[i]
        assert got is not None
        assert got["baseline_token_ids"] == want["baseline_token_ids"], i
        assert got["eagle_token_ids"] == want["eagle_token_ids"], i
        assert got["identical"] is True and got["eagle_text"] == want["eagle_text"]
    assert any(r for r in ranks), "no queued session ever saw its place in the queue"

    tokens = sum(r["baseline"]["new_tokens"] + r["eagle"]["new_tokens"] for r in results)
    report = {
        "sessions": USERS, "new_tokens_per_method": NEW_TOKENS, "model": "tiny random Llama (2 layers, hidden 64)",
        "device": "cpu", "threads": os.environ.get("OMP_NUM_THREADS", "default"),
        "wall_s": round(wall, 3), "requests_per_s": round(USERS / wall, 3),
        "tokens_per_s_both_methods": round(tokens / wall, 1),
        "latency_p50_s": round(statistics.median(latency), 3), "latency_p95_s": round(pct(latency, 0.95), 3),
        "latency_max_s": round(max(latency), 3),
        "max_queue_rank_seen": max((max(r) for r in ranks if r), default=0),
        "all_identical_to_sequential": True,
    }
    print("\nload test:", json.dumps(report))
    out = ROOT / "artifacts" / "load_test.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")

    # still healthy
    after = Client(url, verbose=False)
    assert after.predict(*request(0), api_name="/run")["eagle_token_ids"] == expected[0]["eagle_token_ids"]
    for c in clients + [after]:
        c.close()


def test_mixed_model_hostile_load(tmp_path):
    """scripts/load_test.py over three tiny models with two kept loaded (so bundles are dropped and reloaded under
    load), beside the hostile mix: every client's output equals its own model's sequential run and names that model,
    the hostile calls are answered, memory stays within the bound, and the server answers every model afterwards."""
    from conftest import load_script

    out = tmp_path / "mixed.json"
    rc = load_script("load_test").main(["--models", "3", "--max-loaded", "2", "--requests", "40", "--json", str(out)])
    report = json.loads(out.read_text())
    assert rc == 0, report
    assert report["models"] == ["tiny-llama", "tiny-a", "tiny-b"] and report["max_loaded_models"] == 2
    assert report["clients_per_model"] == {"tiny-llama": 3, "tiny-a": 3, "tiny-b": 2}
    assert report["normal_outputs_equal_sequential"] and report["requests_on_another_model"] == []
    assert report["by_kind"]["normal"] == 8 * report["normal_requests_each"] and report["errors"] == []
    assert report["by_kind"]["oversized"] > 0 and report["by_kind"]["flood"] > 0 and report["answers_after"]
    assert report["rss_within_bound"] and report["rss_mb_after_all"] <= report["rss_bound_mb"]
