"""Loopback load test with a hostile mix, over one model or several at once:

    python scripts/load_test.py [--requests 200] [--json out.json]                 # one tiny model
    python scripts/load_test.py --models 3 --max-loaded 2                          # 3 tiny models, 2 kept loaded
    python scripts/load_test.py --presets smollm2-135m-instruct,gemma-3-270m       # real presets, by hand

Starts the app in a child process on a tiny random Llama (tests/fakes.py: byte-level BPE built in code, untrained
head; nothing downloaded) or the first of --presets, offering the other models through the picker's shared bundles
(at most --max-loaded in memory, least recently used dropped). While 8 normal clients send greedy `/run` requests
one after another, client i naming model i mod N (`model=`), other threads send: oversized `/run` calls (tree settings
past the UI's maxima, multi-megabyte prompts, a model not offered), clients that open a long run and drop their
connection mid-run, and floods of submits past the queue's size. Checks:
  * every normal client's output equals its sequential run on its own model (computed in this process first), and
    every result names that model (no request runs on another client's model),
  * every hostile call is answered (a clear error, "Queue is full", or a result) and the server keeps answering,
  * the server's resident memory after all requests is within 200 MB of its level after the first 10, and within
    the bound of --max-loaded models: its level at start (one model) plus (max-loaded - 1) models' weights plus 200 MB.
Prints one JSON report (and writes it with --json). Normal clients that are told "Queue is full" retry.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
from gradio_client import Client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a file (python scripts/X.py) as well as a module

from core.cli import Parser  # noqa: E402

NORMAL = 8
NEW_TOKENS = 16
PROMPTS = ["Once upon a time", "The capital of France is", "def add(a, b):", "1. eggs\n2. milk",
           "héllo wörld", "The quick brown fox", "There was a little fox", "naïve café"]
QUEUE = 16
TINY = ("tiny-llama", "tiny-a", "tiny-b")  # the start-up tiny model (seed 0), then two offered ones (seeds 1, 2)
SLACK_MB = 200  # allocator and gradio growth allowed on top of the models' weights


def tiny_bundle(name: str):
    """A tiny model's bundle by name (seed = its place in TINY): what the server loads and the sequential runs use."""
    from app.picker import Bundle
    from fakes import tiny_stack

    tok, baseline, eagle = tiny_stack(seed=TINY.index(name))
    return Bundle(name, tok, baseline, eagle, {}, None, f"Target **{name}** (tiny)")


def bundle_for(name: str, presets: bool):
    """The bundle of `name`: a real preset (app/picker.py load_preset) or a tiny model."""
    if presets:
        from app.picker import load_preset

        return load_preset(name)
    return tiny_bundle(name)


def serve(port: int, models: list[str], max_loaded: int, presets: bool) -> None:
    """Child process: the app on the first model, offering the others, bound to 127.0.0.1:port, until killed."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import torch

    torch.set_num_threads(1)
    from app.inputs import Limits
    from app.ui import build_demo, launch_options

    first = bundle_for(models[0], presets)
    loader = (lambda name: bundle_for(name, presets)) if len(models) > 1 else None
    demo = build_demo(first.tokenizer, first.baseline, first.eagle, examples=[],
                      limits=Limits(queue=QUEUE, max_new_tokens=400, seconds=30),
                      presets=models[1:], loader=loader, max_loaded_models=max_loaded)
    demo.launch(server_name="127.0.0.1", server_port=port, quiet=True, prevent_thread_lock=True, **launch_options())
    print("READY", flush=True)
    demo.block_thread()


def rss_mb(pid: int) -> float:
    """A process's resident memory, MB (/proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def free_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def normal_request(i: int, k: int) -> tuple:
    """Normal client i's k-th greedy /run request (the prompt rotates with i + k)."""
    return (PROMPTS[(i + k) % len(PROMPTS)], NEW_TOKENS, 0.0, 1.0, 0, 16, 6, 6, 10)


def model_of(i: int, models: list[str]) -> str:
    """The model normal client i names: client i mod N."""
    return models[i % len(models)]


class Counter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.n = 0
        self.kinds: dict[str, int] = {}

    def add(self, kind: str) -> int:
        with self.lock:
            self.n += 1
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
            return self.n


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The flags; the models to serve (tiny ones, or --presets) and how many stay loaded."""
    p = Parser(prog="scripts/load_test.py", description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=200, help="total requests (normal + hostile), at least 40")
    p.add_argument("--json", default=None, help="write the report here")
    p.add_argument("--models", type=int, default=1, help="tiny models served at once (1-3)")
    p.add_argument("--presets", default="", help="real presets instead of tiny models, comma-separated (by hand)")
    p.add_argument("--max-loaded", type=int, default=0, help="models kept in memory (default: all of them)")
    p.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.names = [n.strip() for n in a.presets.split(",") if n.strip()] or list(TINY[:a.models])
    if not a.presets and not 1 <= a.models <= len(TINY):
        p.error(f"--models must be 1 to {len(TINY)}, got {a.models}")
    a.max_loaded = a.max_loaded or len(a.names)
    if a.max_loaded < 1:
        p.error(f"--max-loaded must be at least 1, got {a.max_loaded}")
    return a


def model_mb(bundle) -> float:
    """The weights one bundle holds in memory (target and draft head), MB."""
    mods = [bundle.baseline.target.model, getattr(bundle.eagle.drafter, "head", None)]
    return sum(p.numel() * p.element_size() for m in mods if m is not None for p in m.parameters()) / 2**20


def expectations(names: list[str], presets: bool) -> tuple[dict, float]:
    """Each model's sequential run of each prompt, in this process, one model at a time; and the largest model's MB."""
    from app.handlers import Playground

    expected, biggest = {}, 0.0
    for name in names:
        bundle = bundle_for(name, presets)
        single = Playground(bundle.tokenizer, bundle.baseline, bundle.eagle)
        for k in range(len(PROMPTS)):
            expected[(name, k)] = single.run(*normal_request(0, k))["eagle_token_ids"]
        biggest = max(biggest, model_mb(bundle))
        del single, bundle
    return expected, biggest


class Load:
    """One load run against a served app: the clients, what they saw, and the server's memory."""

    def __init__(self, url: str, server: subprocess.Popen, names: list[str], expected: dict, rounds: int):
        self.url, self.server, self.names, self.expected, self.rounds = url, server, names, expected, rounds
        self.count, self.mem, self.errors, self.mismatches = Counter(), {}, [], []
        self.wrong_model, self.latency, self.reloads = [], [], 0
        self.done = threading.Event()
        deps = httpx.get(url + "config", timeout=30).json()["dependencies"]
        self.run_index = next(d["id"] for d in deps if d.get("api_name") == "run")

    def note(self, kind: str) -> None:
        """Count one call; the server's memory is read after the 10th."""
        if self.count.add(kind) == 10:
            self.mem["after_10"] = rss_mb(self.server.pid)

    def normal_client(self, i: int) -> None:
        """Greedy /run requests on this client's model, one after another, retrying when the queue is full."""
        c, model = Client(self.url, verbose=False), model_of(i, self.names)
        for k in range(self.rounds):
            prompt = (i + k) % len(PROMPTS)
            while True:
                t0 = time.perf_counter()
                try:
                    out = c.predict(*normal_request(i, k), model=model, api_name="/run")
                except Exception as e:  # noqa: BLE001
                    if "Queue is full" in str(e):
                        self.note("normal_busy_retry")
                        time.sleep(0.2)
                        continue
                    self.errors.append(f"normal {i}: {e}")
                    break
                self.latency.append(time.perf_counter() - t0)
                self.note("normal")
                self.reloads += out.get("model_status", "").startswith("reloaded")
                if out.get("model") != model:
                    self.wrong_model.append((i, model, out.get("model")))
                if out["eagle_token_ids"] != self.expected[(model, prompt)] or not out["identical"]:
                    self.mismatches.append((i, k))
                break
        c.close()

    def oversized(self) -> None:
        """Calls past every limit, and a model not offered: each must get a clear message."""
        c = Client(self.url, verbose=False)
        bad = [("x", 8, 0.0, 1.0, 0, 512, 32, 64, 64), ("x", 10**9, 0.0, 1.0, 0, 16, 6, 6, 10),
               ("é" * 2_000_000, 8, 0.0, 1.0, 0, 16, 6, 6, 10), ("x", 8, 1e-40, 1.0, 0, 16, 6, 6, 10), "model"]
        j = 0
        while not self.done.is_set():
            call = bad[j % len(bad)]
            try:
                if call == "model":
                    c.predict("x", 8, model="not-offered", api_name="/run")
                else:
                    c.predict(*call, api_name="/run")
                self.errors.append("an oversized call was accepted")
            except Exception as e:  # noqa: BLE001
                msg = str(e)
                if not any(t in msg for t in ("must be", "characters; at most", "Queue is full")):
                    self.errors.append(f"oversized: unclear message {msg[:120]!r}")
            self.note("oversized")
            j += 1
            time.sleep(0.3)
        c.close()

    def disconnecting(self) -> None:
        """Raw protocol: join a long /run, read its stream briefly, then drop the connection."""
        while not self.done.is_set():
            sh = uuid.uuid4().hex
            body = {"data": ["Once upon a time", 400, 0.0, 1.0, 0, 16, 6, 6, 10], "fn_index": self.run_index,
                    "session_hash": sh}
            r = httpx.post(self.url + "gradio_api/queue/join", json=body, timeout=30)
            if r.status_code == 200:
                with httpx.stream("GET", self.url + "gradio_api/queue/data", params={"session_hash": sh},
                                  timeout=30) as s:
                    for _ in s.iter_lines():
                        break  # first message, then hang up mid-run
            self.note("disconnect" if r.status_code == 200 else "disconnect_busy")
            time.sleep(1.0)

    def flood(self) -> None:
        """Bursts of joins well past the queue's size, never read: the queue must refuse the excess."""
        while not self.done.is_set():
            busy = 0
            for _ in range(QUEUE + 8):
                body = {"data": ["flood", 1, 0.0, 1.0, 0, 1, 1, 1, 0], "fn_index": self.run_index,
                        "session_hash": uuid.uuid4().hex}
                r = httpx.post(self.url + "gradio_api/queue/join", json=body, timeout=30)
                busy += r.status_code == 503 and "Queue is full" in r.text
                self.note("flood")
            if busy:
                self.count.add("flood_busy_answers")
            time.sleep(5.0)

    def drive(self, requests: int) -> float:
        """The normal clients to the end and the hostile threads until `requests` calls were made; wall seconds."""
        t0 = time.perf_counter()
        hostile = [threading.Thread(target=f, daemon=True) for f in (self.oversized, self.disconnecting, self.flood)]
        normal = [threading.Thread(target=self.normal_client, args=(i,)) for i in range(NORMAL)]
        for t in hostile + normal:
            t.start()
        for t in normal:
            t.join(timeout=900)
        while self.count.n < requests:
            time.sleep(0.2)
        self.done.set()
        for t in hostile:
            t.join(timeout=60)
        return time.perf_counter() - t0


def report_of(load: Load, a: argparse.Namespace, wall: float, rss_start: float, per_model: float) -> dict:
    """The run's JSON report (docs/trust.md §3): clients, requests, outputs equal, memory and its bound."""
    time.sleep(2.0)
    load.mem["after_all"] = rss_mb(load.server.pid)
    after = {m: Client(load.url, verbose=False).predict(*normal_request(0, 0), model=m, api_name="/run")
             for m in load.names}
    lat = sorted(load.latency)
    bound = rss_start + (a.max_loaded - 1) * per_model + SLACK_MB
    return {
        "requests": load.count.n, "by_kind": load.count.kinds, "normal_clients": NORMAL,
        "normal_requests_each": load.rounds, "models": load.names, "max_loaded_models": a.max_loaded,
        "clients_per_model": {m: sum(model_of(i, load.names) == m for i in range(NORMAL)) for m in load.names},
        "new_tokens": NEW_TOKENS, "queue_max_size": QUEUE, "wall_s": round(wall, 1),
        "normal_latency_p50_s": round(lat[len(lat) // 2], 3) if lat else None,
        "normal_latency_max_s": round(lat[-1], 3) if lat else None,
        "normal_outputs_equal_sequential": not load.mismatches and not load.errors,
        "requests_on_another_model": load.wrong_model, "reloads_seen": load.reloads,
        "mismatches": load.mismatches, "errors": load.errors[:10],
        "rss_mb_start": round(rss_start, 1), "model_mb": round(per_model, 1),
        "rss_mb_after_10": round(load.mem.get("after_10", float("nan")), 1),
        "rss_mb_after_all": round(load.mem["after_all"], 1),
        "rss_growth_mb": round(load.mem["after_all"] - load.mem.get("after_10", float("nan")), 1),
        "rss_bound_mb": round(bound, 1), "rss_within_bound": load.mem["after_all"] <= bound,
        "answers_after": all(after[m]["eagle_token_ids"] == load.expected[(m, 0)] and after[m]["model"] == m
                             for m in load.names),
    }


def passed(report: dict, requests: int) -> bool:
    """The pass criteria of one run."""
    return (report["normal_outputs_equal_sequential"] and report["answers_after"] and report["rss_growth_mb"] < 200
            and report["rss_within_bound"] and not report["requests_on_another_model"]
            and report["requests"] >= requests)


def main(argv: list[str] | None = None) -> int:
    """The server child (--serve), or the whole run: expectations, the server, the load, the report; 0 on a pass."""
    a = parse(argv)
    presets = bool(a.presets)
    if a.serve:
        serve(a.serve, a.names, a.max_loaded, presets)
        return 0
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import torch

    torch.set_num_threads(1)
    rounds = max(2, (a.requests - 40) // (NORMAL + 4))  # normal requests per client; hostile ones fill the rest
    expected, per_model = expectations(a.names, presets)
    port = free_port()
    child = [sys.executable, __file__, "--serve", str(port), "--max-loaded", str(a.max_loaded)]
    child += ["--presets", a.presets] if presets else ["--models", str(len(a.names))]
    server = subprocess.Popen(child, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "READY", "server did not start"
        rss_start = rss_mb(server.pid)
        load = Load(f"http://127.0.0.1:{port}/", server, a.names, expected, rounds)
        report = report_of(load, a, load.drive(a.requests), rss_start, per_model)
    finally:
        server.kill()
        server.wait()
    print(json.dumps(report))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0 if passed(report, a.requests) else 1


if __name__ == "__main__":
    raise SystemExit(main())
