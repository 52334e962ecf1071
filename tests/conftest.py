"""Shared fixtures: tiny random target models built from configs in code (fp32, CPU, sdpa), untrained heads.

Random weights at the stock init (std 0.02) make greedy decoding collapse into a short loop after a few tokens, which
would let a 200-token equivalence test pass on 5 distinct tokens. The builders therefore scale the init up (and, for
Gemma 3, randomise the (1 + w) norms so the sqrt(H)-scaled tied embedding does not dominate the residual and make
every token predict itself). `assert_varied` guards this in the tests that rely on it.

Helpers are plain functions here so test modules in every folder can `from conftest import ...` (tests/ has no
__init__.py; pytest.ini puts tests/ and each of its folders on the path, so `from fakes import ...` and a test
module's helpers, `from test_bench import stack`, import the same way from any folder).
"""
from __future__ import annotations

import functools
import json
import random

import pytest
import torch
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from core.models import choices
from core.engine import tree as tree_lib
from core.engine.config import DecodeConfig
from core.drafters.draft_head import EagleHead, HeadConfig, init_head
from core.engine.contract import DraftPool
from core.drafters.eagle import DraftState, EagleDrafter
from core.models.target import TargetModel

# Tiny models are dispatch-bound: with 2 threads on a shared 2-core runner, a 200-token run took ~30x longer than
# with 1 (thread oversubscription whenever anything else runs).
torch.set_num_threads(1)

# Tests whose path depends on the processor's kernels (oneDNN's packing and linear, ATen's vector units, the dtype
# timing, near-tie exactness, small-tree equivalence): marked `isa`, and scripts/test.sh runs them again under the
# oneDNN and ATen caps this machine can emulate (ONEDNN_MAX_CPU_ISA=AVX2 / AVX512_CORE_BF16,
# ATEN_CPU_CAPABILITY=default), so a fault that would appear on another processor appears here first.
ISA_SENSITIVE = (
    "tests/models/test_kernels.py::",
    "tests/models/test_logits.py::",
    "tests/engine/test_exactness.py::",
    "tests/engine/test_tree_logits.py::",
    "tests/engine/test_invariant_attention.py::",
    "tests/models/test_choices.py::test_each_pinned_path_gives_the_plain_paths_tokens",
    "tests/system/test_equivalence.py::test_greedy_eagle_equals_baseline[llama-T24-D5-K4-L0]",
    "tests/system/test_equivalence.py::test_greedy_eagle_equals_baseline[qwen2-T24-D5-K4-L10-S0.05]",
    "tests/system/test_equivalence.py::test_greedy_eagle_equals_baseline[gemma3-T24-D5-K4-L0]",
    "tests/system/test_equivalence.py::test_greedy_eagle_reduced_draft_vocab[llama]",
)
ISA_LEFT_OUT = ("tests/engine/test_tree_logits.py::test_the_draft_profile_script",)  # a script's report, not a kernel path


def pytest_collection_modifyitems(config, items):
    """Mark the ISA_SENSITIVE tests `isa` (scripts/test.sh's capped runs select them with -m isa)."""
    for item in items:
        if item.nodeid.startswith(ISA_SENSITIVE) and not item.nodeid.startswith(ISA_LEFT_OUT):
            item.add_marker(pytest.mark.isa)


KINDS = ("llama", "qwen2", "qwen3", "mistral", "gemma3")
SLIDING_WINDOW = 8
# 20 tokens: longer than the sliding window of the Mistral and Gemma 3 fixtures
PROMPT = [3, 17, 42, 5, 9, 11, 23, 31, 7, 2, 60, 8, 19, 44, 1, 90, 33, 12, 71, 26]

_COMMON = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=2048, bos_token_id=None, eos_token_id=None,
               pad_token_id=None)


def _build(kind: str, vocab: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    common = dict(_COMMON, vocab_size=vocab)
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common, initializer_range=0.3))
    elif kind == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common, initializer_range=0.6))  # q/k/v biases
    elif kind == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**common, head_dim=16, initializer_range=0.3))  # q_norm / k_norm
    elif kind == "mistral":
        model = MistralForCausalLM(MistralConfig(**common, head_dim=16, sliding_window=SLIDING_WINDOW,
                                                 initializer_range=0.3))
    elif kind == "gemma3":
        cfg = Gemma3TextConfig(
            **dict(common, num_hidden_layers=3), head_dim=24,  # head_dim != 64 / 4
            sliding_window=SLIDING_WINDOW, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            query_pre_attn_scalar=24, final_logit_softcapping=30.0, tie_word_embeddings=True, initializer_range=0.3,
        )
        model = Gemma3ForCausalLM(cfg)
    else:
        raise ValueError(kind)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                continue
            if kind == "gemma3":  # Gemma norms scale by (1 + w); w starts at 0
                p.normal_(8.0 if ".post_" in name else 2.0 if name == "model.norm.weight" else 0.0, 1.0)
            else:
                p.copy_(1.0 + (2.0 if kind == "qwen3" else 0.5) * torch.randn_like(p))
        if kind == "gemma3":
            model.model.embed_tokens.weight.normal_(0.0, 1.0 / 8.0)  # times sqrt(64) in the model: unit scale
    model.config._attn_implementation = "sdpa"
    model.generation_config.eos_token_id = None
    return model.eval()


@functools.lru_cache(maxsize=None)
def load_script(name: str):
    """scripts/NAME.py (NAME may name a subfolder: "probes/oracle_tau") as a module (the scripts are files, not a
    package), for tests that call their main()."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(Path(name).name, Path(__file__).parents[1] / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_model(kind: str, vocab: int = 128, seed: int = 0) -> torch.nn.Module:
    """A cached tiny random HF causal LM (fp32, CPU). Never mutate it; wrap it in a new TargetModel instead."""
    return _build(kind, vocab, seed)


def tiny_target(kind: str, vocab: int = 128, seed: int = 0, eos: tuple[int, ...] = ()) -> TargetModel:
    """A fresh TargetModel over the cached tiny model; eos_ids cleared (or set) so long outputs are possible."""
    tgt = TargetModel(tiny_model(kind, vocab, seed), name=f"tiny-{kind}")
    tgt.eos_ids = frozenset(eos)
    return tgt


def tiny_head(target: TargetModel, vocab_ids: torch.Tensor | None = None, seed: int = 0) -> EagleHead:
    """An untrained EAGLE head for `target` (optionally over a reduced draft vocabulary)."""
    draft_vocab = 0 if vocab_ids is None else len(vocab_ids)
    return init_head(HeadConfig.for_target(target.hidden_size, target.vocab_size, draft_vocab), vocab_ids, seed=seed)


DRAFTER_KINDS = ("eagle", "eagle3", "medusa", "lookup")


def tiny_drafter(kind: str, target: TargetModel, vocab_ids: torch.Tensor | None = None, seed: int = 0):
    """An untrained drafter of each registered kind behind the `Drafter` contract (core/drafters/eagle.py), for `target`,
    optionally over a reduced draft vocabulary. The Medusa ResBlocks get random weights (zeros, their init, would
    make every level guess the same token)."""
    from core.drafters.eagle import Eagle3Drafter
    from core.drafters.lookup import LookupDrafter
    from core.drafters.eagle3_head import Eagle3Config, init_eagle3_head
    from core.drafters.medusa import MedusaConfig, MedusaDrafter, init_medusa_head

    h, v = target.hidden_size, target.vocab_size
    ids = vocab_ids if vocab_ids is not None else torch.arange(v)
    if kind == "eagle":
        return EagleDrafter(tiny_head(target, vocab_ids, seed), target)
    if kind == "eagle3":
        c = Eagle3Config(h, 2 * h, 4, 2, v, len(ids), target_hidden_size=h)
        head = init_eagle3_head(c, ids - torch.arange(len(ids)), seed=seed)
        with torch.no_grad():  # its own LM head starts as the target's rows, as core.train does
            head.lm_head.weight.copy_(target.lm_head_weight[ids].float())
        return Eagle3Drafter(head, target)
    if kind == "medusa":
        head = init_medusa_head(MedusaConfig(h, v, num_heads=4, draft_vocab_size=len(ids)), ids)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for block in head.medusa_head:
                block[0].linear.weight.copy_(torch.randn(h, h, generator=g) / h**0.5)
        return MedusaDrafter(head, target)
    if kind == "lookup":
        return LookupDrafter()
    raise ValueError(kind)


def run(decoder, prompt: list[int], cfg: DecodeConfig) -> tuple[list[int], list]:
    """All generated ids and the events of one decode call."""
    events = list(decoder.generate(prompt, cfg))
    return [t for e in events for t in e.new_token_ids], events


def period(tokens: list[int], tail: int = 100) -> int | None:
    """Smallest period of the last `tail` tokens, or None."""
    seq = tokens[-tail:]
    for p in range(1, len(seq) // 2 + 1):
        if all(seq[i] == seq[i + p] for i in range(len(seq) - p)):
            return p
    return None


def assert_varied(tokens: list[int], min_distinct: int = 12) -> None:
    """The output is not a short loop (otherwise a long equivalence test proves little)."""
    assert len(set(tokens[-100:])) >= min_distinct, f"output too repetitive: {tokens[-40:]}"
    p = period(tokens)
    assert p is None or p > 30, f"output is {p}-periodic: {tokens[-40:]}"


class OracleDrafter(EagleDrafter):
    """A drafter that plants the reference continuation along one random path of the real candidate pool.

    An untrained head rarely guesses the target's token, so it barely exercises multi-token acceptance, cache
    compaction of non-contiguous paths, or EOS/max-token clipping inside an accepted chunk. Any deterministic proposal
    keeps decoding lossless, so planting the known answer is legitimate; `reach` caps the planted depth at random so
    acceptance lengths vary (0 .. depth).
    """

    def __init__(self, head: EagleHead, target: TargetModel, reference: list[int], seed: int = 0):
        super().__init__(head, target)
        self.reference = reference  # prompt + the baseline's output
        self.rng = random.Random(seed)

    def propose(self, st: DraftState, root_token: int, tree) -> DraftPool:
        pool = super().propose(st, root_token, tree)
        kids = tree_lib.children(pool.parents)
        level = tree_lib.depths(pool.parents)
        at = st.length  # index of the root token in prompt + generated
        node, reach = 0, self.rng.randint(0, tree.depth)
        for j in range(1, reach + 1):
            if at + j >= len(self.reference):
                break
            expanded = [c for c in kids[node] if kids[c]] if j < reach else kids[node]
            if expanded:
                node = self.rng.choice(expanded)
            else:  # the real tree does not go deeper here: re-hang a random node of depth j below `node`
                node_new = self.rng.choice([i for i, d in enumerate(level) if d == j])
                pool.parents[node_new], node = node, node_new
                kids = tree_lib.children(pool.parents)
            pool.tokens[node] = self.reference[at + j]
            pool.scores[node] = -1e-6 * j  # best-ranked, so the rerank keeps the planted path
        return pool


@pytest.fixture
def tiny_llama() -> TargetModel:
    return tiny_target("llama")


@pytest.fixture
def tiny_gemma3() -> TargetModel:
    return tiny_target("gemma3")


@pytest.fixture
def tiny_mistral() -> TargetModel:
    return tiny_target("mistral")


@pytest.fixture
def rng() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


# Every test runs on one pinned CPU path (core/models/choices.py): the plain products, no rows on demand, no oneDNN route,
# so a bug in one route fails the tests that pin that route (tests/models/test_choices.py) instead of showing up now and
# then when timing noise picks it. Tests of the timing itself are marked `timed` and see no pins.
PLAIN_PATH = {"lm_head": "linear", "lazy_rows": False, "body_onednn_rows": [], "draft_head": "linear",
              "draft_onednn_rows": [], "medusa_head": "linear"}


@pytest.fixture(scope="session", autouse=True)
def plain_path_file(tmp_path_factory):
    """The pin file, in force from the start of the session (module-scoped fixtures build their models on it too)."""
    path = tmp_path_factory.getbasetemp() / "plain_path_choices.json"
    path.write_text(json.dumps(PLAIN_PATH))
    choices.use(path)
    yield path
    choices.use(None)


@pytest.fixture(autouse=True)
def pinned_kernel_path(request, plain_path_file):
    """Each test starts on the plain path (or unpinned when marked `timed`) and leaves it restored, whatever pins it
    set itself."""
    choices.use(None if request.node.get_closest_marker("timed") else plain_path_file)
    yield
    choices.use(plain_path_file)
