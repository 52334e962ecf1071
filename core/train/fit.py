"""Draft head training: EAGLE-1/2 (arXiv 2401.15077 §3.3) and EAGLE-3 (arXiv 2503.01840), with training-time test.

EAGLE-1/2 loss per unrolled step j: smooth-L1(predicted feature, target feature) + p_weight x soft cross-entropy
against the target's distribution softmax(lm_head(target feature)), both through the frozen target LM head
restricted to the draft vocabulary. Step 0 reads real (noised) target features.
EAGLE-3: step 0 reads the fused low/mid/high layer taps (through the head's fc), there is no feature loss, and the
logits come from the head's own norm + LM head over the draft vocabulary (initialised from the target's rows);
the soft cross-entropy target is the same.
Both: step j > 0 reads the head's own outputs from step j - 1 and attends to real context up to i - j plus its own
unrolled ancestors, as a depth-(j+1) tree node does at inference. Steps are weighted 0.8^j. AdamW, linear warmup
then linear (or cosine) decay, gradient clipping, accelerate.

What is scored: the answer tokens only (a stored sequence's `start` on; a text row is all answer), as the reference
trainers score the assistant's turn only; and positions whose next data token lies outside the draft vocabulary are
left out (EAGLE-3's rule: a draft that can never be accepted teaches nothing). Held-out sequences, never trained on,
are measured every `eval_every` steps (teacher-forced top-1 / top-3 per unrolled step, answer positions only), so
choices and early stopping read a curve that costs seconds instead of a decoding card that costs minutes.
"""
from __future__ import annotations

import contextlib
import hashlib
import math
import random
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from core.drafters.draft_head import EagleHead
from core.drafters.eagle3_head import Eagle3Head
from core.train.generation import padded_chunks
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
    answer_only: bool = True  # score answer tokens only (Stored.start); False also scores the prompt's
    warmup_share: float = 0.0  # > 0: warm up over this share of all steps (else `warmup` steps, at most a tenth)
    schedule: str = "linear"  # the decay after warmup: "linear" or "cosine", down to min_lr_share of the peak
    min_lr_share: float = 0.05
    save_every_s: float = 0.0  # > 0: also save state at least this often (seconds): an interruption loses little
    eval_every: int = 0  # held-out measure every N steps (with held-out data; always at the start and the end)


# a longer run may continue a shorter one; saving and measuring more or less often changes nothing
RESUMABLE_ARGS = ("epochs", "save_every", "save_every_s", "eval_every")
SCHEDULES = ("linear", "cosine")


def lr_factor(t: int, total: int, warmup: int, schedule: str = "linear", floor: float = 0.05) -> float:
    """The learning rate at step t as a share of the peak: linear warmup over `warmup` steps, then a linear or
    cosine decay to `floor` at the last step."""
    warm = min(1.0, (t + 1) / warmup)
    frac = min(1.0, t / max(1, total))
    if schedule == "cosine":
        return warm * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * frac)))
    return warm * max(floor, 1 - frac)


def warmup_steps(cfg: "FitConfig", total: int) -> int:
    """Warmup length: a share of the run when `warmup_share` is set, else `warmup` steps (at most a tenth)."""
    if cfg.warmup_share:
        return max(1, round(cfg.warmup_share * total))
    return max(1, min(cfg.warmup, total // 10))  # short runs still reach the peak rate


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


def collate(seqs, idx: list[int], max_len: int, answer_only: bool = True):
    """ids (B, S) long, feat (B, S, H) float, valid (B, S) bool (right padding), taps (B, S, 3H) float or None,
    scored (B, S) bool: the tokens whose guess is scored (valid, and from the sequence's answer start on when
    `answer_only` and the sequence records one)."""
    width = max(min(len(seqs[i][0]), max_len) for i in idx)
    h = seqs[idx[0]][1].shape[-1]
    has_taps = len(seqs[idx[0]]) > 2 and seqs[idx[0]][2] is not None
    ids = torch.zeros(len(idx), width, dtype=torch.long)
    feat = torch.zeros(len(idx), width, h)
    taps = torch.zeros(len(idx), width, seqs[idx[0]][2].shape[-1]) if has_taps else None
    valid = torch.zeros(len(idx), width, dtype=torch.bool)
    scored = torch.zeros(len(idx), width, dtype=torch.bool)
    for r, i in enumerate(idx):
        n = min(len(seqs[i][0]), max_len)
        ids[r, :n], feat[r, :n], valid[r, :n] = seqs[i][0][:n], seqs[i][1][:n].float(), True
        start = getattr(seqs[i], "start", 0) if answer_only else 0
        scored[r, min(start, n):n] = True
        if has_taps:
            taps[r, :n] = seqs[i][2][:n].float()
    return ids, feat, valid, taps, scored


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
           draft_logits=None, scored: torch.Tensor | None = None, in_vocab: torch.Tensor | None = None,
           counts: dict | None = None, full: tuple[torch.Tensor, torch.Tensor] | None = None
           ) -> tuple[torch.Tensor, list[float], list[float], list[float]]:
    """Total loss and per-step (vloss, ploss, top-1 accuracy) for one batch. ids/feat/valid/taps/scored as from
    collate() (scored None: every valid token); `in_vocab` (V,) bool leaves out the pairs whose next data token the
    draft vocabulary lacks. `counts`, when given, gathers per step the positions scored ("n") and the top-1 and
    top-3 hits ("top1", "top3"), for a held-out measure summed over batches. `full` (the target's whole LM head
    (V, H) and the target id of each draft row (Vd,)) also counts, over every answer position whatever the draft
    vocabulary holds, how often the head's top draft is the target's own greedy token ("n_all", "top1_all"): the
    measure that compares heads with different draft vocabularies.

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
    keep = (valid if scored is None else scored)[:, 1:]  # pair i is scored when token i+1 is
    keep_all, top_full = keep, None
    if counts is not None and full is not None:
        with torch.no_grad():
            top_full = full_argmax(f_tgt, full[0])  # (B, S) the target's greedy token over its whole vocabulary
    if in_vocab is not None:  # pair i's guess is t_{i+2}; the last pair has no next token in the data
        nxt_ok = in_vocab.to(ids.device)[ids[:, 2:]]  # (B, S-1)
        keep = keep & torch.cat([nxt_ok, torch.ones_like(nxt_ok[:, :1])], 1)
    past, total = None, 0.0
    vl, pl, acc = [], [], []
    for j in range(cfg.ttt_steps):
        mask = None if j == 0 else ttt_mask(s, j, ids.device)[None, None]
        out, kv = head(emb, feats, pos, past, mask)  # (B, S, H)
        m = keep.clone()
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
        if counts is not None:
            hit3 = (logp.topk(3, dim=-1).indices == top_tgt[..., None]).any(-1)
            for key, v in (("n", mf.sum()), ("top1", ((logp.argmax(-1) == top_tgt).float() * mf).sum()),
                           ("top3", (hit3.float() * mf).sum())):
                counts.setdefault(key, [0.0] * cfg.ttt_steps)[j] += float(v)
            if top_full is not None:
                m_all = keep_all.clone()
                m_all[:, :j] = False
                hit = (full[1].to(ids.device)[logp.argmax(-1)] == top_full) & m_all
                for key, v in (("n_all", m_all.sum()), ("top1_all", hit.sum())):
                    counts.setdefault(key, [0.0] * cfg.ttt_steps)[j] += float(v)
        past = kv if past is None else (torch.cat([past[0], kv[0]], 2), torch.cat([past[1], kv[1]], 2))
        feats = torch.cat([out[:, :1], out[:, :-1]], dim=1)  # step j+1 reads the prediction made at i-1
    return total, vl, pl, acc


def full_argmax(feat: torch.Tensor, w_full: torch.Tensor, rows: int = 512) -> torch.Tensor:
    """(B, S, H) features -> (B, S) argmax of feat @ w_full.T over the whole vocabulary, `rows` positions at a
    time (a 4,096-token batch against 152k rows would need 2.5 GB of fp32 logits at once)."""
    flat = feat.reshape(-1, feat.shape[-1])
    out = torch.cat([(flat[i:i + rows].to(w_full.dtype) @ w_full.T).argmax(-1) for i in range(0, len(flat), rows)])
    return out.reshape(feat.shape[:-1])


@torch.no_grad()
def heldout_measure(head, embed, w_draft: torch.Tensor, seqs, cfg: FitConfig, feat_rms: float,
                    in_vocab: torch.Tensor | None, draft_logits=None, autocast: bool = False,
                    full: tuple[torch.Tensor, torch.Tensor] | None = None) -> dict:
    """Teacher-forced top-1 / top-3 per unrolled step on held-out sequences (never trained on), answer positions
    only whatever the run scores in training (so runs that score differently compare on one measure), no input
    noise: {"top1": [...], "top3": [...], "positions": n}. EAGLE-3 heads read their taps. With `full` (see
    losses()), also "top1_all" and "positions_all": every answer position, against the target's greedy token over
    its whole vocabulary (a token outside the draft vocabulary is a miss), so heads with different draft
    vocabularies compare."""
    eagle3 = draft_logits is not None
    cfg0 = replace(cfg, noise=0.0)
    lens = [min(len(sq[0]), cfg.max_len) for sq in seqs]
    counts: dict = {}
    was_training = head.training
    head.eval()
    dev = w_draft.device
    for idx in padded_chunks(lens, sorted(range(len(seqs)), key=lens.__getitem__), cfg.tokens_per_batch):
        ids, feat, valid, taps, scored = (None if t is None else t.to(dev)
                                          for t in collate(seqs, idx, cfg.max_len, True))  # answers, always
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast):
            losses(head, embed, w_draft, ids, feat, valid, cfg0, feat_rms, None, taps if eagle3 else None,
                   draft_logits, scored, in_vocab, counts, full)
    head.train(was_training)
    n = counts.get("n", [0.0] * cfg.ttt_steps)
    out = {key: [round(h / max(1.0, c), 4) for h, c in zip(counts.get(key, n), n)] for key in ("top1", "top3")} | {
        "positions": int(n[0])}
    if full is not None:
        n_all = counts.get("n_all", [0.0] * cfg.ttt_steps)
        out |= {"top1_all": [round(h / max(1.0, c), 4) for h, c in zip(counts.get("top1_all", n_all), n_all)],
                "positions_all": int(n_all[0])}
    return out


class _Training:
    """One fit() call's moving parts: the accelerator, the wrapped head and its optimizer and schedule, the batch
    plan, the noise generator, and the record a state.pt carries on (`run`: step, elapsed, skipped, tokens seen,
    held-out curve)."""

    def __init__(self, head: nn.Module, embed, w_draft: torch.Tensor, seqs, cfg: FitConfig, ckpt_dir: Path, log,
                 heldout, in_vocab: torch.Tensor | None):
        from accelerate import Accelerator

        acc = Accelerator(mixed_precision="no")  # autocast is ours (below): accelerate's state is one per process
        on_cpu = acc.device.type == "cpu"  # GPUs keep bf16 autocast; a CPU gets it only where it measured faster
        self.mixed = "bf16" if not on_cpu or kernels.bf16_matmul_is_faster(w_draft.shape[1]) else "no"
        self.plan = batches(seqs, cfg, random.Random(cfg.seed))
        self.total_steps = max(1, int(len(self.plan) * cfg.epochs))
        opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
        self.warmup = warmup_steps(cfg, self.total_steps)
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda t: lr_factor(t, self.total_steps, self.warmup, cfg.schedule, cfg.min_lr_share))
        head.train()
        self.head, self.opt = acc.prepare(head, opt)
        self.acc, self.embed, self.seqs, self.cfg, self.log = acc, embed, seqs, cfg, log
        self.heldout, self.in_vocab = heldout, in_vocab
        self.w_draft = w_draft.to(acc.device).float()  # (Vd, H)
        inner = acc.unwrap_model(self.head)
        self.eagle3 = isinstance(inner, Eagle3Head)
        self.is_medusa = isinstance(inner, medusa.MedusaHead)
        self.draft_logits = inner.draft_logits if self.eagle3 else None
        self.feat_rms = float(torch.cat([sq[1][:256].float() for sq in seqs[:200]]).pow(2).mean().sqrt())
        self.run = {"step": 0, "elapsed": 0.0, "skipped": 0, "tokens_seen": 0, "heldout": []}
        self.state_path = ckpt_dir / "state.pt"
        self.origin = run_origin(seqs, cfg)  # what this state belongs to: a resume must continue the same run
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.t_start = self.last_save = time.time()  # restarted by resume(): this run's clock

    def resume(self) -> None:
        """Continue from state.pt when there is one (check_resume refuses one from another run); this run's clock
        starts after it."""
        if self.state_path.exists():
            self._load_state()
        self.t_start = self.last_save = time.time()

    def _load_state(self) -> None:
        """The head, optimizer, schedule, run record and noise stream of state.pt."""
        st = torch.load(self.state_path, map_location="cpu", weights_only=True)
        check_resume(st, self.origin, self.state_path)
        self.acc.unwrap_model(self.head).load_state_dict(st["head"])
        self.opt.load_state_dict(st["opt"])
        self.sched.load_state_dict(st["sched"])
        self.run.update(step=int(st["step"]), elapsed=float(st["elapsed"]), skipped=int(st.get("skipped", 0)),
                        tokens_seen=int(st.get("tokens_seen", 0)), heldout=list(st.get("heldout", [])))
        if "generator" in st:  # the noise stream continues where it stopped, as in an uninterrupted run
            self.gen.set_state(st["generator"])
        else:  # a state written before the generator was saved
            self.gen.manual_seed(self.cfg.seed + self.run["step"])
        self.log(f"resumed from {self.state_path} at step {self.run['step']}/{self.total_steps}")

    def measure_heldout(self) -> None:
        """One point of the held-out curve at this step (none for Medusa heads, none twice at one step)."""
        run = self.run
        if not self.heldout or self.is_medusa or any(p["step"] == run["step"] for p in run["heldout"]):
            return
        t0 = time.time()
        r = heldout_measure(self.acc.unwrap_model(self.head), self.embed, self.w_draft, self.heldout, self.cfg,
                            self.feat_rms, self.in_vocab, self.draft_logits, self.mixed == "bf16")
        point = {"step": run["step"], "token_passes": run["tokens_seen"],
                 "wall_s": round(run["elapsed"] + time.time() - self.t_start, 1), "lr": self.sched.get_last_lr()[0],
                 **r, "measure_s": round(time.time() - t0, 1)}
        run["heldout"].append(point)
        self.log(f"held-out step {run['step']}: top1 {r['top1']} top3 {r['top3']} on {r['positions']} positions")

    def save_state(self) -> None:
        """Write state.pt (head, optimizer, schedule, run record, noise generator, origin) atomically."""
        tmp = self.state_path.with_suffix(".tmp")
        torch.save({"head": self.acc.unwrap_model(self.head).state_dict(), "opt": self.opt.state_dict(),
                    "sched": self.sched.state_dict(),
                    **{**self.run, "elapsed": self.run["elapsed"] + time.time() - self.t_start},
                    "generator": self.gen.get_state(), **self.origin}, tmp)
        tmp.replace(self.state_path)
        self.last_save = time.time()

    def step(self, idx: list[int]) -> tuple[torch.Tensor, list, list, list, bool, torch.Tensor]:
        """One optimisation step on the sequences `idx`: (loss, vloss, ploss, top-1 per unrolled step, whether the
        update ran, valid (B, S)). A non-finite loss or gradient would poison every weight: the update is skipped
        and counted."""
        cfg, dev, run = self.cfg, self.acc.device, self.run
        ids, feat, valid, taps, scored = (None if t is None else t.to(dev, non_blocking=True)
                                          for t in collate(self.seqs, idx, cfg.max_len, cfg.answer_only))
        with (torch.autocast(dev.type, dtype=torch.bfloat16, enabled=self.mixed == "bf16"),
              training_attention(dev)):
            if self.is_medusa:  # token-level heads on the clean last feature; per head (soft CE, top-1)
                loss, pl, ac = medusa.losses(self.head, self.w_draft, feat, valid)
                vl = []
            else:
                loss, vl, pl, ac = losses(self.head, self.embed, self.w_draft, ids, feat, valid, cfg, self.feat_rms,
                                          self.gen, taps if self.eagle3 else None, self.draft_logits, scored,
                                          self.in_vocab)
        finite = bool(torch.isfinite(loss))
        if finite:
            self.acc.backward(loss)
            finite = bool(torch.isfinite(self.acc.clip_grad_norm_(self.head.parameters(), cfg.clip)))
        if finite:
            self.opt.step()
        else:
            run["skipped"] += 1
            if run["skipped"] <= 3:
                self.log(f"step {run['step'] + 1}: non-finite loss or gradient (loss {loss.item()}), update skipped; "
                         f"batch {tuple(ids.shape)} rows x width, max |feature| {float(feat.abs().max()):.4g}, "
                         f"sequences {idx[:8]}")
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        run["step"] += 1
        run["tokens_seen"] += int(valid.sum())
        return loss, vl, pl, ac, finite, valid

    def summary(self, first: dict, last: dict) -> dict:
        """What training.json records of the fit; `first` and `last`: the first and last finite steps' losses."""
        cfg, run = self.cfg, self.run
        return {"steps": self.total_steps, "batches_per_epoch": len(self.plan), "epochs": cfg.epochs,
                "mixed_precision": self.mixed, "skipped_non_finite": run["skipped"], "warmup_steps": self.warmup,
                "schedule": cfg.schedule, "answer_only": cfg.answer_only, "token_passes": run["tokens_seen"],
                "train_seconds": round(run["elapsed"] + time.time() - self.t_start, 1), "first": first,
                "final": last, "tokens": int(sum(min(len(s[0]), cfg.max_len) for s in self.seqs)),
                "heldout_curve": run["heldout"]}


def fit(head: EagleHead | Eagle3Head | medusa.MedusaHead, embed, w_draft: torch.Tensor, seqs, cfg: FitConfig,
        ckpt_dir: Path, log, snapshot=None, heldout=None, in_vocab: torch.Tensor | None = None) -> dict:
    """Train in place with accelerate; resumes from ckpt_dir/state.pt. Returns a summary for training.json.

    w_draft: (Vd, H) the target's LM-head rows of the draft vocabulary. An Eagle3Head trains on the shards' taps; a
    MedusaHead on the last features with core.drafters.medusa.losses. `snapshot(head, step, total_steps)` is called
    after every save (the caller keeps heads along the way, e.g. for a curve of tau against the data seen).
    `heldout` (sequences never trained on) is measured at the start, every `cfg.eval_every` steps and at the end
    (heldout_measure); the curve, with token-passes and wall time, is kept in the state and returned. `in_vocab`
    (V,) bool: the draft vocabulary's ids (losses leaves out the others).
    """
    tr = _Training(head, embed, w_draft, seqs, cfg, ckpt_dir, log, heldout, in_vocab)
    tr.resume()
    tr.measure_heldout()
    total, run = tr.total_steps, tr.run
    bar = tqdm(total=total, initial=run["step"], desc="train", unit="step")
    first, last = {}, {}
    while run["step"] < total:
        loss, vl, pl, ac, finite, _ = tr.step(tr.plan[run["step"] % len(tr.plan)])
        step = run["step"]
        if finite:
            last = {"loss": loss.item(), "vloss": vl, "ploss": pl, "top1": ac}
            first = first or last
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}", top1="/".join(f"{a:.2f}" for a in ac))
        if step % 20 == 0:
            log(f"step {step}/{total} loss {loss.item():.4f} vloss {vl} ploss {pl} top1 {ac}")
        if (cfg.eval_every and step % cfg.eval_every == 0) or step == total:
            tr.measure_heldout()
        timed_save = cfg.save_every_s and time.time() - tr.last_save >= cfg.save_every_s
        if step % cfg.save_every == 0 or step == total or timed_save:
            tr.save_state()
            if snapshot:
                snapshot(tr.acc.unwrap_model(tr.head), step, total)
    bar.close()
    tr.acc.unwrap_model(tr.head).eval()
    return tr.summary(first, last)
