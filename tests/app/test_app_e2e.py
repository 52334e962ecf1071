"""End to end: the app launched in this process on a tiny random Llama (byte-level BPE tokenizer built in code,
untrained head), driven with gradio_client through the documented /run endpoint and the UI's streaming event."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from gradio_client import Client  # noqa: E402

from app.handlers import OUTPUTS  # noqa: E402
from app.ui import build_demo, launch_options  # noqa: E402
from fakes import tiny_stack  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    os.environ["GRADIO_TEMP_DIR"] = str(tmp_path_factory.mktemp("gradio"))
    tok, baseline, eagle = tiny_stack()
    demo = build_demo(tok, baseline, eagle, info="Target **tiny-llama** (test)")
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **launch_options())
    client = Client(url, verbose=False)
    yield url, client, tok
    client.close()
    demo.close()


def test_run_endpoint_returns_identical_texts_and_sensible_stats(server):
    _, client, tok = server
    out = client.predict(PROMPT, 24, 0.0, 1.0, 0, 24, 6, 6, api_name="/run")
    assert out["identical"] is True and out["greedy"] is True
    assert out["bit_exact"] is False  # SDPA: identical here, but not bit-exact by construction (docs/trust.md §6)
    assert out["baseline_text"] == out["eagle_text"] and out["baseline_text"]
    assert out["baseline_token_ids"] == out["eagle_token_ids"] and len(out["eagle_token_ids"]) == 24
    assert out["baseline_text"] == tok.decode(out["baseline_token_ids"], skip_special_tokens=True)
    b, e = out["baseline"], out["eagle"]
    assert b["new_tokens"] == e["new_tokens"] == 24
    assert b["tau"] == 1.0 and b["target_forwards"] == 24
    assert 1.0 <= e["tau"] and e["target_forwards"] <= 24 and e["draft_forwards"] > 0
    assert e["drafted_tokens"] > 0 and 0.0 <= e["accept_rate"] <= 1.0
    assert sum(e["accept_hist"]) == e["steps"] and b["tokens_per_s"] > 0 and e["tokens_per_s"] > 0
    assert out["speedup"] == pytest.approx(e["tokens_per_s"] / b["tokens_per_s"])


def test_run_endpoint_defaults_and_sampling(server):
    _, client, _ = server
    out = client.predict(PROMPT, max_new_tokens=8, temperature=0.9, top_p=0.9, seed=3, api_name="/run")
    assert out["greedy"] is False and out["eagle"]["new_tokens"] == out["baseline"]["new_tokens"] == 8


def test_run_endpoint_rejects_bad_input_and_keeps_serving(server):
    _, client, _ = server
    with pytest.raises(Exception, match="Enter a prompt"):
        client.predict("", api_name="/run")
    with pytest.raises(Exception, match="depth"):
        client.predict(PROMPT, 8, 0.0, 1.0, 0, 24, 0, 6, api_name="/run")
    assert client.predict(PROMPT, 4, api_name="/run")["identical"] is True


def test_run_endpoint_names_the_model_and_returns_the_why_numbers(server):
    """model= an offered name runs it (the start-up model here); any other name is one clear error listing the
    offered ones, and the server keeps serving. The "why this speedup" numbers come back with the run."""
    _, client, _ = server
    out = client.predict(PROMPT, 8, model="tiny-llama", api_name="/run")
    assert out["model"] == "tiny-llama" and out["model_status"] == "" and out["identical"] is True
    why = out["why"][0]
    assert why["lane"] == "EAGLE-2" and why["plain_step_ms"] > 0 and why["verify_ms"] > 0 and why["tree_size"] >= 1
    assert why["measured_speedup"] == pytest.approx(out["speedup"]) and why["predicted_speedup"] > 0
    with pytest.raises(Exception, match="model must be one of tiny-llama"):
        client.predict(PROMPT, 4, model="no-such-model", api_name="/run")
    assert client.predict(PROMPT, 4, api_name="/run")["identical"] is True


def test_streaming_event_through_the_server(server):
    _, client, _ = server
    job = client.submit(PROMPT, 16, 0.0, 1.0, 0, 24, 6, 6, 10, "none", 0.0, None, "", api_name="/stream")
    deadline = time.time() + 60
    while not job.done() and time.time() < deadline:
        time.sleep(0.05)
    outs = job.outputs()
    assert len(outs) >= 2
    v = dict(zip([k for k in OUTPUTS if k != "state"], outs[-1]))  # a client does not see the gr.State
    base, eagle, stats, tree = v["baseline-output"], v["eagle-output"], v["stats"], v["draft-tree"]
    assert 'class="tok d0"' in eagle and "done" in base and "token-identical" in stats
    assert tree["type"] == "plotly" and "accepted" in tree["plot"]


def test_api_is_documented(server):
    _, client, _ = server
    api = client.view_api(print_info=False, return_format="dict")
    assert "/run" in api["named_endpoints"]


def test_app_py_share_falls_back_to_local(tmp_path):
    """`python app.py --share` offline: the tunnel cannot start, the app says so and keeps serving locally.
    core.pipeline is replaced by the tiny stack so the test needs no real model."""
    with socket.socket() as sock:  # a free port
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    script = tmp_path / "run_app.py"
    script.write_text(
        "import sys, types, runpy\n"
        f"sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'tests')!r}]\n"
        "from fakes import tiny_stack\n"
        "def build_decoders(model, head, device, dtype, trust_remote_code=False, choices_file=None):\n"
        "    tok, b, e = tiny_stack()\n"
        "    return b.target, tok, b, e\n"
        "import core.pipeline\n"
        "core.pipeline.build_decoders = build_decoders\n"
        f"sys.argv = ['app.py', '--share', '--host', '127.0.0.1', '--port', '{port}', '--log-level', 'WARNING']\n"
        f"runpy.run_path({str(ROOT / 'app.py')!r}, run_name='__main__')\n"
    )
    env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "ready at" in line:
                break
        text = "".join(lines)
        assert f"ready at http://127.0.0.1:{port}" in text, text
        assert "serving locally only" in text, text
        out = Client(f"http://127.0.0.1:{port}", verbose=False).predict(PROMPT, 4, api_name="/run")
        assert out["identical"] is True
    finally:
        proc.terminate()
        proc.wait(timeout=30)
