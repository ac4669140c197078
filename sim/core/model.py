"""Model configurations of the LLaMA family (and OPT, for FlexGen's results),
including Mixture-of-Experts variants (Mixtral, Qwen3-MoE, DeepSeek-V2) and the
decoder variants of sim.core.architectures (Mistral's sliding window, Qwen2's
q/k/v biases, Qwen3's q/k norm, Gemma-2's sandwich norms, alternating window and
soft-capping, Phi-3). Other Hugging Face `model_type`s are refused by name.

A model can be named by preset (`llama2-13b`), by a path to a Hugging Face
`config.json` (or a YAML file with the same keys), or given inline as a mapping.
"""

from __future__ import annotations

import difflib
import json
import numbers
from dataclasses import asdict, dataclass, fields as dc_fields
from pathlib import Path
from typing import Any, Callable

from sim.core.architectures import architecture
from sim.core.checkpoint_quant import CheckpointQuant, checkpoint_quant
from sim.core.errors import ConfigError, where
from sim.core.files import note_input
from sim.core.moe import ExpertLoad
from sim.core.model_presets import _presets, hub_preset, preset_mapping, preset_names  # noqa: F401 (re-exported)
from sim.core.schema import DuplicateKey, not_a_file, read_yaml, unique_json_keys

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
    # Mixture of Experts (0 experts: a dense model). Expert FFNs are SwiGLU like the dense one.
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0            # one expert's width; 0: intermediate_size (Mixtral)
    num_shared_experts: int = 0               # always-on experts (DeepSeek), each moe_intermediate_size wide
    shared_expert_intermediate_size: int = 0  # total shared width where given directly (Qwen2-MoE)
    first_dense_layers: int = 0               # leading layers with a dense MLP (DeepSeek first_k_dense_replace)
    expert_load: ExpertLoad = ExpertLoad()    # how tokens spread over experts (sim.core.moe)
    # Decoder variants (sim.core.architectures); the defaults are LLaMA's.
    qkv_bias: bool = False          # biases on q/k/v (Qwen2; LLaMA/Qwen3 attention_bias)
    o_bias: bool = False            # a bias on o_proj (LLaMA/Qwen3 attention_bias, not Qwen2)
    qk_norm: bool = False           # RMSNorm over each head of q and k before RoPE (Qwen3)
    post_norms: bool = False        # RMSNorm after attention and after the MLP too (Gemma-2)
    sliding_window: int = 0         # keys a query sees in a windowed layer, its own included; 0: all
    global_every: int = 0           # with a window: layers 2n+1.. (every n-th) attend to all keys (Gemma-2: 2)
    attn_softcap: float = 0.0       # cap * tanh(score / cap) on attention scores (Gemma-2: 50); 0: none
    final_softcap: float = 0.0      # the same on the logits (Gemma-2: 30)
    # The checkpoint's own quantization (config.json quantization_config), which costs nothing unless the workload's
    # formats say so (sim.core.checkpoint_quant; sim.apps.checks warns).
    checkpoint_quant: CheckpointQuant | None = None

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def is_moe_layer(self, layer: int) -> bool:
        return self.is_moe and layer >= self.first_dense_layers

    @property
    def expert_intermediate(self) -> int:
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def shared_intermediate(self) -> int:
        """Total width of the shared experts (one fused SwiGLU MLP), 0 if none."""
        return self.shared_expert_intermediate_size or self.num_shared_experts * self.expert_intermediate

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def window(self, layer: int) -> int:
        """The sliding window of layer `layer` in keys, 0 where it attends to all keys."""
        if not self.sliding_window or (self.global_every and (layer + 1) % self.global_every == 0):
            return 0
        return self.sliding_window

    def keys_read(self, layer: int, q_len: int, kv_len: int) -> int:
        """Cached keys that `q_len` new queries (the last `q_len` of `kv_len` keys) read in
        layer `layer`: all of them, or with a window W the last W + q_len - 1."""
        w = self.window(layer)
        return min(kv_len, w + q_len - 1) if w else kv_len

    @property
    def layers_of_each_kind(self) -> int:
        """The first layers that hold one layer of each kind: an MoE model's leading dense layers and one
        MoE layer (DeepSeek's first_k_dense_replace), else one layer."""
        return min(self.num_layers, self.first_dense_layers + 1) if self.is_moe else 1

    @property
    def layer_period(self) -> int:
        """Layers after which the pattern repeats (Gemma-2's local/global pair: 2)."""
        return self.global_every if self.sliding_window and self.global_every else 1

    def layer_params(self, layer: int = 0, active: bool = False) -> int:
        """Parameters of layer `layer`; `active`: only the k routed experts a token uses."""
        h, f = self.hidden_size, self.intermediate_size
        attn = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        if self.family == "opt":  # biases on every projection, LayerNorm weight + bias
            return attn + self.q_dim + 2 * self.kv_dim + h + 2 * h * f + f + h + 2 * 2 * h
        attn += ((self.q_dim + 2 * self.kv_dim) if self.qkv_bias else 0) + (h if self.o_bias else 0)
        attn += 2 * self.head_dim if self.qk_norm else 0     # one scale per head dim for q, one for k
        norms = (4 if self.post_norms else 2) * h
        if not self.is_moe_layer(layer):
            return attn + 3 * h * f + norms
        experts = self.experts_per_token if active else self.num_experts
        return (attn + h * self.num_experts + experts * 3 * h * self.expert_intermediate
                + 3 * h * self.shared_intermediate + norms)

    def embedding_params(self) -> int:
        """Token embedding (plus OPT's learned positions, which keep 2 offset rows)."""
        positions = (self.max_position_embeddings + 2) * self.hidden_size if self.family == "opt" else 0
        return self.vocab_size * self.hidden_size + positions

    def params(self, active: bool = False) -> int:
        """All parameters; `active`: those one token uses (the routed experts only)."""
        final_norm = (2 if self.family == "opt" else 1) * self.hidden_size
        lm_head = 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size
        dense = min(self.first_dense_layers, self.num_layers) if self.is_moe else self.num_layers
        layers = dense * self.layer_params(0, active) + (self.num_layers - dense) * self.layer_params(dense, active)
        return self.embedding_params() + layers + final_norm + lm_head

    def kv_bytes_per_token(self, kv_bytes_per_element: float) -> float:
        """K and V for one token across all layers, at `kv_bytes_per_element` bytes each (2: fp16/bf16, 1: fp8)."""
        if isinstance(kv_bytes_per_element, bool) or not isinstance(kv_bytes_per_element, numbers.Real):
            raise TypeError(f"kv_bytes_per_token: bytes per element, a number (2 for bf16), got {kv_bytes_per_element!r}")
        if not kv_bytes_per_element > 0:   # "fp8" had returned the string repeated 262,144 times (an API trial)
            raise ValueError(f"kv_bytes_per_token: bytes per element must be > 0, got {kv_bytes_per_element!r}")
        return 2 * self.num_layers * self.kv_dim * kv_bytes_per_element

    def to_dict(self) -> dict[str, Any]:
        """All fields; a dense model leaves out the (unused) MoE ones, and the decoder
        variants are left out where they keep LLaMA's default."""
        out = asdict(self)
        out.pop("checkpoint_quant")   # not a field a model file sets (the check reads it from config.json)
        if not self.is_moe:
            for key in _MOE_KEYS:
                out.pop(key)
        for key in _VARIANT_KEYS:
            if out[key] == ModelConfig.__dataclass_fields__[key].default:
                out.pop(key)
        return out


# model_types whose config class gives the routed experts a width of their own (moe_intermediate_size); Mixtral's
# experts are intermediate_size wide.
EXPERT_WIDTH_TYPES = ("qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3")
_MOE_KEYS = ("num_experts", "experts_per_token", "moe_intermediate_size", "num_shared_experts",
             "shared_expert_intermediate_size", "first_dense_layers", "expert_load")
_VARIANT_KEYS = ("qkv_bias", "o_bias", "qk_norm", "post_norms", "sliding_window", "global_every",
                 "attn_softcap", "final_softcap")
_FLOAT_KEYS = ("attn_softcap", "final_softcap")
_BOOL_KEYS = ("tie_word_embeddings", "qkv_bias", "o_bias", "qk_norm", "post_norms")


# Hugging Face key -> our field. Several HF names map to one field (OPT uses ffn_dim).
_HF_KEYS = {
    "hidden_size": "hidden_size", "intermediate_size": "intermediate_size", "ffn_dim": "intermediate_size",
    "num_hidden_layers": "num_layers", "num_attention_heads": "num_heads",
    "num_key_value_heads": "num_kv_heads", "head_dim": "head_dim", "vocab_size": "vocab_size",
    "max_position_embeddings": "max_position_embeddings", "tie_word_embeddings": "tie_word_embeddings",
    # MoE: Mixtral, Qwen2/3-MoE, DeepSeek-V2 names.
    "num_local_experts": "num_experts", "n_routed_experts": "num_experts",
    "num_experts_per_tok": "experts_per_token", "top_k": "experts_per_token",
    "n_shared_experts": "num_shared_experts", "first_k_dense_replace": "first_dense_layers",
    # Decoder variants (sim.core.architectures).
    "attn_logit_softcapping": "attn_softcap", "final_logit_softcapping": "final_softcap",
}
_OWN_KEYS = {f for f in ModelConfig.__dataclass_fields__} - {"name"}
_REQUIRED = ("hidden_size", "num_layers", "num_heads", "vocab_size")
MAX_LAYERS = 100_000   # the deepest published LLMs have ~100-200 layers; footprints and graphs are built per layer


def from_mapping(raw: dict[str, Any], name: str, source: str | None = None) -> ModelConfig:
    """Build a config from HF-style or sim-style keys. Unknown HF keys are ignored
    (config.json carries many that do not change cost); a `model_type` sim does not
    model, or a feature it does not, is refused (sim.core.architectures); values are
    checked, and errors name the key as the user wrote it."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where(source, 'model')}expected a mapping of model fields, got {type(raw).__name__}")
    arch = architecture(raw, source)
    given = {**arch.defaults, **{k: v for k, v in raw.items() if k not in arch.ignores}}
    fields: dict[str, Any] = {}
    named: dict[str, str] = {}        # our field -> the key the user wrote
    for key, value in given.items():
        target = _HF_KEYS.get(key) or (key if key in _OWN_KEYS else None)
        if target is not None and value is not None:
            fields[target], named[target] = value, key
    bias = given.get("attention_bias")
    if bias is not None:   # "false" is truthy: it must not add biases
        _require_switch(bias, where(source, "model.attention_bias"))
    if bias:   # LLaMA, Qwen3: a bias on q, k, v and o
        fields.update(qkv_bias=True, o_bias=True)
    fields.update(arch.fixed)
    fields["family"] = arch.family

    hf_style = "model_type" in raw or bool(set(raw) & set(_HF_KEYS) - _OWN_KEYS)

    def key_of(field: str) -> str:
        """The user's name for `field`: theirs where given, else HF's where the file is HF-style."""
        hf = next((k for k, v in _HF_KEYS.items() if v == field), field)
        return named.get(field) or (hf if hf_style else field)

    # A Hugging Face config.json (model_type) always states its MLP width (save_pretrained writes every key); one
    # without it would get its config class's default, the width of the class's reference model, not this one's
    # (LlamaConfig 11008, MistralConfig 14336): no guess. A minimal inline mapping keeps 4 x hidden_size. The
    # same for the expert width of the config classes that have one of their own (Qwen3MoeConfig 768, not the
    # dense intermediate_size a missing key fell back to: a 235B model read as 1.8T).
    need = (*_REQUIRED, *(("intermediate_size",) if "model_type" in raw else ()),
            *(("moe_intermediate_size",) if raw.get("model_type") in EXPERT_WIDTH_TYPES and fields.get("num_experts")
              else ()), *(("experts_per_token",) if fields.get("num_experts") else ()))   # had read "got 0" (a trial)
    missing = [key_of(k) for k in need if k not in fields]
    if missing:
        raise ConfigError(f"{where(source, 'model')}missing {', '.join(missing)}")
    _check_values(fields, key_of, source)
    _check_moe(fields, source)
    h, heads = fields["hidden_size"], fields["num_heads"]
    if "head_dim" not in fields and h % heads:  # h // heads would silently drop columns (or be 0)
        raise ConfigError(f"{where(source, 'model.' + key_of('hidden_size'))}{h} is not divisible by {heads} "
                          "attention heads; give head_dim explicitly")
    fields.setdefault("num_kv_heads", heads)
    fields.setdefault("head_dim", h // heads)
    fields.setdefault("intermediate_size", 4 * h)
    fields.setdefault("max_position_embeddings", 4096)
    # HF's default is tied; LLaMA configs say false explicitly, OPT configs leave it out.
    fields.setdefault("tie_word_embeddings", fields["family"] == "opt")
    if heads % fields["num_kv_heads"]:
        raise ConfigError(f"{where(source, 'model.' + key_of('num_kv_heads'))}{fields['num_kv_heads']} does not "
                          f"divide {heads} attention heads")
    if isinstance(fields.get("expert_load"), dict):
        fields["expert_load"] = expert_load_from(fields["expert_load"], fields.get("num_experts", 0), source)
    return ModelConfig(name=name, checkpoint_quant=checkpoint_quant(raw), **fields)


def _check_values(fields: dict[str, Any], key_of: Callable[[str], str], source: str | None) -> None:
    """Each value of the right type and range (floats made float), named by the user's key."""
    for key, value in fields.items():
        at = where(source, "model." + key_of(key))
        if key in ("family", "expert_load"):
            continue
        if key in _BOOL_KEYS:
            _require_switch(value, at)   # "no" is truthy; a typo must not tie the head
        elif key in _FLOAT_KEYS:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"{at}must be a non-negative number, got {value!r}")
            fields[key] = float(value)
        else:
            low = 0 if key in _MOE_KEYS or key in _VARIANT_KEYS else 1   # MoE counts may be 0
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                kind = "a non-negative" if low == 0 else "a positive"
                raise ConfigError(f"{at}must be {kind} integer, got {value!r}")
            if key == "num_layers" and value > MAX_LAYERS:   # a typo: per-layer lists would fill the memory
                raise ConfigError(f"{at}{value} layers: more than {MAX_LAYERS} is no model")


def _require_switch(value: Any, at: str) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{at}must be true or false, got {value!r}")


def _check_moe(fields: dict[str, Any], source: str | None) -> None:
    experts, k = fields.get("num_experts", 0), fields.get("experts_per_token", 0)
    if experts and not 0 < k <= experts:
        raise ConfigError(f"{where(source, 'model.num_experts_per_tok')}must be between 1 and the "
                          f"{experts} experts, got {k}")
    if fields.get("first_dense_layers", 0) > fields["num_layers"]:
        raise ConfigError(f"{where(source, 'model.first_k_dense_replace')}{fields['first_dense_layers']} dense "
                          f"layers but the model has {fields['num_layers']}")


def expert_load_from(raw: dict[str, Any], num_experts: int, source: str | None,
                     key: str = "model.expert_load") -> ExpertLoad:
    """An ExpertLoad from a mapping {distribution, skew, histogram, capacity_factor}, checked."""
    allowed = {f.name for f in dc_fields(ExpertLoad)}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ConfigError(f"{where(source, key + '.' + unknown[0])}unknown key; keys: {', '.join(sorted(allowed))}")
    dist = raw.get("distribution", "uniform")
    if dist not in ("uniform", "zipf", "histogram"):
        raise ConfigError(f"{where(source, key + '.distribution')}must be uniform, zipf or histogram, got {dist!r}")
    hist = tuple(float(x) for x in raw.get("histogram") or ())
    if dist == "histogram" and (len(hist) != num_experts or min(hist, default=-1) < 0 or sum(hist) <= 0):
        raise ConfigError(f"{where(source, key + '.histogram')}needs {num_experts} non-negative counts "
                          f"(one per expert, not all 0), got {len(hist)}")
    skew, cap = float(raw.get("skew", 1.0)), raw.get("capacity_factor")
    if skew < 0:
        raise ConfigError(f"{where(source, key + '.skew')}must be >= 0, got {skew}")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float)) or cap <= 0):
        raise ConfigError(f"{where(source, key + '.capacity_factor')}must be a positive number, got {cap!r}")
    return ExpertLoad(dist, skew, hist, None if cap is None else float(cap))


def _model_name(raw: Any, path: Path) -> str:
    """What the file says the model is: `_name_or_path`'s last part, `name`, the file's own
    name unless it is the generic config.json, else its model_type; never the folder, which
    is often a download cache or a temporary directory."""
    said = (raw.get("_name_or_path") or raw.get("name")) if isinstance(raw, dict) else None
    if said:
        return str(said).rstrip("/").split("/")[-1]
    if path.stem != "config":
        return path.stem
    kind = raw.get("model_type") if isinstance(raw, dict) else None
    return str(kind or "model")


def model_path(spec: str | dict | None, source: str | None = None) -> Path | None:
    """The file a model reference names (a config.json or YAML, a folder's config.json), or None for a preset or an
    inline mapping. A relative path is looked up next to `source` (the workload file) first."""
    if spec is None or isinstance(spec, dict) or str(spec).lower() in _presets() or hub_preset(str(spec)):
        return None
    path = Path(str(spec))
    if source and not path.is_absolute():  # the workload's own folder first, then the current one
        candidate = Path(source).parent / path
        path = candidate if candidate.exists() else path
    inside = path / "config.json"   # a Hugging Face snapshot folder names its config (a trial)
    return inside if inside.is_file() else path if path.suffix in (".json", ".yaml", ".yml") or path.exists() else None


def check_typos(raw: Any, source: str | None) -> None:
    """A key of a hand-written model (an inline mapping or a YAML file) one slip from a key sim reads
    (num_key_value_head for num_key_value_heads) is refused: ignored, it would silently change the model
    (MHA for GQA). Other unknown keys pass, as config.json's many cost-free ones do; so does a longer key
    that holds a known one (Qwen2's use_sliding_window beside sliding_window)."""
    if not isinstance(raw, dict):
        return
    known = set(_HF_KEYS) | _OWN_KEYS | {"name", "model_type", "attention_bias"}
    for key in raw:
        if not isinstance(key, str) or key in known:
            continue
        near = difflib.get_close_matches(key, known, n=1, cutoff=0.85)
        if near and near[0] not in key:
            raise ConfigError(f"{where(source, 'model.' + key)}unknown key; did you mean {near[0]}?")


def load_model(spec: str | Path | dict[str, Any], source: str | None = None) -> ModelConfig:
    """A preset name, a path to config.json / .yaml, or an inline mapping."""
    if isinstance(spec, dict):
        check_typos(spec, source)
        return from_mapping(spec, str(spec.get("name", "inline")), source)
    text = str(spec)
    if not text.strip():   # Path('') is the working folder: the message had read "is a directory" (a trial)
        raise ConfigError(f"{where(source, 'model')}the model name is empty; give a preset name "
                          "(`sim model list`) or a path to config.json")
    presets = _presets()
    if text.lower() in presets:
        return from_mapping(presets[text.lower()], text.lower())
    if (hub := hub_preset(text)) is not None and not Path(text).exists():   # a local folder of that name wins
        return from_mapping(presets[hub], hub)
    path = model_path(text, source)
    if path is not None:
        if not path.is_file():
            problem = not_a_file(path, "not found", "a config.json or YAML file")
            raise ConfigError(f"{where(source, 'model')}model config file {text!r}{' ' if problem == 'not found' else ': '}"
                              f"{problem}")
        note_input(path)  # no output of this command may replace it
        if path.suffix == ".json":
            try:
                raw = json.loads(path.read_bytes(), object_pairs_hook=unique_json_keys)
            except DuplicateKey as exc:   # as a YAML model file's (json keeps the last one silently: a trial)
                raise ConfigError(f"{path}: duplicate key {exc.args[0]!r}: give each key once") from None
            except UnicodeDecodeError:
                raise ConfigError(f"{path}: not valid JSON: binary data") from None
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}: not valid JSON: {str(exc).splitlines()[0]}") from None
            except RecursionError:
                raise ConfigError(f"{path}: not valid JSON: nested too deeply") from None
        else:
            raw = read_yaml(path)
            if isinstance(raw, dict) and "model" in raw and "hidden_size" not in raw:   # a workload, not a model
                raise ConfigError(f"{path}: a workload file (its `model:` names the model), not a model config; "
                                  "give that model, or a config.json / model YAML")
            check_typos(raw, str(path))
        return from_mapping(raw, _model_name(raw, path), str(path))
    raise ConfigError(f"{where(source, 'model')}unknown model {text!r}; presets: {', '.join(preset_names())}, or a path to config.json")
