"""Draft head training: EAGLE-1/2 (arXiv 2401.15077 §3.3) and EAGLE-3 (arXiv 2503.01840), with training-time test.

EAGLE-1/2 loss per unrolled step j: smooth-L1(predicted feature, target feature) + p_weight x soft cross-entropy
against the target's distribution softmax(lm_head(target feature)), both through the frozen target LM head
restricted to the draft vocabulary. Step 0 reads real (noised) target features.
EAGLE-3: step 0 reads the fused low/mid/high layer taps (through the head's fc), there is no feature loss, and the
logits come from the head's own norm + LM head over the draft vocabulary (initialised from the target's rows);
the soft cross-entropy target is the same.
Both: step j > 0 reads the head's own outputs from step j - 1 and attends to real context up to i - j plus its own
unrolled ancestors, as a depth-(j+1) tree node does at inference. Steps are weighted 0.8^j. AdamW, linear warmup
then linear decay, gradient clipping, accelerate.
"""
from __future__ import annotations

import contextlib
import hashlib
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from core.drafters.draft_head import EagleHead
from core.drafters.eagle3_head import Eagle3Head
from core.train.data import padded_chunks
from core.models import kernels
from core.drafters import medusa


@dataclass(frozen=True)
class FitConfig:
    epochs: float = 2.0
    lr: float = 3e-4
    warmup: int = 100
    tokens_per_batch: int = 4096
    max_len: int = 768
    ttt_steps: int = 3  # unrolled steps incl. step 0; 1 = plain EAGLE-1/2 training
    p_weight: float = 0.1
    noise: float = 0.2  # uniform noise width on input features, relative to the feature RMS
    clip: float = 0.5
    seed: int = 0
    save_every: int = 200


RESUMABLE_ARGS = ("epochs", "save_every")  # a longer run may continue a shorter one; saving often changes nothing


def run_origin(seqs, cfg: FitConfig) -> dict:
    """What a state.pt belongs to: a fingerprint of the training data (every sequence's token ids, each feature
    tensor's shape and dtype and its first row) and the arguments that shape the trajectory (FitConfig without
    RESUMABLE_ARGS). Plain str / number values, so state.pt stays readable with weights_only=True."""
    h = hashlib.sha256()
    for sq in seqs:
        ids, feat = sq[0], sq[1]
        h.update(ids.detach().cpu().to(torch.int64).numpy().tobytes())
        h.update(f"{tuple(feat.shape)}{feat.dtype}".encode())
        h.update(feat[:1].detach().cpu().float().numpy().tobytes())
    args = {k: v for k, v in asdict(cfg).items() if k not in RESUMABLE_ARGS}
    return {"data_fingerprint": h.hexdigest(), "n_sequences": len(seqs), "args": args}


def check_resume(state: dict, origin: dict, path: Path) -> None:
    """Refuse to continue a state.pt written for other data or other arguments (ValueError naming what differs):
    its optimizer moments and batch plan belong to that run, so continuing would train neither run. A state
    written before origins were recorded is accepted as it is."""
    if "data_fingerprint" not in state:
        return
    if state["data_fingerprint"] != origin["data_fingerprint"] or state.get("n_sequences") != origin["n_sequences"]:
        raise ValueError(f"{path} was written for other training data ({state.get('n_sequences')} sequences, "
                         f"fingerprint {state['data_fingerprint'][:12]}; now {origin['n_sequences']}, "
                         f"{origin['data_fingerprint'][:12]}): use a new --out or delete it")
    old, new = state.get("args", {}), origin["args"]
    diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if diff:
        shown = ", ".join(f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in diff)
        raise ValueError(f"{path} was written with other arguments ({shown}): use a new --out or delete it")


def batches(seqs: list[tuple[torch.Tensor, torch.Tensor]], cfg: FitConfig, rng: random.Random) -> list[list[int]]:
    """Length-bucketed batches of sequence indices with about tokens_per_batch tokens each."""
    lens = [min(len(s[0]), cfg.max_len) for s in seqs]
    order = sorted(range(len(seqs)), key=lambda i: (lens[i], rng.random()))
    out = padded_chunks(lens, order, cfg.tokens_per_batch)
    rng.shuffle(out)
    return out


def collate(seqs, idx: list[int], max_len: int):
    """ids (B, S) long, feat (B, S, H) float, valid (B, S) bool (right padding), taps (B, S, 3H) float or None."""
    width = max(min(len(seqs[i][0]), max_len) for i in idx)
    h = seqs[idx[0]][1].shape[-1]
    has_taps = len(seqs[idx[0]]) > 2 and seqs[idx[0]][2] is not None
    ids = torch.zeros(len(idx), width, dtype=torch.long)
    feat = torch.zeros(len(idx), width, h)
    taps = torch.zeros(len(idx), width, seqs[idx[0]][2].shape[-1]) if has_taps else None
    valid = torch.zeros(len(idx), width, dtype=torch.bool)
    for r, i in enumerate(idx):
        n = min(len(seqs[i][0]), max_len)
        ids[r, :n], feat[r, :n], valid[r, :n] = seqs[i][0][:n], seqs[i][1][:n].float(), True
        if has_taps:
            taps[r, :n] = seqs[i][2][:n].float()
    return ids, feat, valid, taps


def training_attention(device: torch.device) -> contextlib.AbstractContextManager:
    """Attention kernels for the training forward (its backward runs the kernel the forward chose).

    On CUDA the cuDNN kernel is left out: its backward returns NaN in grad_q when an explicit mask is passed, the
    sequence length is 64 mod 128 and a row's log-sum-exp is below ln(FLT_MAX) (pytorch/pytorch#196678, H100/H200,
    torch 2.11+). Every step here passes a mask and batch widths vary, so some batches meet it. Memory-efficient
    attention and the math kernel take the same masks. A CPU keeps its own choice.
    """
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def ttt_mask(s: int, j: int, device) -> torch.Tensor:
    """(S, (j+1)S) bool: step-j query i sees step-0 keys <= i-j and step-m key i-(j-m) for m = 1..j."""
    i = torch.arange(s, device=device)
    blocks = [i[None, :] <= (i[:, None] - j)]
    for m in range(1, j + 1):
        blocks.append(i[None, :] == (i[:, None] - (j - m)))
    mask = torch.cat(blocks, dim=1)
    mask[:, -s:] |= torch.eye(s, dtype=torch.bool, device=device)  # a query always sees itself (padding rows)
    return mask


def losses(head: EagleHead | Eagle3Head, embed, w_draft: torch.Tensor, ids, feat, valid, cfg: FitConfig,
           feat_rms: float, gen: torch.Generator | None = None, taps: torch.Tensor | None = None,
           draft_logits=None) -> tuple[torch.Tensor, list[float], list[float], list[float]]:
    """Total loss and per-step (vloss, ploss, top-1 accuracy) for one batch. ids/feat/valid/taps as from collate().

    EAGLE-3 when `taps` is given: step 0 reads taps, `draft_logits` (the head's own norm + LM head) scores, and
    there is no feature loss (vloss reported as 0).
    """
    b, s = ids.shape
    s -= 1
    eagle3 = taps is not None
    f_tgt = feat[:, 1:]  # pair i = (f_i, t_{i+1}) predicts f_{i+1}
    with torch.no_grad():
        emb = embed(ids[:, 1:]).float()  # (B, S, H)
        p_tgt = torch.softmax(f_tgt @ w_draft.T, dim=-1)  # (B, S, Vd) target distribution on the draft vocab
        top_tgt = p_tgt.argmax(-1)
    pos = torch.arange(s, device=ids.device)
    if eagle3:
        feats = taps[:, :-1]  # (B, S, 3H): the head's fc fuses them
        score = draft_logits
    else:
        f_in = feat[:, :-1]
        noise = torch.rand(f_in.shape, generator=gen).to(f_in.device)  # CPU generator: the same noise on any device
        feats = f_in + (noise - 0.5) * cfg.noise * feat_rms

        def score(out):
            return out @ w_draft.T
    past, total = None, 0.0
    vl, pl, acc = [], [], []
    for j in range(cfg.ttt_steps):
        mask = None if j == 0 else ttt_mask(s, j, ids.device)[None, None]
        out, kv = head(emb, feats, pos, past, mask)  # (B, S, H)
        m = valid[:, 1:].clone()
        m[:, :j] = False  # step j needs j earlier predictions
        mf = m.float()
        denom = mf.sum().clamp(min=1)
        v = (torch.zeros(()) if eagle3
             else (F.smooth_l1_loss(out, f_tgt, reduction="none").mean(-1) * mf).sum() / denom)
        logp = torch.log_softmax(score(out).float(), dim=-1)
        p = (-(p_tgt * logp).sum(-1) * mf).sum() / denom
        total = total + (0.8**j) * (v + cfg.p_weight * p)
        vl.append(v.item())
        pl.append(p.item())
        acc.append(float(((logp.argmax(-1) == top_tgt).float() * mf).sum() / denom))
        past = kv if past is None else (torch.cat([past[0], kv[0]], 2), torch.cat([past[1], kv[1]], 2))
        feats = torch.cat([out[:, :1], out[:, :-1]], dim=1)  # step j+1 reads the prediction made at i-1
    return total, vl, pl, acc


def fit(head: EagleHead | Eagle3Head | medusa.MedusaHead, embed, w_draft: torch.Tensor, seqs, cfg: FitConfig, ckpt_dir: Path, log,
        snapshot=None) -> dict:
    """Train in place with accelerate; resumes from ckpt_dir/state.pt. Returns a summary for training.json.

    An Eagle3Head trains on the shards' taps; a MedusaHead on the last features with core.drafters.medusa.losses. `snapshot(head, step, total_steps)` is called after every save (the
    caller keeps heads along the way, e.g. for a curve of tau against the data seen).
    """
    from accelerate import Accelerator

    acc = Accelerator(mixed_precision="no")  # autocast is ours (below): accelerate's state is one per process
    on_cpu = acc.device.type == "cpu"  # GPUs keep bf16 autocast; a CPU gets it only where it measured faster
    mixed = "bf16" if not on_cpu or kernels.bf16_matmul_is_faster(w_draft.shape[1]) else "no"  # AMX yes, AVX2 no
    rng = random.Random(cfg.seed)
    plan = batches(seqs, cfg, rng)
    total_steps = max(1, int(len(plan) * cfg.epochs))
    opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    warmup = max(1, min(cfg.warmup, total_steps // 10))  # short runs still reach the peak rate
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: min(1.0, (t + 1) / warmup) * max(0.05, 1 - t / total_steps))
    head.train()
    head, opt = acc.prepare(head, opt)
    w_draft = w_draft.to(acc.device).float()
    eagle3 = isinstance(acc.unwrap_model(head), Eagle3Head)
    is_medusa = isinstance(acc.unwrap_model(head), medusa.MedusaHead)
    draft_logits = acc.unwrap_model(head).draft_logits if eagle3 else None
    feat_rms = float(torch.cat([sq[1][:256].float() for sq in seqs[:200]]).pow(2).mean().sqrt())
    step, t_start, elapsed0, skipped = 0, time.time(), 0.0, 0  # skipped: updates dropped, non-finite
    state_path = ckpt_dir / "state.pt"
    origin = run_origin(seqs, cfg)  # what this state belongs to: a resume must continue the same run
    gen = torch.Generator().manual_seed(cfg.seed)
    if state_path.exists():
        st = torch.load(state_path, map_location="cpu", weights_only=True)
        check_resume(st, origin, state_path)
        acc.unwrap_model(head).load_state_dict(st["head"])
        opt.load_state_dict(st["opt"])
        sched.load_state_dict(st["sched"])
        step, elapsed0, skipped = int(st["step"]), float(st["elapsed"]), int(st.get("skipped", 0))
        if "generator" in st:  # the noise stream continues where it stopped, as in an uninterrupted run
            gen.set_state(st["generator"])
        else:  # a state written before the generator was saved
            gen.manual_seed(cfg.seed + step)
        log(f"resumed from {state_path} at step {step}/{total_steps}")
    bar = tqdm(total=total_steps, initial=step, desc="train", unit="step")
    first, last = {}, {}
    while step < total_steps:
        idx = plan[step % len(plan)]
        ids, feat, valid, taps = (None if t is None else t.to(acc.device, non_blocking=True)
                                  for t in collate(seqs, idx, cfg.max_len))  # shards live on the CPU
        with (torch.autocast(acc.device.type, dtype=torch.bfloat16, enabled=mixed == "bf16"),
              training_attention(acc.device)):
            if is_medusa:  # token-level heads on the clean last feature; per head (soft CE, top-1)
                loss, pl, ac = medusa.losses(head, w_draft, feat, valid)
                vl = []
            else:
                loss, vl, pl, ac = losses(head, embed, w_draft, ids, feat, valid, cfg, feat_rms, gen,
                                          taps if eagle3 else None, draft_logits)
        finite = bool(torch.isfinite(loss))
        if finite:
            acc.backward(loss)
            finite = bool(torch.isfinite(acc.clip_grad_norm_(head.parameters(), cfg.clip)))
        if finite:
            opt.step()
        else:  # a non-finite loss or gradient would poison every weight: skip the update, count it, go on
            skipped += 1
            if skipped <= 3:
                log(f"step {step + 1}: non-finite loss or gradient (loss {loss.item()}), update skipped; batch "
                    f"{tuple(ids.shape)} rows x width, max |feature| {float(feat.abs().max()):.4g}, sequences {idx[:8]}")
        sched.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if finite:
            last = {"loss": loss.item(), "vloss": vl, "ploss": pl, "top1": ac}
            first = first or last
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}", top1="/".join(f"{a:.2f}" for a in ac))
        if step % 20 == 0:
            log(f"step {step}/{total_steps} loss {loss.item():.4f} vloss {vl} ploss {pl} top1 {ac}")
        if step % cfg.save_every == 0 or step == total_steps:
            tmp = state_path.with_suffix(".tmp")
            torch.save({"head": acc.unwrap_model(head).state_dict(), "opt": opt.state_dict(),
                        "sched": sched.state_dict(), "step": step, "skipped": skipped,
                        "elapsed": elapsed0 + time.time() - t_start, "generator": gen.get_state(), **origin}, tmp)
            tmp.replace(state_path)
            if snapshot:
                snapshot(acc.unwrap_model(head), step, total_steps)
    bar.close()
    head = acc.unwrap_model(head).eval()
    return {"steps": total_steps, "batches_per_epoch": len(plan), "epochs": cfg.epochs, "mixed_precision": mixed,
            "skipped_non_finite": skipped,
            "train_seconds": round(elapsed0 + time.time() - t_start, 1), "first": first, "final": last,
            "tokens": int(sum(min(len(s[0]), cfg.max_len) for s in seqs))}
