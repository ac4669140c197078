"""Model configurations of the LLaMA family (and OPT, for FlexGen's results).

A model can be named by preset (`llama2-13b`), by a path to a Hugging Face
`config.json` (or a YAML file with the same keys), or given inline as a mapping.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from sim.core.errors import ConfigError, where
from sim.core.schema import read_yaml

FAMILIES = ("llama", "opt")


@dataclass(frozen=True)
class ModelConfig:
    name: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    family: str = "llama"

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def layer_params(self) -> int:
        h, f = self.hidden_size, self.intermediate_size
        attn = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        if self.family == "opt":  # biases on every projection, LayerNorm weight + bias
            return attn + self.q_dim + 2 * self.kv_dim + h + 2 * h * f + f + h + 2 * 2 * h
        return attn + 3 * h * f + 2 * h

    def embedding_params(self) -> int:
        """Token embedding (plus OPT's learned positions, which keep 2 offset rows)."""
        positions = (self.max_position_embeddings + 2) * self.hidden_size if self.family == "opt" else 0
        return self.vocab_size * self.hidden_size + positions

    def params(self) -> int:
        final_norm = (2 if self.family == "opt" else 1) * self.hidden_size
        lm_head = 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size
        return self.embedding_params() + self.num_layers * self.layer_params() + final_norm + lm_head

    def kv_bytes_per_token(self, kv_bytes_per_element: float) -> float:
        """K and V for one token across all layers."""
        return 2 * self.num_layers * self.kv_dim * kv_bytes_per_element

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Hugging Face key -> our field. Several HF names map to one field (OPT uses ffn_dim).
_HF_KEYS = {
    "hidden_size": "hidden_size", "intermediate_size": "intermediate_size", "ffn_dim": "intermediate_size",
    "num_hidden_layers": "num_layers", "num_attention_heads": "num_heads",
    "num_key_value_heads": "num_kv_heads", "head_dim": "head_dim", "vocab_size": "vocab_size",
    "max_position_embeddings": "max_position_embeddings", "tie_word_embeddings": "tie_word_embeddings",
}
_OWN_KEYS = {f for f in ModelConfig.__dataclass_fields__} - {"name"}
_REQUIRED = ("hidden_size", "num_layers", "num_heads", "vocab_size")


@cache
def _presets() -> dict[str, dict[str, Any]]:
    text = resources.files("sim.core").joinpath("data/models.yaml").read_text()
    return yaml.safe_load(text)


def preset_names() -> list[str]:
    return sorted(_presets())


def from_mapping(raw: dict[str, Any], name: str, source: str | None = None) -> ModelConfig:
    """Build a config from HF-style or sim-style keys. Unknown HF keys are ignored
    (config.json carries many that do not change cost); values are checked."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where(source, 'model')}expected a mapping of model fields, got {type(raw).__name__}")
    fields: dict[str, Any] = {}
    for key, value in raw.items():
        target = _HF_KEYS.get(key) or (key if key in _OWN_KEYS else None)
        if target is not None and value is not None:
            fields[target] = value
    family = str(raw.get("family") or raw.get("model_type") or "llama").lower()
    fields["family"] = "opt" if family == "opt" else "llama"
    missing = [k for k in _REQUIRED if k not in fields]
    if missing:
        raise ConfigError(f"{where(source, 'model')}missing {', '.join(missing)}")
    tie = fields.get("tie_word_embeddings")
    if tie is not None and not isinstance(tie, bool):  # "no" is truthy; a typo must not tie the head
        raise ConfigError(f"{where(source, 'model.tie_word_embeddings')}must be true or false, got {tie!r}")
    for key, value in fields.items():
        if key in ("family", "tie_word_embeddings"):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{where(source, 'model.' + key)}must be a positive integer, got {value!r}")
    h, heads = fields["hidden_size"], fields["num_heads"]
    if "head_dim" not in fields and h % heads:  # h // heads would silently drop columns (or be 0)
        raise ConfigError(f"{where(source, 'model.hidden_size')}{h} is not divisible by {heads} attention heads; "
                          "give head_dim explicitly")
    fields.setdefault("num_kv_heads", heads)
    fields.setdefault("head_dim", h // heads)
    fields.setdefault("intermediate_size", 4 * h)
    fields.setdefault("max_position_embeddings", 4096)
    # HF's default is tied; LLaMA configs say false explicitly, OPT configs leave it out.
    fields.setdefault("tie_word_embeddings", fields["family"] == "opt")
    if heads % fields["num_kv_heads"]:
        raise ConfigError(f"{where(source, 'model.num_key_value_heads')}{fields['num_kv_heads']} does not divide {heads} attention heads")
    return ModelConfig(name=name, **fields)


def load_model(spec: str | Path | dict[str, Any], source: str | None = None) -> ModelConfig:
    """A preset name, a path to config.json / .yaml, or an inline mapping."""
    if isinstance(spec, dict):
        return from_mapping(spec, str(spec.get("name", "inline")), source)
    text = str(spec)
    presets = _presets()
    if text.lower() in presets:
        return from_mapping(presets[text.lower()], text.lower())
    path = Path(text)
    if source and not path.is_absolute():  # the workload's own folder first, then the current one
        candidate = Path(source).parent / path
        path = candidate if candidate.exists() else path
    if path.suffix in (".json", ".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError(f"{where(source, 'model')}model config file {text!r} not found")
        if path.suffix == ".json":
            try:
                raw = json.loads(path.read_bytes())
            except UnicodeDecodeError:
                raise ConfigError(f"{path}: not valid JSON: binary data") from None
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}: not valid JSON: {str(exc).splitlines()[0]}") from None
        else:
            raw = read_yaml(path)
        named = (raw.get("_name_or_path") or raw.get("name")) if isinstance(raw, dict) else None
        name = named or path.parent.name or path.stem
        return from_mapping(raw, str(name).split("/")[-1], str(path))
    raise ConfigError(f"{where(source, 'model')}unknown model {text!r}; presets: {', '.join(preset_names())}, or a path to config.json")
