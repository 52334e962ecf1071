"""Assembly shared by the CLI, the app and the benchmark: model and head names -> target, tokenizer, decoders.

Head choice: an explicit folder, else the head the preset registry names for the model (for the default model
static/heads/qwen2.5-coder-0.5b-instruct) when that folder holds a head, else a freshly initialised head (lossless,
but its drafts are guesses; Eagle2Decoder.note says so).
Every user-facing failure (missing or unreadable head, wrong shapes) is a ValueError with one line. Prompts cross
into ids at one boundary, core/prompt.py.
"""
from __future__ import annotations

from pathlib import Path

from torch import nn

from core.models import choices
from core.drafters.draft_head import HeadConfig, init_head
from core.drafters.heads import load_any_head, make_drafter
from core.drafters.lookup import LookupDrafter
from core.engine.baseline import BaselineDecoder
from core.engine.eagle import Eagle2Decoder
from core.models.target import DEFAULT_MODEL, TargetModel, load_target
from core.models.presets import get_preset


def default_head(model: str | None) -> Path | None:
    """The head the preset registry names for the model (the default model's is
    static/heads/qwen2.5-coder-0.5b-instruct; a hub head downloads on first use), if there is one; None for models
    outside the registry."""
    preset = get_preset(model or DEFAULT_MODEL)
    path = preset.head_path() if preset is not None else None
    return Path(path) if path else None


def default_medusa_head(model: str | None) -> Path | None:
    """The Medusa head the preset registry names for the model (shipped for gemma-3-270m), if present."""
    preset = get_preset(model or DEFAULT_MODEL)
    return preset.medusa_path() if preset is not None else None


def check_head_path(head: str | Path) -> Path:
    """Fail early (before loading a model) when a named head folder cannot be a head."""
    p = Path(head)
    if not p.is_dir():
        raise ValueError(f"head {str(p)!r} is not a folder")
    if not (p / "config.json").is_file():
        raise ValueError(f"head folder {str(p)!r} has no config.json")
    return p


def read_head(head: str | Path, target: TargetModel):
    """load_any_head with every reading problem (bad JSON, missing fields, corrupt weights, wrong shapes) as ValueError."""
    p = check_head_path(head)
    try:
        loaded = load_any_head(p, dtype=target.dtype, device=target.device)  # EAGLE-1/2 or EAGLE-3 (midlayer.*)
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - safetensors / pickle / state-dict errors have no common base class
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"cannot read head {str(p)!r}: {first}") from e
    return loaded


def build_head(target: TargetModel, head: str | Path | None, model: str | None = None):
    """The named head, else the packaged default for the default model, else a fresh untrained one."""
    path = head or default_head(model)
    if path:
        return read_head(path, target)
    return init_head(HeadConfig.for_target(target.hidden_size, target.vocab_size))


def decoder_for(head: nn.Module | str | Path | None, target: TargetModel, method: str | None = None) -> Eagle2Decoder:
    """The one place a speculative decoder is built: a head (loaded, or a folder to read) bound to the target by the
    head registry's drafter (EAGLE-1/2, EAGLE-3, Medusa); None = no head, the context-lookup chain alone. The
    drafter's acceleration step runs here when its target had its own. ValueError (one line) when the folder is
    unreadable or the head was built for another target."""
    if head is None:
        return Eagle2Decoder(target, LookupDrafter(), method)
    if isinstance(head, (str, Path)):
        head = read_head(head, target)
    drafter = make_drafter(head, target)
    accelerate = getattr(drafter, "accelerate", None)  # optional in the Drafter contract
    if accelerate is not None and getattr(target, "accelerated", False):
        accelerate()  # the acceleration step follows the target's (load_target runs it; fakes and GPUs skip it)
    return Eagle2Decoder(target, drafter, method)


def build_decoders(
    model: str | None = None,
    head: str | Path | None = None,
    device: str | None = None,
    dtype: str | None = None,
    trust_remote_code: bool = False,
    choices_file: str | Path | None = None,
    attention: str | None = None,
) -> tuple[TargetModel, object, BaselineDecoder, Eagle2Decoder]:
    """Load the target once and bind both decoders to it (same model object, dtype and attention: a fair race).
    `choices_file` pins the dtype and kernel routes from that file, or has this run's written there (core/models/choices.py;
    $EAGLE_CHOICES does the same without the argument). `attention`: auto | invariant | sdpa (None: the pinned one,
    else $EAGLE_ATTENTION, else sdpa; core/models/target.py `attention_mode`)."""
    if head:
        check_head_path(head)
    if choices_file:
        choices.use(choices_file)
    asked = {"attention": attention} if attention is not None else {}  # None: load_target's own default rule
    target, tokenizer = load_target(model, device=device, dtype=dtype, trust_remote_code=trust_remote_code, **asked)
    eagle = decoder_for(build_head(target, head, model), target)  # ValueError on hidden/vocab mismatch
    choices.save(target, eagle.drafter)  # a choices file named but not yet written gets this run's (core/models/choices.py)
    return target, tokenizer, BaselineDecoder(target), eagle
