"""A head folder's weights on disk, read and written in one place: the layouts other engines read
(`model.safetensors`, or `pytorch_model.bin` loaded with weights_only) and the compact one the project ships
(`model.q8.safetensors.xz`).

Why a compact layout: the shipped heads are bf16 decoder layers (the default model's two layers are 45 MB), and the
whole tracked tree must travel to a GPU check machine that refuses a tree over 64 MiB (docs/ARCHITECTURE.md,
"Shipped heads"). Compact storage keeps every matrix of 65,536 or more entries as small integers (63 levels each
side of zero, in int8) with one fp32 scale per output row (symmetric: scale = max |row| / 63) and every other tensor
(norms, biases, `d2t`, `t2d`) as it is, in one safetensors file compressed with xz: about 0.39x the bf16 bytes.
Reading it back gives the head up to that rounding (about 1.7 % relative error per matrix, against bf16's own
0.2 %): a slightly different draft head, never a different output, since decoding is lossless whatever the head's
weights. Measured on the default model's head (docs/training.md, "Compact heads"): teacher-forced top-1 on 62,542
held-out answer positions 0.4489 in bf16, 0.4483 with 127 levels, 0.4487 with 63. Training writes the full layout;
`python -m core.interop compact HEAD` turns a folder compact in place and `python -m core.interop export` writes the
full layout back for vLLM and SGLang.
"""
from __future__ import annotations

import json
import lzma
import struct
from pathlib import Path

import torch

FULL = "model.safetensors"
COMPACT = "model.q8.safetensors.xz"
BIN = "pytorch_model.bin"
Q, SCALE = ".q8", ".q8scale"  # a compact matrix `name` is stored as `name.q8` (int8) and `name.q8scale` (fp32 rows)
MIN_ENTRIES = 65536  # smaller tensors are kept as they are: their bytes do not matter and norms are sensitive
MAX_ERROR = 0.025  # a matrix rounded worse than this (relative, Frobenius) gets more levels, or stays as it is
DTYPE_KEY = "q8_dtype"  # safetensors metadata: the dtype the matrices are read back in
LEVELS = 63  # integer levels each side of zero (at most 127, int8's range); fewer compress further, with more rounding
LEVELS_KEY = "q8_levels"  # safetensors metadata: the levels written (for people; reading does not need them)


def quantize_rows(w: torch.Tensor, levels: int = LEVELS) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, in) float -> int8 (out, in) in [-levels, levels] and fp32 scales (out,), symmetric per output row; an
    all-zero row gets scale 1 (it reads back as zeros)."""
    if not 1 <= levels <= 127:
        raise ValueError(f"levels must be between 1 and 127, got {levels}")
    w = w.float()
    scale = w.abs().amax(dim=1) / levels  # (out,)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(w / scale[:, None]).clamp(-levels, levels).to(torch.int8)
    return q, scale


def dequantize_rows(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """int8 (out, in) and fp32 scales (out,) -> (out, in) in `dtype` (computed in fp32, rounded once)."""
    return (q.float() * scale.float()[:, None]).to(dtype)


def rounding_error(w: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> float:
    """|w - read back| / |w| (Frobenius), read back in w's dtype: what storing w compact changes."""
    back = dequantize_rows(q, scale, w.dtype).float()
    w = w.float()
    return float((back - w).norm() / w.norm().clamp_min(1e-30))


def compact_state(sd: dict[str, torch.Tensor], min_entries: int = MIN_ENTRIES,
                  levels: int = LEVELS) -> dict[str, torch.Tensor]:
    """A state dict in the compact layout: floating-point matrices of at least `min_entries` entries as int8 + row
    scales, the rest as is. A matrix whose rounding at `levels` would pass MAX_ERROR gets int8's full 127 levels,
    and one that passes it even then (columns of very different scale, e.g. an fc reading features with outlier
    channels) is kept as it is."""
    out: dict[str, torch.Tensor] = {}
    for k, v in sd.items():
        if k.endswith((Q, SCALE)):
            raise ValueError(f"weight name {k!r} ends like a compact matrix's parts")
        if v.is_floating_point() and v.dim() == 2 and v.numel() >= min_entries:
            for n in sorted({levels, 127}):
                q, scale = quantize_rows(v, n)
                if rounding_error(v, q, scale) <= MAX_ERROR:
                    out[k + Q], out[k + SCALE] = q, scale
                    break
            else:
                out[k] = v.contiguous()
        else:
            out[k] = v.contiguous()
    return out


def expand_state(sd: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The inverse of compact_state, matrices read back in `dtype`."""
    out: dict[str, torch.Tensor] = {}
    for k, v in sd.items():
        if k.endswith(SCALE):
            continue
        if k.endswith(Q):
            name = k.removesuffix(Q)
            if name + SCALE not in sd or v.dtype != torch.int8 or v.dim() != 2:
                raise ValueError(f"compact weights: {name!r} lacks its int8 matrix or its row scales")
            out[name] = dequantize_rows(v, sd[name + SCALE], dtype)
        else:
            out[k] = v
    return out


def _dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype) or not dt.is_floating_point:
        raise ValueError(f"compact weights: unknown dtype {name!r}")
    return dt


def write_compact(folder: str | Path, sd: dict[str, torch.Tensor], dtype: torch.dtype = torch.bfloat16,
                  min_entries: int = MIN_ENTRIES, levels: int = LEVELS) -> Path:
    """Write `sd` to folder/COMPACT (matrices read back in `dtype`) and remove a full-layout file beside it."""
    from safetensors.torch import save

    path = Path(folder) / COMPACT
    blob = save({k: v.detach().cpu() for k, v in compact_state(sd, min_entries, levels).items()},
                metadata={DTYPE_KEY: str(dtype).removeprefix("torch."), LEVELS_KEY: str(levels)})
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(lzma.compress(blob, preset=9))
    tmp.rename(path)
    (Path(folder) / FULL).unlink(missing_ok=True)
    return path


def write_full(folder: str | Path, sd: dict[str, torch.Tensor]) -> Path:
    """Write `sd` to folder/FULL, the layout every engine reads, and remove a stale compact file beside it."""
    from safetensors.torch import save_file

    path = Path(folder) / FULL
    save_file({k: v.detach().contiguous().cpu() for k, v in sd.items()}, str(path))
    (Path(folder) / COMPACT).unlink(missing_ok=True)
    return path


MAX_HEADER = 100_000_000  # safetensors' own bound on the JSON header


def _compact_header(path: Path) -> dict:
    """The safetensors header of a compact file, decompressing only its first bytes (ValueError if it is none)."""
    try:
        with lzma.open(path) as f:
            n = struct.unpack("<Q", f.read(8))[0]
            if n > MAX_HEADER:
                raise ValueError(f"a header of {n:,} bytes")
            header = json.loads(f.read(n))
    except (lzma.LZMAError, struct.error, json.JSONDecodeError, UnicodeDecodeError, EOFError, ValueError) as e:
        raise ValueError(f"{path}: not a compact weights file ({e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: not a compact weights file (its header is no JSON object)")
    return header


def read_state(folder: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of a head folder, in the full layout: model.safetensors, else the compact file (expanded), else
    pytorch_model.bin (torch.load with weights_only). ValueError when none is there or one is unreadable."""
    p = Path(folder)
    if (p / FULL).exists():
        from safetensors.torch import load_file

        return load_file(str(p / FULL))
    if (p / COMPACT).exists():
        from safetensors import SafetensorError
        from safetensors.torch import load

        meta = _compact_header(p / COMPACT).get("__metadata__") or {}
        try:
            sd = load(lzma.decompress((p / COMPACT).read_bytes()))
        except (lzma.LZMAError, SafetensorError) as e:
            raise ValueError(f"{p / COMPACT}: not a compact weights file ({e})") from None
        return expand_state(sd, _dtype(meta.get(DTYPE_KEY, "bfloat16")))
    if (p / BIN).exists():
        return torch.load(str(p / BIN), map_location="cpu", weights_only=True)
    raise ValueError(f"head folder {str(p)!r} has neither {FULL}, {COMPACT} nor {BIN}")


def weight_names(folder: str | Path) -> list[str]:
    """The full layout's weight names of a head folder without reading its tensors (a .bin is loaded safely)."""
    p = Path(folder)
    if (p / FULL).exists():
        from safetensors import safe_open

        with safe_open(str(p / FULL), framework="pt") as f:
            return list(f.keys())
    if (p / COMPACT).exists():
        keys = [k for k in _compact_header(p / COMPACT) if k != "__metadata__"]
        return [k.removesuffix(Q) for k in keys if not k.endswith(SCALE)]
    return list(read_state(p))


def stored_dtype(folder: str | Path, name: str) -> torch.dtype:
    """The dtype weight `name` is read back in (a compact matrix: the dtype it was stored from)."""
    p = Path(folder)
    if (p / COMPACT).exists() and not (p / FULL).exists():
        meta = _compact_header(p / COMPACT).get("__metadata__") or {}
        return _dtype(meta.get(DTYPE_KEY, "bfloat16"))
    return read_state(p)[name].dtype


def is_compact(folder: str | Path) -> bool:
    """Whether the folder's weights are in the compact layout only (what other engines cannot read unexported)."""
    p = Path(folder)
    return (p / COMPACT).exists() and not (p / FULL).exists()


def compact_folder(folder: str | Path, min_entries: int = MIN_ENTRIES, levels: int = LEVELS) -> dict:
    """Turn a head folder's full-layout weights compact in place; returns the sizes and the largest error."""
    p = Path(folder)
    if not (p / FULL).exists():
        raise ValueError(f"{p} has no {FULL} to make compact")
    sd = read_state(p)
    floats = {v.dtype for v in sd.values() if v.is_floating_point()}
    dtype = torch.bfloat16 if floats == {torch.bfloat16} else torch.float32
    before = (p / FULL).stat().st_size
    write_compact(p, sd, dtype, min_entries, levels)
    back = read_state(p)
    worst = max((float((back[k].float() - v.float()).norm() / v.float().norm().clamp_min(1e-30))
                 for k, v in sd.items() if v.is_floating_point()), default=0.0)
    return {"folder": str(p), "bytes_before": before, "bytes_after": (p / COMPACT).stat().st_size,
            "dtype": str(dtype).removeprefix("torch."), "levels": levels, "largest_relative_error": round(worst, 5)}
