"""The benchmark's validated plan: everything a run needs, checked before a model loads (core/bench/cli.py builds it
from the command line; the rest of core/bench reads it, never the command line)."""
from __future__ import annotations

from dataclasses import dataclass, field

from core.engine.config import DecodeConfig, TreeConfig
from core.lanes import LaneSpec


@dataclass(frozen=True)
class Selection:
    """Which questions run: the file, its split and the selection per category (core/bench/questions.py)."""

    questions: str
    split: str = "all"
    categories: frozenset[str] = frozenset()
    per_category: int = 0
    limit: int = 0
    file_categories: bool = False


@dataclass(frozen=True)
class Loading:
    """What loads and how: model, --head, device, dtype, threads and the pinned choices (core/pipeline.py)."""

    model: str | None = None
    head: str | None = None
    device: str | None = None
    dtype: str | None = None
    threads: int = 0
    trust_remote_code: bool = False
    choices: str | None = None
    attention: str | None = None


@dataclass(frozen=True)
class Plan:
    """Validated arguments: what races (peers and lanes), on which questions, loaded how, written where."""

    selection: Selection
    methods: tuple[str, ...]  # row order: the methods as given (a file peer's as its rows), then --lane's names
    lanes: tuple[LaneSpec, ...]  # every method that is not a peer, as the lane it spells, then --lane's lanes
    decode: DecodeConfig  # sampling seed is replaced per prompt; its tree is the run's when given
    tree: TreeConfig | None = None  # None = auto
    tree_spec: str = "auto"  # --tree as written (the JSON records it)
    loading: Loading = field(default_factory=Loading)
    head_b: str | None = None  # --head-b, as given (the JSON records it)
    raw: bool = False  # raw text, never the chat template
    turns: int = 1  # 2: second turns on the baseline's first answers (core/bench/turns.py)
    repeats: int = 1  # rounds per prompt, each method's fastest kept
    seed: int = 0
    json: str = ""
    html: str | None = None
    specbench_dir: str | None = None
    # the rows of file peers (core/bench/peers.py FILE_PEERS): (row, method, file), e.g.
    # ("llamacpp-Q4_K_M", "llamacpp", "qwen-q4_k_m.gguf") for each --gguf
    files: tuple[tuple[str, str, str], ...] = ()

    @property
    def peers(self) -> tuple[str, ...]:
        """The rows that are not lanes (transformers' generate(), llama.cpp's files: core/bench/peers.py)."""
        named = {s.name for s in self.lanes}
        return tuple(m for m in self.methods if m not in named)
