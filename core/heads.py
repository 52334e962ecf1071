"""Head loading that dispatches on the checkpoint keys: `midlayer.*` -> EAGLE-3 (core.eagle3_head), else EAGLE-1/2
(core.draft_head.load_head)."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from core.draft_head import EagleHead, load_head
from core.eagle3_head import Eagle3Head, eagle3_from_state, is_eagle3_state


def _read_state(p: Path) -> dict:
    if (p / "model.safetensors").exists():
        from safetensors.torch import load_file

        return load_file(str(p / "model.safetensors"))
    if (p / "pytorch_model.bin").exists():
        return torch.load(str(p / "pytorch_model.bin"), map_location="cpu", weights_only=True)
    raise ValueError(f"head folder {str(p)!r} has neither model.safetensors nor pytorch_model.bin")


def load_any_head(path: str | Path, dtype: torch.dtype = torch.float32,
                  device: str | torch.device = "cpu") -> EagleHead | Eagle3Head:
    """Read an EAGLE-1/2 or EAGLE-3 head folder (official layouts)."""
    p = Path(path)
    if not (p / "config.json").exists():
        raise ValueError(f"head folder {str(p)!r} has no config.json")
    if (p / "model.safetensors").exists():  # peek at the key names without reading the tensors
        from safetensors import safe_open

        with safe_open(str(p / "model.safetensors"), framework="pt") as f:
            keys = list(f.keys())
        if not is_eagle3_state(keys):
            return load_head(p, dtype=dtype, device=device)
    sd = _read_state(p)
    if not is_eagle3_state(sd):
        return load_head(p, dtype=dtype, device=device)
    raw = json.loads((p / "config.json").read_text())
    sd = {k.removeprefix("model."): v for k, v in sd.items()}
    return eagle3_from_state(p, raw, sd).to(device=device, dtype=dtype).eval()
