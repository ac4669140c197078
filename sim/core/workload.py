"""Workload files: what to run. Field names are stable: sweeps and users
address them by dotted path (`workload.batch`, `workload.formats.weights`)."""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StrictBool, StrictInt, ValidationError, field_validator, model_validator

from sim.core.sections import KIND_SECTIONS
from sim.core.errors import ConfigError, naming_sets, where
from sim.core.formats import get_format
from sim.core.lowering import FormatPolicy
from sim.core.model import ModelConfig, expert_load_from, load_model
from sim.core.schema import Strict, collect_sections, read_yaml, set_dotted, validate_mapping, validation_error


def _known_format(name: str) -> str:
    """A pydantic validator: an unknown format is a ValueError, so the error names
    the key (`formats.weights`, `formats.overrides.lm_head`), not just `formats`."""
    try:
        # The canonical name: `half` and `fp16` are one configuration (one sweep point).
        return get_format(name).name  # raises with the list of known formats
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


FormatName = Annotated[str, AfterValidator(_known_format)]


class Formats(Strict):
    weights: FormatName = "fp16"
    activations: FormatName = "fp16"
    kv_cache: FormatName = "fp16"
    # Per-op weight formats by glob on the op name, e.g. {"lm_head": "bf16"}.
    overrides: dict[str, FormatName] = {}

    @field_validator("weights", "activations", "kv_cache")
    @classmethod
    def _lower(cls, v: str) -> str:
        return v.lower()

    def policy(self) -> FormatPolicy:
        return FormatPolicy(self.weights, self.activations, self.kv_cache, tuple(self.overrides.items()))


class Workload(Strict):
    name: str = "workload"
    model: str | dict[str, Any]
    # Strict: `batch: true` or `batch: "4"` is a mistake, not a 1 or a 4.
    batch: StrictInt = Field(default=1, gt=0)
    prompt_len: StrictInt = Field(default=512, gt=0)
    # at most the longest published context (Llama 4 Scout's 10M tokens): a run keeps a few arrays of one entry
    # per decode step (sim.core.generation), so a typo's 10^8 filled gigabytes
    gen_len: StrictInt = Field(default=128, gt=0, le=10_000_000)
    formats: Formats = Formats()
    flash_attention: StrictBool = False
    # How narrow formats compute where the hardware lacks them: `auto` dequantizes
    # weights into a native format (weight-only quantization); `native` demands native units.
    compute: Literal["auto", "native"] = "auto"
    # The software stack that runs the graph (hw_models/stack/presets/<name>.yaml or a path: torch-eager,
    # torch-cudagraph, vllm, trtllm): kernels per op, fusion, launch cost, quantized GEMM kernels.
    # None: every op one kernel with the preset's launch overhead (the model before stacks existed).
    stack: str | None = None
    # How each step picks its tokens: `greedy` (temperature 0, an argmax inside the LM head's kernels: most
    # benchmark clients), `random` (temperature > 0, no top-k/top-p: a softmax and a draw, a few passes over the
    # logits, not charged) or `top_p`
    # (a nucleus: a stack with a `top_p_sampler` sorts every row's logits each step, hw_models.stack.sampler).
    sampling: Literal["greedy", "random", "top_p"] = "greedy"
    # The requests carry a repetition, frequency or presence penalty (vLLM then runs its penalty pass over every
    # row's logits each step, hw_models.stack.sampler; ML.ENERGY's client sends repetition_penalty 1.1).
    penalties: StrictBool = False
    # Top-level keys a hardware kind owns (offload's `policy`, PIM's `pim_policy`), kept
    # as given and validated by that kind's own schema when it runs the workload.
    sections: dict[str, Any] = {}
    # Expert routing of an MoE model (sim.core.moe): {distribution: uniform|zipf|histogram,
    # skew, histogram, capacity_factor}; None: uniform and dropless. A model property, not a kind's.
    moe: dict[str, Any] | None = None
    source: str = Field(default="", exclude=True)

    @classmethod
    def file_keys(cls) -> list[str]:
        """The top-level keys a workload file may write (sim.core.schema's did-you-mean reads them)."""
        return workload_keys()

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:   # the documented SimError in one line, not pydantic's own (an API trial)
            raise validation_error(exc, data.get("source") or f"{type(self).__name__}(...)", raw=data,
                                   model=type(self)) from None

    @model_validator(mode="before")
    @classmethod
    def _collect_sections(cls, raw: Any) -> Any:
        return collect_sections(raw, KIND_SECTIONS)

    def section(self, name: str, default: Any = None) -> Any:
        return self.sections.get(name, default)

    def with_section(self, name: str, value: Any) -> "Workload":
        return self.model_copy(update={"sections": {**self.sections, name: value}})

    def model_config_(self) -> ModelConfig:
        model = load_model(self.model, self.source or None)
        if self.moe is None:
            return model
        src = self.source or None
        if not model.is_moe:
            raise ConfigError(f"{where(src, 'moe')}{model.name} has no experts")
        return replace(model, expert_load=expert_load_from(self.moe, model.num_experts, src, "moe"))


def workload_keys() -> list[str]:
    """Top-level keys a workload file may have."""
    return [k for k in Workload.model_fields if k not in ("source", "sections")] + sorted(KIND_SECTIONS)


WORKLOAD_MAPPING = "a mapping of workload fields"


def workload_from_dict(raw: dict[str, Any], source: str) -> Workload:
    return validate_mapping(Workload, raw, source, WORKLOAD_MAPPING)


def load_workload(path: str | Path, overrides: dict[str, Any] | None = None) -> Workload:
    """Read a workload YAML; `overrides` maps dotted keys (optionally prefixed
    'workload.') to values."""
    path = Path(path)
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected {WORKLOAD_MAPPING} at the top level")
    if "serving" in raw:   # a serving file is a workload plus its request stream: another command runs it
        raise ConfigError(f"{path}: serving: a serving file (request stream, scheduler); run it with "
                          f"`sim serve {path} --hw ...`, or drop the section for one batch")
    for key, value in (overrides or {}).items():
        key = key.removeprefix("workload.")
        if key.split(".")[0] not in workload_keys():
            raise ConfigError(f"{path}: --set {key}: unknown workload field; fields: " + ", ".join(workload_keys()))
        set_workload_key(raw, key, value, str(path))
    with naming_sets(str(path), [k.removeprefix("workload.") for k in overrides or ()]):
        return workload_from_dict(raw, str(path))


def set_workload_key(raw: dict[str, Any], key: str, value: Any, source: str) -> None:
    """Set a dotted workload key (`batch`, `formats.weights`, `formats.overrides.L0.q_proj`) in a
    workload file's mapping, as `--set` and a sweep's axes do; a section it names may be new."""
    formats = raw.setdefault("formats", {}) if key.startswith("formats.overrides.") else None
    if isinstance(formats, dict) and isinstance(formats.setdefault("overrides", {}), dict):
        # Adding an op's override, not editing one; an op's name holds dots (L0.q_proj), so the
        # rest of the key is one glob, not a path.
        formats["overrides"][key.removeprefix("formats.overrides.")] = value
        return
    if "." in key:
        raw.setdefault(key.split(".")[0], {})
    set_dotted(raw, key, value, source=source)


def beyond_context(kv_len: int, model: ModelConfig) -> str | None:
    """What a context of `kv_len` tokens past the model's positions means, or None within them."""
    if kv_len <= model.max_position_embeddings:
        return None
    return f"beyond {model.name}'s max_position_embeddings ({model.max_position_embeddings}); results extrapolate the model"


def check_context(workload: Workload, model: ModelConfig) -> list[str]:
    """Warnings about the workload that do not stop a run."""
    notes = []
    total = workload.prompt_len + workload.gen_len
    if (beyond := beyond_context(total, model)) is not None:
        notes.append(f"kv_len reaches {total}, {beyond}")
    for n in notes:
        warnings.warn(n, stacklevel=2)
    return notes
