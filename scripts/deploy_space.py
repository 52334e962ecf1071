"""Create or update a Hugging Face Space running this app, in one command (huggingface_hub's HTTP API, no git).

python -m scripts.deploy_space USER/NAME --hardware zero-gpu|cpu [--dry-run] [--private] [--docs]
    [--var EAGLE_TREE=auto ...] [--token HF_TOKEN]

Uploads only what the app needs at run time: app.py, app/, core/, static/ (the shipped heads, 2-18 MB files the
Hub stores with its large-file backend; `git push` refuses files over 10 MB), LICENSE and, with --docs, docs/; never
tests/, results/, runs/, scripts/ or recipes/. Two files are written for the Space rather than copied: README.md
(the Space's front matter: title, sdk gradio at the pinned version, app_file, python_version 3.12, license, models,
tags, suggested hardware) and requirements.txt for the chosen hardware:
- zero-gpu: the run-time requirements as pinned (torch 2.13.0 from PyPI, a CUDA build on the ZeroGPU list) plus
  `spaces`, the package that attaches the GPU per request (app/zerogpu.py);
- cpu: the same with PyTorch's CPU-only torch build (no CUDA libraries to download).
Files on the Space that this upload does not carry are deleted, so a renamed module does not linger.
--var sets Space variables (every app flag has one: EAGLE_TREE, EAGLE_MAX_NEW_TOKENS_CAP, ...; docs/usage.md).
--dry-run prints the file list, the front matter and the requirements, and touches no network.
The token comes from --token, HF_TOKEN, or `hf auth login`'s stored token.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a file (python scripts/X.py) as well as a module

from core.cli import Parser, fail  # noqa: E402

HARDWARE = {"zero-gpu": "zero-a10g", "cpu": "cpu-basic"}  # huggingface_hub SpaceHardware ids (ZeroGPU keeps its id)
SPACES_PIN = "spaces==0.51.3"
PYTHON_VERSION = "3.12"  # on ZeroGPU's list (3.12.12 / 3.10.13); the app was installed and started under 3.12
CPU_TORCH_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"
INCLUDE = ("app.py", "LICENSE", "app/", "core/", "static/")
DOCS = ("docs/",)
SKIP_PARTS = ("__pycache__",)
SKIP_SUFFIXES = (".pyc",)
MODELS = ("Qwen/Qwen2.5-Coder-0.5B-Instruct", "google/gemma-3-270m", "HuggingFaceTB/SmolLM2-135M-Instruct")
TAGS = ("speculative-decoding", "eagle", "eagle-2", "medusa", "text-generation", "education")
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


class DeployError(Exception):
    """A user error: one line on stderr, exit status 2."""


def tracked_files(root: Path = ROOT) -> list[str]:
    """The repository's files as committed (git ls-files), so local runs, caches and build outputs never travel; a
    copy without git falls back to the files on disk."""
    try:
        out = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True,
                             timeout=60).stdout
        return sorted(line for line in out.splitlines() if (root / line).is_file())
    except (OSError, subprocess.SubprocessError):
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".git" not in p.parts)


def space_files(files: list[str], docs: bool = False) -> list[str]:
    """The repository paths the Space gets: INCLUDE (and docs/ with docs=True), no caches."""
    keep = INCLUDE + (DOCS if docs else ())
    out = []
    for f in files:
        if not any(f == k or (k.endswith("/") and f.startswith(k)) for k in keep):
            continue
        if any(part in SKIP_PARTS for part in Path(f).parts) or f.endswith(SKIP_SUFFIXES):
            continue
        out.append(f)
    return out


def pinned(requirements: str, name: str) -> str:
    """The exact version `name` is pinned to in a requirements text; DeployError when it is not pinned."""
    m = re.search(rf"^{re.escape(name)}==([^\s#]+)", requirements, re.M)
    if not m:
        raise DeployError(f"requirements.txt does not pin {name} (name==version)")
    return m.group(1)


def space_requirements(requirements: str, hardware: str) -> str:
    """requirements.txt for the Space: the run-time pins, plus `spaces` on ZeroGPU, or a CPU-only torch on cpu."""
    lines = [ln for ln in requirements.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    torch = pinned(requirements, "torch")
    if hardware == "zero-gpu":
        head = ["# ZeroGPU: torch from PyPI (a CUDA build); `spaces` attaches the GPU per request (app/zerogpu.py)"]
        return "\n".join(head + lines + [SPACES_PIN]) + "\n"
    head = ["# CPU Space: PyTorch's CPU-only build (no CUDA libraries)", CPU_TORCH_INDEX]
    return "\n".join(head + [f"torch=={torch}+cpu" if ln.startswith("torch==") else ln for ln in lines]) + "\n"


def front_matter(requirements: str, hardware: str) -> str:
    """The Space README's YAML front matter (https://huggingface.co/docs/hub/spaces-config-reference)."""
    lines = ["---", "title: EAGLE Playground", "emoji: 🦅", "colorFrom: indigo", "colorTo: green", "sdk: gradio",
             f"sdk_version: {pinned(requirements, 'gradio')}", f'python_version: "{PYTHON_VERSION}"',
             "app_file: app.py", "pinned: false", "license: apache-2.0",
             "short_description: Plain decoding vs EAGLE-2 speculative decoding, token by token",
             f"suggested_hardware: {HARDWARE[hardware]}", "models:"]
    lines += [f"  - {m}" for m in MODELS] + ["tags:"] + [f"  - {t}" for t in TAGS] + ["---"]
    return "\n".join(lines) + "\n"


def space_readme(requirements: str, hardware: str) -> str:
    """Front matter and a short page: what the Space is, where the code and the model notices are."""
    where = ("ZeroGPU: a GPU is attached for each request, for a duration that follows its length"
             if hardware == "zero-gpu" else "CPU: the same race as on a laptop, two cores")
    return front_matter(requirements, hardware) + f"""
# EAGLE Playground

Plain decoding and EAGLE-2 speculative decoding race on the same model, token by token, with the draft tree of
every step on screen and a check that both produce the same tokens. This Space runs `python app.py` ({where}).

Settings are Space variables: every flag of app.py has one (`EAGLE_TREE=auto`, `EAGLE_MAX_NEW_TOKENS_CAP`, ...).
The code is Apache-2.0 (LICENSE); the models and the draft heads keep their own terms (static/heads/*/NOTICE).
"""


def plan(hardware: str, docs: bool = False, root: Path = ROOT) -> dict[str, str | Path]:
    """Space path -> local file (Path) or generated text (str): everything one upload carries."""
    if hardware not in HARDWARE:
        raise DeployError(f"unknown hardware {hardware!r}: choose zero-gpu or cpu")
    requirements = (root / "requirements.txt").read_text(encoding="utf-8")
    files: dict[str, str | Path] = {f: root / f for f in space_files(tracked_files(root), docs)}
    files["README.md"] = space_readme(requirements, hardware)
    files["requirements.txt"] = space_requirements(requirements, hardware)
    return dict(sorted(files.items()))


def size_text(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n / 1024:.1f} kB"


def describe(files: dict[str, str | Path], hardware: str) -> str:
    """The dry run's report: every file with its size, then the generated README's front matter and requirements."""
    rows, total = [], 0
    for path, src in files.items():
        n = src.stat().st_size if isinstance(src, Path) else len(src.encode("utf-8"))
        total += n
        rows.append(f"  {size_text(n):>9}  {path}" + ("  (written for the Space)" if isinstance(src, str) else ""))
    readme = str(files["README.md"])
    return "\n".join([f"{len(files)} files, {size_text(total)}, hardware {hardware} ({HARDWARE[hardware]}):", *rows,
                      "", "README.md front matter:", readme[:readme.index("---", 3) + 3], "",
                      "requirements.txt:", str(files["requirements.txt"]).rstrip()])


def parse_vars(pairs: list[str]) -> dict[str, str]:
    out = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", key):
            raise DeployError(f"--var {p!r}: use NAME=value, e.g. EAGLE_TREE=auto")
        out[key] = value
    return out


def deploy(repo_id: str, hardware: str, files: dict[str, str | Path], private: bool, token: str | None,
           variables: dict[str, str]) -> str:
    """Create the Space (or reuse it), set its hardware and variables, and upload `files` as one commit that also
    deletes what they no longer contain. Returns the Space's URL."""
    from huggingface_hub import HfApi
    from huggingface_hub.utils import HfHubHTTPError

    api = HfApi(token=token)
    try:
        url = api.create_repo(repo_id, repo_type="space", space_sdk="gradio", space_hardware=HARDWARE[hardware],
                              private=private, exist_ok=True)
        runtime = api.get_space_runtime(repo_id)
        if runtime.requested_hardware not in (None, HARDWARE[hardware]) and runtime.hardware != HARDWARE[hardware]:
            api.request_space_hardware(repo_id, HARDWARE[hardware])
        for key, value in variables.items():
            api.add_space_variable(repo_id, key, value)
        with tempfile.TemporaryDirectory(prefix="eagle-space-") as tmp:
            stage = Path(tmp)
            for path, src in files.items():
                dest = stage / path
                dest.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(src, Path):
                    shutil.copy2(src, dest)
                else:
                    dest.write_text(src, encoding="utf-8")
            api.upload_folder(repo_id=repo_id, repo_type="space", folder_path=stage, delete_patterns="*",
                              commit_message=f"Deploy EAGLE Playground ({hardware})")
    except HfHubHTTPError as e:
        raise DeployError(f"the Hub refused: {str(e).splitlines()[0]}") from None
    return str(url)


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m scripts.deploy_space", description=__doc__.splitlines()[0])
    p.add_argument("repo_id", help="the Space, USER/NAME (created when missing)")
    p.add_argument("--hardware", required=True, choices=sorted(HARDWARE), help="zero-gpu or cpu")
    p.add_argument("--dry-run", action="store_true", help="print files, front matter and requirements; no network")
    p.add_argument("--private", action="store_true", help="create the Space private")
    p.add_argument("--docs", action="store_true", help="also upload docs/")
    p.add_argument("--var", action="append", default=[], metavar="NAME=VALUE", help="a Space variable (repeatable)")
    p.add_argument("--token", default=None, help="Hub token (default: HF_TOKEN or the stored login)")
    a = p.parse_args(argv)
    try:
        if not REPO_ID.match(a.repo_id):
            raise DeployError(f"{a.repo_id!r} is not a Space id: give USER/NAME")
        variables = parse_vars(a.var)
        files = plan(a.hardware, a.docs)
        if a.dry_run:
            print(describe(files, a.hardware))
            if variables:
                print("Space variables: " + ", ".join(f"{k}={v}" for k, v in variables.items()))
            return 0
        url = deploy(a.repo_id, a.hardware, files, a.private, a.token, variables)
    except DeployError as e:
        return fail("scripts.deploy_space", e)  # one line, status 2 (core/cli.py)
    print(f"deployed {len(files)} files to {url}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
