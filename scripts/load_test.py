"""Loopback load test with a hostile mix: `python scripts/load_test.py [--requests 200] [--json out.json]`.

Starts the app in a child process on a tiny random Llama (tests/fakes.py: byte-level BPE built in code, untrained
head; nothing downloaded), then, while 8 normal clients send greedy `/run` requests one after another, sends:
oversized `/run` calls (tree settings past the UI's maxima, multi-megabyte prompts), clients that open a long run
and drop their connection mid-run, and floods of submits past the queue's size. Checks:
  * every normal client's output equals its sequential run (computed in this process first),
  * every hostile call is answered (a clear error, "Queue is full", or a result) and the server keeps answering,
  * the server's resident memory after all requests is within 200 MB of its level after the first 10.
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

ROOT = Path(__file__).resolve().parent.parent
NORMAL = 8
NEW_TOKENS = 16
PROMPTS = ["Once upon a time", "The capital of France is", "def add(a, b):", "1. eggs\n2. milk",
           "héllo wörld", "The quick brown fox", "There was a little fox", "naïve café"]
QUEUE = 16


def serve(port: int) -> None:
    """Child process: the app on the tiny stack, bound to 127.0.0.1:port, until killed."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import torch

    torch.set_num_threads(1)
    from app.inputs import Limits
    from app.ui import build_demo, launch_options
    from fakes import tiny_stack

    tok, baseline, eagle = tiny_stack()
    demo = build_demo(tok, baseline, eagle, limits=Limits(queue=QUEUE, max_new_tokens=400, seconds=30))
    demo.launch(server_name="127.0.0.1", server_port=port, quiet=True, prevent_thread_lock=True, **launch_options())
    print("READY", flush=True)
    demo.block_thread()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def normal_request(i: int, k: int) -> tuple:
    return (PROMPTS[(i + k) % len(PROMPTS)], NEW_TOKENS, 0.0, 1.0, 0, 16, 6, 6, 10)


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=200, help="total requests (normal + hostile), at least 40")
    p.add_argument("--json", default=None, help="write the report here")
    p.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.serve:
        serve(a.serve)
        return 0
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import httpx
    import torch
    from gradio_client import Client

    torch.set_num_threads(1)
    from app.handlers import Playground
    from fakes import tiny_stack

    rounds = max(2, (a.requests - 40) // (NORMAL + 4))  # normal requests per client; hostile ones fill the rest
    single = Playground(*tiny_stack())
    expected = {(i, k): single.run(*normal_request(i, k))["eagle_token_ids"]
                for i in range(NORMAL) for k in range(len(PROMPTS))}

    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "READY", "server did not start"
        deps = httpx.get(url + "config", timeout=30).json()["dependencies"]
        run_index = next(d["id"] for d in deps if d.get("api_name") == "run")
        count, mem, errors, mismatches, latency = Counter(), {}, [], [], []
        done = threading.Event()

        def note(kind: str) -> None:
            n = count.add(kind)
            if n == 10:
                mem["after_10"] = rss_mb(server.pid)

        def normal_client(i: int) -> None:
            c = Client(url, verbose=False)
            for k in range(rounds):
                while True:
                    t0 = time.perf_counter()
                    try:
                        out = c.predict(*normal_request(i, k % len(PROMPTS)), api_name="/run")
                    except Exception as e:  # noqa: BLE001
                        if "Queue is full" in str(e):
                            note("normal_busy_retry")
                            time.sleep(0.2)
                            continue
                        errors.append(f"normal {i}: {e}")
                        break
                    latency.append(time.perf_counter() - t0)
                    note("normal")
                    if out["eagle_token_ids"] != expected[(i, k % len(PROMPTS))] or not out["identical"]:
                        mismatches.append((i, k))
                    break
            c.close()

        def oversized() -> None:
            c = Client(url, verbose=False)
            bad = [("x", 8, 0.0, 1.0, 0, 512, 32, 64, 64), ("x", 10**9, 0.0, 1.0, 0, 16, 6, 6, 10),
                   ("é" * 2_000_000, 8, 0.0, 1.0, 0, 16, 6, 6, 10), ("x", 8, 1e-40, 1.0, 0, 16, 6, 6, 10)]
            j = 0
            while not done.is_set():
                try:
                    c.predict(*bad[j % len(bad)], api_name="/run")
                    errors.append("an oversized call was accepted")
                except Exception as e:  # noqa: BLE001
                    msg = str(e)
                    if not any(t in msg for t in ("must be", "characters; at most", "Queue is full")):
                        errors.append(f"oversized: unclear message {msg[:120]!r}")
                note("oversized")
                j += 1
                time.sleep(0.3)
            c.close()

        def disconnecting() -> None:
            """Raw protocol: join a long /run, read its stream briefly, then drop the connection."""
            while not done.is_set():
                sh = uuid.uuid4().hex
                body = {"data": ["Once upon a time", 400, 0.0, 1.0, 0, 16, 6, 6, 10], "fn_index": run_index,
                        "session_hash": sh}
                r = httpx.post(url + "gradio_api/queue/join", json=body, timeout=30)
                if r.status_code == 200:
                    with httpx.stream("GET", url + "gradio_api/queue/data", params={"session_hash": sh},
                                      timeout=30) as s:
                        for _ in s.iter_lines():
                            break  # first message, then hang up mid-run
                note("disconnect" if r.status_code == 200 else "disconnect_busy")
                time.sleep(1.0)

        def flood() -> None:
            """Bursts of joins well past the queue's size, never read: the queue must refuse the excess."""
            while not done.is_set():
                busy = 0
                for _ in range(QUEUE + 8):
                    body = {"data": ["flood", 1, 0.0, 1.0, 0, 1, 1, 1, 0], "fn_index": run_index,
                            "session_hash": uuid.uuid4().hex}
                    r = httpx.post(url + "gradio_api/queue/join", json=body, timeout=30)
                    busy += r.status_code == 503 and "Queue is full" in r.text
                    note("flood")
                if busy:
                    count.add("flood_busy_answers")
                time.sleep(5.0)

        t0 = time.perf_counter()
        hostile = [threading.Thread(target=f, daemon=True) for f in (oversized, disconnecting, flood)]
        normal = [threading.Thread(target=normal_client, args=(i,)) for i in range(NORMAL)]
        for t in hostile + normal:
            t.start()
        for t in normal:
            t.join(timeout=900)
        while count.n < a.requests:
            time.sleep(0.2)
        done.set()
        for t in hostile:
            t.join(timeout=60)
        wall = time.perf_counter() - t0
        time.sleep(2.0)
        mem["after_all"] = rss_mb(server.pid)
        after = Client(url, verbose=False).predict(*normal_request(0, 0), api_name="/run")
        report = {
            "requests": count.n, "by_kind": count.kinds, "normal_clients": NORMAL, "normal_requests_each": rounds,
            "new_tokens": NEW_TOKENS, "queue_max_size": QUEUE, "wall_s": round(wall, 1),
            "normal_latency_p50_s": round(sorted(latency)[len(latency) // 2], 3) if latency else None,
            "normal_latency_max_s": round(max(latency), 3) if latency else None,
            "normal_outputs_equal_sequential": not mismatches and not errors,
            "mismatches": mismatches, "errors": errors[:10],
            "rss_mb_after_10": round(mem.get("after_10", float("nan")), 1),
            "rss_mb_after_all": round(mem["after_all"], 1),
            "rss_growth_mb": round(mem["after_all"] - mem.get("after_10", float("nan")), 1),
            "answers_after": after["eagle_token_ids"] == expected[(0, 0)],
        }
    finally:
        server.kill()
        server.wait()
    print(json.dumps(report))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(report, indent=1) + "\n")
    ok = (report["normal_outputs_equal_sequential"] and report["answers_after"] and report["rss_growth_mb"] < 200
          and report["requests"] >= a.requests)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
