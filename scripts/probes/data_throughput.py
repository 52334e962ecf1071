"""Data-pipeline throughput on this machine: tokens the target generates (and tokens written) per second.

    python scripts/probes/data_throughput.py CHECKOUT BATCH

CHECKOUT is a checkout of this repository (e.g. `git worktree add /tmp/old 6f17369` for the pipeline before the
generation rewrite, or `.` for the current one). Both run build_shards on the same 96 training prompts (seed 7),
a 320-token prompt cap, 144 new tokens, greedy, bf16, EAGLE-1/2 features only, and print one JSON line. Run it
with nothing else on the CPU.
"""
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

root, batch = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, str(Path(root).resolve()))
from safetensors.torch import load_file  # noqa: E402

from core.models.target import load_target  # noqa: E402
from core.train.data import read_pool  # noqa: E402
from core.train.shards import build_shards  # noqa: E402

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "train" / "prompts.jsonl"
target, tok = load_target(None, dtype="bf16")
rows = [r for r in read_pool(str(DATA), None, 3000, 0, 7) if r["kind"] == "prompt"][:96]
out = Path(tempfile.mkdtemp())
t = time.time()
build_shards(target, tok, rows, out, batch, 320, 144, 768, 0.0, 0)  # same positional arguments in both versions
dt = time.time() - t
tokens = sum(int(load_file(str(p))["offsets"][-1]) for p in out.glob("shard_*.safetensors"))
prompt_tokens = sum(min(len(tok(r["body"]).input_ids), 320) for r in rows)
print(json.dumps({"code": root, "batch": batch, "rows": len(rows), "prompt_tokens": prompt_tokens,
                  "tokens_written": tokens, "generated": tokens - prompt_tokens, "seconds": round(dt, 1),
                  "generated_per_s": round((tokens - prompt_tokens) / dt, 1),
                  "written_per_s": round(tokens / dt, 1)}))
shutil.rmtree(out)
