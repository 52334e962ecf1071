"""scripts/deploy_space.py: what a Space gets (the app's files only), the two front matters and requirements, the dry
run (no network), and one-line errors."""
import re

import pytest

from scripts import deploy_space as ds


def test_the_space_gets_the_app_and_nothing_else():
    files = ds.plan("zero-gpu")
    paths = set(files)
    for needed in ("app.py", "app/handlers.py", "app/zerogpu.py", "core/engine/eagle.py", "core/pipeline.py", "LICENSE",
                   "static/style.css", "static/heads/gemma-3-270m/model.q8.safetensors.xz",
                   "static/heads/qwen2.5-coder-0.5b-instruct/model.q8.safetensors.xz", "README.md", "requirements.txt"):
        assert needed in paths, needed
    assert not [p for p in paths if p.startswith(("tests/", "results/", "runs/", "scripts/", "recipes/", "docs/"))]
    assert not [p for p in paths if "__pycache__" in p or p.endswith(".pyc")]
    assert isinstance(files["README.md"], str) and isinstance(files["requirements.txt"], str)  # written, not copied
    assert all(files[p].is_file() for p in paths - {"README.md", "requirements.txt"})
    with_docs = ds.plan("cpu", docs=True)
    assert any(p.startswith("docs/") for p in with_docs) and set(with_docs) - paths == \
        {p for p in with_docs if p.startswith("docs/")}


def front(text: str) -> dict:
    body = text.split("---")[1]
    out, key = {}, None
    for line in body.strip().splitlines():
        if line.startswith("  - "):
            out[key].append(line[4:])
        else:
            key, _, value = line.partition(":")
            out[key] = value.strip() or []
    return out


@pytest.mark.parametrize("hardware,suggested", [("zero-gpu", "zero-a10g"), ("cpu", "cpu-basic")])
def test_front_matter_for_both_hardwares(hardware, suggested):
    req = ds.ROOT.joinpath("requirements.txt").read_text()
    gradio = re.search(r"^gradio==(\S+)", req, re.M).group(1)
    fm = front(ds.plan(hardware)["README.md"])
    assert fm["sdk"] == "gradio" and fm["sdk_version"] == gradio and fm["app_file"] == "app.py"
    assert fm["python_version"] == '"3.12"' and fm["license"] == "apache-2.0"
    assert fm["suggested_hardware"] == suggested
    assert "Qwen/Qwen2.5-Coder-0.5B-Instruct" in fm["models"] and "speculative-decoding" in fm["tags"]


def test_requirements_follow_the_hardware():
    req = ds.ROOT.joinpath("requirements.txt").read_text()
    torch = re.search(r"^torch==(\S+)", req, re.M).group(1)
    zero = ds.plan("zero-gpu")["requirements.txt"].splitlines()
    cpu = ds.plan("cpu")["requirements.txt"].splitlines()
    assert ds.SPACES_PIN in zero and f"torch=={torch}" in zero  # PyPI's CUDA build, on ZeroGPU's torch list
    assert not [ln for ln in cpu if ln.startswith("spaces")]
    assert f"torch=={torch}+cpu" in cpu and ds.CPU_TORCH_INDEX in cpu
    for lines in (zero, cpu):
        assert "gradio==" + re.search(r"^gradio==(\S+)", req, re.M).group(1) in lines
        assert not [ln for ln in lines if ln.split("==")[0] in ("pytest", "hypothesis", "playwright")]


def test_runtime_requirements_hold_no_test_packages():
    root = ds.ROOT
    names = {ln.split("==")[0] for ln in root.joinpath("requirements.txt").read_text().split()}
    assert not names & {"pytest", "hypothesis", "playwright"}
    test_names = {ln.split("==")[0] for ln in root.joinpath("requirements-test.txt").read_text().split()
                  if "==" in ln}
    assert {"pytest", "hypothesis", "playwright"} <= test_names
    assert "requirements-test.txt" in root.joinpath("scripts", "test.sh").read_text()
    assert "Apache License" in root.joinpath("LICENSE").read_text()


def test_dry_run_prints_everything_and_touches_no_network(monkeypatch, capsys):
    def no_network(*a, **k):
        raise AssertionError("the dry run must not reach the Hub")

    monkeypatch.setattr(ds, "deploy", no_network)
    assert ds.main(["me/eagle", "--hardware", "cpu", "--dry-run", "--var", "EAGLE_TREE=auto"]) == 0
    out = capsys.readouterr().out
    assert "app/handlers.py" in out and "sdk: gradio" in out and "torch==" in out and "EAGLE_TREE=auto" in out
    assert "tests/" not in out


@pytest.mark.parametrize("argv", [["not-a-space", "--hardware", "cpu", "--dry-run"],
                                  ["me/eagle", "--hardware", "cpu", "--dry-run", "--var", "lower=1"]])
def test_bad_input_is_one_line(capsys, argv):
    assert ds.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("scripts.deploy_space: error:")


def test_deploy_creates_the_space_and_uploads_exactly_the_plan(monkeypatch, capsys):
    """Without the network: a recording HfApi stands in for the Hub; the Space is created with the gradio SDK and the
    hardware's id, variables are set, and one upload_folder commit carries the planned files (the written README and
    requirements included) and deletes what it does not carry."""
    import types
    from pathlib import Path

    import huggingface_hub

    calls = {}

    class Api:
        def __init__(self, token=None):
            calls["token"] = token

        def create_repo(self, repo_id, **kw):
            calls["create"] = (repo_id, kw)
            return f"https://huggingface.co/spaces/{repo_id}"

        def get_space_runtime(self, repo_id):
            return types.SimpleNamespace(hardware="zero-a10g", requested_hardware="zero-a10g")

        def request_space_hardware(self, repo_id, hardware):
            calls["hardware"] = hardware

        def add_space_variable(self, repo_id, key, value):
            calls.setdefault("vars", {})[key] = value

        def upload_folder(self, repo_id, folder_path, repo_type, delete_patterns, commit_message):
            root = Path(folder_path)
            calls["uploaded"] = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
            calls["delete"], calls["repo_type"] = delete_patterns, repo_type

    monkeypatch.setattr(huggingface_hub, "HfApi", Api)
    assert ds.main(["me/eagle", "--hardware", "zero-gpu", "--var", "EAGLE_TREE=auto", "--token", "t"]) == 0
    repo, kw = calls["create"]
    assert repo == "me/eagle" and kw["repo_type"] == "space" and kw["space_sdk"] == "gradio"
    assert kw["space_hardware"] == "zero-a10g" and kw["exist_ok"] and "hardware" not in calls
    assert calls["vars"] == {"EAGLE_TREE": "auto"} and calls["token"] == "t" and calls["repo_type"] == "space"
    plan = ds.plan("zero-gpu")
    assert set(calls["uploaded"]) == set(plan) and calls["delete"] == "*"
    assert calls["uploaded"]["requirements.txt"].decode() == plan["requirements.txt"]
    assert calls["uploaded"]["app.py"] == (ds.ROOT / "app.py").read_bytes()
    assert "https://huggingface.co/spaces/me/eagle" in capsys.readouterr().out
