"""Target adapter over a stock transformers causal LM, and model loading.

The only module that knows transformers model internals. One forward serves prefill, plain decoding and tree
verification: new tokens get explicit positions and a 4D additive mask in which each token sees the committed
prefix, its ancestors and itself. Sliding-window layers (Gemma 3, Mistral) get the window applied in the mask,
while the cache keeps full-length K/V in every layer: a window-trimming cache would evict prefix entries that a
rejected tree branch still needs (docs/ARCHITECTURE.md §2).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, Cache, PreTrainedModel

from core.models import choices
from core.models import invariance, kernels, pinned
from core.engine import attention, kv_cache
from core.models.presets import get_preset
from core.engine.tree_logits import TreeLogits
from core.models.weights import default_model_dir

DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"  # a chat model; core/models/presets.py lists it first
ATTENTION_MODES = ("auto", "invariant", "sdpa")  # --attention / $EAGLE_ATTENTION; sdpa is the default
ATTENTION_ENV = "EAGLE_ATTENTION"
# model families whose attention calls transformers' interface with the (1, 1, T, S) masks this adapter builds, and
# whose bf16 tree verifies the tests check bit for bit against one-token steps (tests/engine/test_invariant_attention.py)
INVARIANT_FAMILIES = ("llama", "qwen2", "gemma3_text")
AUTO_MIN_ROWS = 16  # `auto` keeps the invariant attention only where the probe covers the engine's default tree


@dataclass
class TargetModel:
    """A stock HF causal LM plus the few facts the decoders need. Holds no per-request state."""

    model: PreTrainedModel
    name: str = ""

    def __post_init__(self) -> None:
        cfg = self.model.config.get_text_config(decoder=True)
        self.config = cfg
        self.decoder = getattr(self.model, self.model.base_model_prefix)
        self.layer_types: list[str] | None = getattr(cfg, "layer_types", None)
        self.sliding_window: int | None = getattr(cfg, "sliding_window", None)
        self.softcap: float | None = getattr(cfg, "final_logit_softcapping", None)
        self.hidden_size: int = cfg.hidden_size
        self.vocab_size: int = self.model.get_output_embeddings().weight.shape[0]
        self.num_layers: int = cfg.num_hidden_layers
        eos = self.model.generation_config.eos_token_id if self.model.generation_config else None
        eos = eos if eos is not None else cfg.eos_token_id
        self.eos_ids: frozenset[int] = frozenset(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
        self.max_positions: int = int(getattr(cfg, "max_position_embeddings", 8192) or 8192)
        # the acceleration step's choices, plain until `accelerate()` runs (the product runs it after loading)
        self.packed = kernels.PackedWeights()  # oneDNN-packed copies of weights, kept where timed faster
        self.head_kernel, self.lazy_rows = "linear", False  # the LM-head product; verify rows on demand
        self.onednn_rows: frozenset[int] = frozenset()  # row counts whose forwards take the oneDNN route
        self.accelerated = False
        self.dtype_timing: dict[str, float] | None = None  # set by load_target when it timed bf16 against fp32
        # the attention in force ("sdpa" or "invariant", core/engine/attention.py) and the widest verify (rows) whose
        # every row equals a one-token step bit for bit in this dtype: 0 unless the invariant attention runs
        self.attention, self.exact_rows, self.attention_note = "sdpa", 0, ""

    def accelerate(self, pinned: dict | None = None) -> "TargetModel":
        """The acceleration step, run once by the product after loading (load_target) and never inside a
        constructor, so test fakes and other devices skip it and the choice is visible where it is made. On CPU: the
        LM head and the body's linear weights in oneDNN's packed layout (core/models/kernels.py PackedWeights), as far
        as half the spare memory allows, timed against the plain products; which LM-head product is fastest here and
        whether a verify computes only visited rows; the row counts at which a forward ran faster through oneDNN; the
        copies the timing did not pick are dropped. Elsewhere every product stays plain (the timing picks nothing off
        CPU). `pinned` (a `kernel_choices()` record, e.g. a bench's) applies earlier choices instead of timing, so two
        runs compute with the same products. Returns the target."""
        if self.accelerated:
            return self
        self.accelerated = True
        if self.device.type != "cpu":
            return self
        self.packed.add_within([[self.lm_head_weight], kernels.linear_weights(self.decoder)])
        if pinned is not None:
            self.head_kernel, self.lazy_rows = pinned["lm_head"], bool(pinned["lazy_rows"])
            self.onednn_rows = frozenset(pinned["body_onednn_rows"])
        else:
            self.head_kernel, self.lazy_rows = self._time_lm_head()
            self.onednn_rows = self._time_body()  # empty while _time_body's own forwards run
        head_w, head_kept = self.lm_head_weight, self.head_kernel == "onednn"
        self.packed.discard(keep=lambda w: head_kept if w is head_w else bool(self.onednn_rows))
        return self

    def use_attention(self, mode: str = "sdpa", pinned_rows: int | None = None,
                      pinned_layers: list[str] | None = None) -> "TargetModel":
        """Select the attention: "sdpa" (transformers' SDPA, today's behaviour), "invariant" (the row-invariant
        attention, core/engine/attention.py; ValueError where this model's family is not supported) or "auto" (the
        invariant one where supported, else SDPA). With the invariant attention, body layers whose kernel rounds a
        row differently with the row count (core/models/invariance.py `variant_layers`, every layer of a drifting
        shape; `pinned_layers` instead when a choices file pinned them) are computed at a fixed row count
        (core/models/pinned.py), then the start-up probe (`pinned_rows` instead when pinned) finds up to how many
        rows a verify reproduces one-token steps here: `exact_rows`, at most the pinned width when a layer is
        pinned. Where that is fewer than 2 rows ("auto": fewer than AUTO_MIN_ROWS, the engine's default tree)
        the target falls back to SDPA, unpinned, and `attention_note` says which kernel. Run after `accelerate()`:
        the probes use the kernel routes it chose. Returns the target."""
        if mode not in ATTENTION_MODES:
            raise ValueError(f"attention must be one of {', '.join(ATTENTION_MODES)}, got {mode!r}")
        self.model.set_attn_implementation("sdpa")
        pinned.unpin(self.decoder)
        self.attention, self.exact_rows, self.attention_note = "sdpa", 0, ""
        family = getattr(self.config, "model_type", "")
        if mode == "sdpa":
            return self
        if family not in INVARIANT_FAMILIES:
            if mode == "invariant":
                raise ValueError(f"--attention invariant: model family {family!r} is not supported "
                                 f"({', '.join(INVARIANT_FAMILIES)}); use auto or sdpa")
            self.attention_note = f"invariant attention not available for {family!r}: SDPA"
            return self
        self.model.set_attn_implementation(attention.register())
        layers = pinned_layers if pinned_layers is not None else list(invariance.variant_layers(self, pinned.PIN_ROWS))
        pinned.pin(self.decoder, layers)
        layers = pinned.pinned_names(self.decoder)
        found = invariance.Invariance(pinned_rows) if pinned_rows is not None else invariance.probe(self)
        if layers and found.rows > pinned.PIN_ROWS:  # exact by construction only up to the pinned width
            found = invariance.Invariance(pinned.PIN_ROWS)
        if found.rows < (AUTO_MIN_ROWS if mode == "auto" else 2):
            self.model.set_attn_implementation("sdpa")
            pinned.unpin(self.decoder)
            self.attention_note = f"kernels not row-invariant here past {found.rows} rows ({found.broken}): SDPA"
            return self
        self.attention, self.exact_rows = "invariant", found.rows
        self.attention_note = found.describe() + (
            f"; {', '.join(layers)} pinned at {pinned.PIN_ROWS} rows" if layers else "")
        return self

    def _time_lm_head(self) -> tuple[str, bool]:
        """(kernel, lazy rows): the LM-head product (core/models/kernels.py HEAD_KERNELS) measured fastest for this head on
        this machine (linear(), vocabulary-major with torch.mv for one row, or oneDNN's linear primitive), timed for
        bf16 and fp32 heads without bias on CPU; and whether one row with it costs so much less than a batch that a
        tree verify should compute only the rows acceptance visits (core/engine/tree_logits.py). The kernels' speed
        depends on the processor, so neither is assumed."""
        head = self.model.get_output_embeddings()
        if self.device.type == "cpu" and choices.pinned("lm_head") is not None:
            kernel = choices.pick("lm_head", lambda: None, kernels.head_candidates(head.weight))
            return kernel, bool(choices.pinned("lazy_rows"))
        return kernels.head_choice(head.weight, getattr(head, "bias", None), packed=self.packed)

    def _time_body(self, prefix: int = 32) -> frozenset[int]:
        """`kernels.body_choice` for this target: whole forwards of 1 to 64 new tokens after a `prefix`-token
        context, with and without the oneDNN route (CPU, dtypes this build's oneDNN runs); empty elsewhere."""
        if self.device.type != "cpu" or not kernels.onednn_head_works(self.dtype):
            return frozenset()
        if choices.pinned("body_onednn_rows") is not None:
            return frozenset(choices.pinned("body_onednn_rows"))
        sizes = kernels.BODY_ROWS
        gen = torch.Generator().manual_seed(0)
        ids = torch.randint(0, min(1000, self.vocab_size), (1, prefix + max(sizes)), generator=gen)  # (1, P + M)
        cache = self.new_cache()
        self.forward(ids[:, :prefix], cache)

        def forward(m: int, routed: bool) -> None:
            with kernels.routed(self.packed, routed):
                self.forward(ids[:, prefix:prefix + m], cache)  # onednn_rows is empty while timing: no own route
            kv_cache.crop(cache, prefix)

        try:
            # 5 rounds, not 2: in processes started right after a heavy job, 2 rounds dropped a size now and then
            return kernels.body_choice(forward, sizes, rounds=5)
        finally:
            kv_cache.free(cache)

    def kernel_choices(self) -> dict:
        """What start-up timing chose here, for a bench record: the LM-head kernel, rows on demand, the row counts
        whose forwards take the oneDNN route, and how many weights stayed packed (the attention in force and its
        exact rows are in `choices.describe`)."""
        return {"lm_head": self.head_kernel, "lazy_rows": self.lazy_rows,
                "body_onednn_rows": sorted(self.onednn_rows), "packed_weights": len(self.packed)}

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.dtype

    def new_cache(self) -> Cache:
        """A cache with full-length growing layers everywhere (no window trimming; core/engine/kv_cache.py); owned by one
        decode call."""
        return kv_cache.new_cache()

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """(1, T) ids -> (1, T, H) input embeddings exactly as the target sees them (Gemma's sqrt(H) scale included)."""
        return self.model.get_input_embeddings()(ids)

    @property
    def lm_head_weight(self) -> torch.Tensor:
        return self.model.get_output_embeddings().weight  # (V, H)

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., H) post-norm features -> (..., V) logits through the target's LM head.

        On CPU (bf16 or fp32) the product runs with the kernel start-up timing found fastest here
        (`kernels.head_choice`): on an AMX Xeon the vocabulary-major product ran 1.25-1.45x faster than linear()'s
        h @ W^T in bf16 (docs/results-history.md, "Where the time goes"); on an AVX2-only EPYC in fp32 oneDNN's
        linear primitive took 40 ms a row against 74 for torch.mv (core/models/kernels.py). Otherwise, and on other
        devices, the head module runs as is.
        """
        head = self.model.get_output_embeddings()
        kernel = self.head_kernel
        out = head(hidden) if kernel == "linear" else kernels.head_product(head.weight, hidden, kernel, self.packed)
        if self.softcap:
            out = torch.tanh(out / self.softcap) * self.softcap
        return out

    def tree_logits(self, hidden: torch.Tensor, kids: list[list[int]]) -> TreeLogits:
        """(N, H) verify features -> their LM-head rows, all now or each when acceptance first reads it
        (`lazy_rows`; core/engine/tree_logits.py)."""
        return TreeLogits(self.logits, hidden, kids, self.lazy_rows, self.device)

    @torch.inference_mode()
    def forward(
        self,
        ids: torch.Tensor,
        cache: Cache,
        parents: list[int] | None = None,
        depths: list[int] | None = None,
        anc: torch.Tensor | None = None,
        output_layers: tuple[int, ...] = (),
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Run new tokens after the cached prefix.

        ids: (1, T). Without `parents` the tokens form a chain (prefill or one decode step). With a tree, `depths`
        gives each node's depth below the root (root = ids[0, 0]) and `anc` its (T, T) ancestor mask.
        Returns (last_hidden (1, T, H) post-norm, optional (1, T, len(output_layers)*H) concatenated layer inputs).
        """
        prefix = cache.get_seq_length()
        t = ids.shape[1]
        dev = ids.device
        if parents is None:
            pos = torch.arange(prefix, prefix + t, device=dev)
            anc = torch.ones(t, t, dtype=torch.bool, device=dev).tril_()
        else:
            pos = prefix + torch.tensor(depths, device=dev)
            anc = anc.to(dev)
        masks = self._masks(pos, prefix, anc)
        # the invariant attention's row grouping, made once per forward and shared by its layers (attention.py)
        plans = {attention.PLANS_KWARG: {}} if self.attention == "invariant" else {}
        with kernels.linear_route(t, self.onednn_rows, self.packed):  # the body's products as timed faster here
            out = self.decoder(
                input_ids=ids,
                position_ids=pos.unsqueeze(0),
                attention_mask=masks,
                cache=cache,
                use_cache=True,
                output_hidden_states=bool(output_layers),
                **plans,
            )
        taps = None
        if output_layers:
            taps = torch.cat([out.hidden_states[i] for i in output_layers], dim=-1)
        return out.last_hidden_state, taps

    def _masks(self, pos: torch.Tensor, prefix: int, anc: torch.Tensor
               ) -> torch.Tensor | dict[str, torch.Tensor | None] | None:
        """Additive (1, 1, T, prefix + T) masks: prefix + ancestors visible; sliding layers also apply the window.

        A single new token that sees every key (a plain decode step inside the window) gets no mask at all (None for
        that layer type): SDPA then skips the mask add, about 2.5 ms of a 40 ms step of the default model on CPU.
        """
        t = pos.shape[0]
        inside_window = not self.sliding_window or prefix < self.sliding_window
        if t == 1 and inside_window:
            return None if self.layer_types is None else {kind: None for kind in set(self.layer_types)}
        key_pos = torch.cat([torch.arange(prefix, device=pos.device), pos])
        visible = torch.cat([torch.ones(t, prefix, dtype=torch.bool, device=pos.device), anc], dim=1)
        neg = torch.finfo(self.dtype).min

        def additive(v: torch.Tensor) -> torch.Tensor:
            return torch.zeros(v.shape, dtype=self.dtype, device=v.device).masked_fill_(~v, neg)[None, None]

        def windowed(v: torch.Tensor) -> torch.Tensor:
            return v & (pos[:, None] - key_pos[None, :] < self.sliding_window)

        if self.layer_types is not None:
            masks = {}
            for kind in set(self.layer_types):
                v = windowed(visible) if kind == "sliding_attention" and self.sliding_window else visible
                masks[kind] = additive(v)
            return masks
        if self.sliding_window:  # one window for every layer (Mistral)
            return additive(windowed(visible))
        return additive(visible)


# ----------------------------------------------------------------------------------------------- loading


def pick_device(name: str | None = None) -> torch.device:
    """cuda -> mps -> cpu unless named."""
    if name and name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def pick_dtype(name: str | None, device: torch.device) -> torch.dtype:
    """The named dtype, or by default ("auto"/None) bf16, fp16 on GPUs without bf16. (On CPU load_target instead
    times bf16 against fp32 for the model's shapes and takes the faster: core/models/kernels.py.)"""
    table = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
             "fp16": torch.float16, "float16": torch.float16}
    if name and name != "auto":
        if name not in table:
            raise ValueError(f"unknown dtype {name!r}; choose one of fp32, bf16, fp16, auto")
        return table[name]
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return torch.float16
    return torch.bfloat16


def resolve_model(name: str | None) -> str:
    """Model name -> loadable path or hub id. No name means DEFAULT_MODEL, the Qwen2.5-Coder-0.5B-Instruct preset: its
    first use assembles the GGUF from the six installed parts (sha256 checked) and builds the dense copy."""
    name = name or DEFAULT_MODEL
    preset = get_preset(name)
    if preset is not None:
        return preset.resolve()  # ValueError with the install line when an offline preset is not installed
    if os.path.isdir(name):
        return name
    if os.path.exists(name):
        raise ValueError(f"model path {name!r} is not a folder with config.json")
    if name.count("/") != 1 or name.startswith((".", "/")):
        raise ValueError(f"unknown model {name!r}: give '{DEFAULT_MODEL}', a preset name, a local folder or a hub id "
                         "like org/name")
    return name


def attention_mode(name: str | None = None) -> str:
    """The attention asked for: `name` (a flag), else the choices file's pin, else $EAGLE_ATTENTION, else "sdpa"."""
    mode = name or choices.pinned("attention") or os.environ.get(ATTENTION_ENV) or "sdpa"
    if mode not in ATTENTION_MODES:
        raise ValueError(f"attention must be one of {', '.join(ATTENTION_MODES)}, got {mode!r}")
    return mode


def load_target(
    name: str | None = None, device: str | None = None, dtype: str | None = None, trust_remote_code: bool = False,
    attention: str | None = None,
) -> tuple[TargetModel, object]:
    """Load (TargetModel, tokenizer). Hub ids download only when the user names them (needs network). `attention`:
    auto | invariant | sdpa (`attention_mode`; TargetModel.use_attention)."""
    path = resolve_model(name)
    dev = pick_device(device)
    timing = None
    if dev.type == "cpu" and dtype in (None, "auto") and choices.pinned("dtype"):  # core/models/choices.py
        dt = getattr(torch, choices.pinned("dtype"))
    elif dev.type == "cpu" and dtype in (None, "auto"):  # time bf16 against fp32 on this processor
        cfg = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code).get_text_config(decoder=True)
        dt, timing = kernels.fastest_cpu_dtype(cfg)
    else:
        dt = pick_dtype(dtype, dev)
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=dt, attn_implementation="sdpa", trust_remote_code=trust_remote_code
    ).to(dev)
    model.eval()
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    target = TargetModel(model, name=name or DEFAULT_MODEL).accelerate()  # the acceleration step (CPU)
    target.use_attention(attention_mode(attention), choices.pinned("invariant_rows"), choices.pinned("pinned_layers"))
    target.dtype_timing = timing
    return target, tok
