#!/usr/bin/env python3
"""Capture a PyTorch profiler trace of a LLaMA-shaped model, op by op.

The model is built from any config the simulator accepts (`--model` preset
name or path to a Hugging Face config.json, via `sim.core.model.load_model`), with
random weights, in plain torch. Every logical op is wrapped in a
`torch.profiler.record_function` named exactly as `sim/core/lowering.py` names it
(`embed`, `L{i}.attn_norm`, ..., `final_norm`, `lm_head`), and every step in
one named `step{j}.prefill` / `step{j}.decode`, so a trace lines up with the
simulator's op graph of the same step.

One prefill of `--batch` x `--prompt` tokens and `--decode-steps` decode steps
run under the profiler, after one untraced warm-up prefill + decode at the same
shapes. Written beside each other (PREFIX from `--out`):

  PREFIX.trace.json.gz  Chrome trace (profiler export, gzip-compressed; its
                        traceName is PREFIX.trace.json, no machine path)
  PREFIX.meta.json      machine, software, model config and run shape (path
                        arguments relative to the repository, or file names)
  PREFIX.ops.csv        one row per op per step: step, phase, op, layer,
                        cpu_time_us, device_time_us, batch, q_len, kv_len

On CPU the record_function range is the op's time. On CUDA, cpu_time_us is the
host-side (launch) time of the range and device_time_us the summed duration of
the kernels launched inside it (the profiler correlates them).

    python scripts/capture_trace.py --model tinyllama-1.1b --threads 2 \
        --prompt 128 --decode-steps 16 --out traces/cpu/
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sim.apps.trace.scrub import json_name, portable_argv, scrub_chrome_text, write_gzip  # noqa: E402
from sim.core.errors import ConfigError  # noqa: E402
from sim.core.model import ModelConfig, load_model  # noqa: E402

DTYPES = ("fp32", "bf16", "fp16")
# Projection weight formats (`--weights`): the layers' seven linears; embed and lm_head stay in --dtype.
WEIGHT_FORMATS = ("fp8_e4m3", "int4")
INT4_GROUP = 128
CSV_COLUMNS = ("step", "phase", "op", "layer", "cpu_time_us", "device_time_us", "batch", "q_len", "kv_len")
LAYER_OPS = ("attn_norm", "q_proj", "k_proj", "v_proj", "rope", "kv_append", "qk", "softmax", "av",
             "o_proj", "attn_residual", "mlp_norm", "gate_proj", "up_proj", "act", "down_proj", "mlp_residual")
FLASH_LAYER_OPS = ("attn_norm", "q_proj", "k_proj", "v_proj", "rope", "kv_append", "attention",
                   "o_proj", "attn_residual", "mlp_norm", "gate_proj", "up_proj", "act", "down_proj", "mlp_residual")
_STEP_RE = re.compile(r"^step(\d+)\.(prefill|decode)$")


def expected_ops(num_layers: int, flash: bool = False) -> list[str]:
    """Op names of one step, in execution order (same as sim.core.lowering)."""
    per_layer = FLASH_LAYER_OPS if flash else LAYER_OPS
    return ["embed"] + [f"L{i}.{o}" for i in range(num_layers) for o in per_layer] + ["final_norm", "lm_head"]


# --------------------------------------------------------------------------- model

class TinyLlama:
    """LLaMA forward in plain torch: RMSNorm, bias-free linears, RoPE, GQA,
    preallocated KV cache, softmax attention (or SDPA), SiLU-gated MLP."""

    def __init__(self, cfg: ModelConfig, layers: int, batch: int, max_len: int, dtype, device, flash: bool,
                 seed: int = 0, weights: str | None = None):
        import torch
        self.torch = torch
        self.cfg, self.layers, self.batch, self.max_len = cfg, layers, batch, max_len
        self.dtype, self.device, self.flash = dtype, device, flash
        self.eps = 1e-5
        h, f, d = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
        KV = cfg.num_kv_heads
        gen = torch.Generator(device=device).manual_seed(seed)

        def w(out_dim: int, in_dim: int, std: float | None = None):
            # Uniform with variance 1/in_dim, so activations stay O(1); filled in place.
            a = math.sqrt(3.0) * (std if std is not None else 1.0 / math.sqrt(in_dim))
            return torch.empty(out_dim, in_dim, dtype=dtype, device=device).uniform_(-a, a, generator=gen)

        def ones(n: int):
            return torch.ones(n, dtype=dtype, device=device)

        def proj(out_dim: int, in_dim: int):
            return quantized_linear(w(out_dim, in_dim), weights) if weights else w(out_dim, in_dim)

        self.embed = w(cfg.vocab_size, h, std=1.0)
        self.blocks = []
        for _ in range(layers):
            self.blocks.append(dict(
                attn_norm=ones(h), q=proj(cfg.q_dim, h), k=proj(cfg.kv_dim, h), v=proj(cfg.kv_dim, h),
                o=proj(h, cfg.q_dim), mlp_norm=ones(h), gate=proj(f, h), up=proj(f, h), down=proj(h, f),
                k_cache=torch.zeros(batch, KV, max_len, d, dtype=dtype, device=device),
                v_cache=torch.zeros(batch, KV, max_len, d, dtype=dtype, device=device)))
        self.final_norm = ones(h)
        self.lm_head = self.embed if cfg.tie_word_embeddings else w(cfg.vocab_size, h)
        # RoPE tables (theta 10000, rotate-half convention as in HF LLaMA).
        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        ang = torch.outer(torch.arange(max_len, dtype=torch.float32), inv)
        ang = torch.cat([ang, ang], dim=-1)
        self.cos = ang.cos().to(dtype=dtype, device=device)
        self.sin = ang.sin().to(dtype=dtype, device=device)
        self.masks: dict[tuple[int, int], object] = {}

    def causal_mask(self, q_len: int, kv_len: int):
        """True where a query may NOT attend (built once per shape, outside the ops)."""
        key = (q_len, kv_len)
        if key not in self.masks:
            torch = self.torch
            qpos = torch.arange(kv_len - q_len, kv_len, device=self.device)[:, None]
            kpos = torch.arange(kv_len, device=self.device)[None, :]
            self.masks[key] = kpos > qpos
        return self.masks[key]

    def _rms(self, x, weight):
        torch = self.torch
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.to(x.dtype) * weight

    def step(self, tokens, pos: int):
        """tokens (B, q_len) starting at position `pos`; returns logits (B, vocab)."""
        torch = self.torch
        F = torch.nn.functional
        rf = torch.profiler.record_function
        cfg = self.cfg
        B, q = tokens.shape
        kv = pos + q
        H, KV, d, h = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.hidden_size
        G = H // KV
        mask = self.causal_mask(q, kv) if q > 1 else None
        cos, sin = self.cos[pos:kv], self.sin[pos:kv]  # (q, d)
        scale = 1.0 / math.sqrt(d)

        with rf("embed"):
            x = F.embedding(tokens.reshape(-1), self.embed)  # (T, h)
        for i, p in enumerate(self.blocks):
            L = f"L{i}"
            with rf(f"{L}.attn_norm"):
                xn = self._rms(x, p["attn_norm"])
            with rf(f"{L}.q_proj"):
                qh = _linear(F, xn, p["q"])
            with rf(f"{L}.k_proj"):
                kh = _linear(F, xn, p["k"])
            with rf(f"{L}.v_proj"):
                vh = _linear(F, xn, p["v"])
            with rf(f"{L}.rope"):
                qh = qh.view(B, q, H, d).transpose(1, 2)  # (B, H, q, d)
                kh = kh.view(B, q, KV, d).transpose(1, 2)
                qh = qh * cos + _rotate_half(torch, qh) * sin
                kh = kh * cos + _rotate_half(torch, kh) * sin
            with rf(f"{L}.kv_append"):
                p["k_cache"][:, :, pos:kv].copy_(kh)
                p["v_cache"][:, :, pos:kv].copy_(vh.view(B, q, KV, d).transpose(1, 2))
            k_all, v_all = p["k_cache"][:, :, :kv], p["v_cache"][:, :, :kv]  # views (B, KV, kv, d)
            if self.flash:
                with rf(f"{L}.attention"):
                    ctx = F.scaled_dot_product_attention(qh, k_all, v_all, is_causal=q > 1, enable_gqa=G > 1)
                    ctx = ctx.transpose(1, 2).reshape(B * q, H * d)
            else:
                with rf(f"{L}.qk"):
                    # GQA by reshaping: the G query heads sharing a KV head become extra rows.
                    scores = torch.matmul(qh.reshape(B, KV, G * q, d), k_all.transpose(-1, -2))
                    scores = scores.view(B, H, q, kv)
                with rf(f"{L}.softmax"):
                    scores = scores * scale
                    if mask is not None:
                        scores = scores.masked_fill(mask, float("-inf"))
                    probs = torch.softmax(scores, dim=-1)
                with rf(f"{L}.av"):
                    ctx = torch.matmul(probs.view(B, KV, G * q, kv), v_all)  # (B, KV, G*q, d)
                    ctx = ctx.view(B, H, q, d).transpose(1, 2).reshape(B * q, H * d)
            with rf(f"{L}.o_proj"):
                o = _linear(F, ctx, p["o"])
            with rf(f"{L}.attn_residual"):
                x = x + o
            with rf(f"{L}.mlp_norm"):
                xn = self._rms(x, p["mlp_norm"])
            with rf(f"{L}.gate_proj"):
                gate = _linear(F, xn, p["gate"])
            with rf(f"{L}.up_proj"):
                up = _linear(F, xn, p["up"])
            with rf(f"{L}.act"):
                a = F.silu(gate) * up
            with rf(f"{L}.down_proj"):
                m = _linear(F, a, p["down"])
            with rf(f"{L}.mlp_residual"):
                x = x + m
        with rf("final_norm"):
            xn = self._rms(x, self.final_norm)
        with rf("lm_head"):
            last = xn.view(B, q, h)[:, -1]  # only each sequence's last token
            logits = F.linear(last, self.lm_head)
        return logits


def _linear(F, x, weight):
    """x @ weight.T: a plain tensor through F.linear, a quantized weight through its own kernel."""
    return F.linear(x, weight) if hasattr(weight, "dim") else weight(x)


class Fp8Linear:
    """W8A8 FP8 as a per-tensor-scaled deployment runs it: e4m3 weights with one scale, the activation cast
    to e4m3 by one elementwise kernel (a static unit scale: these activations are O(1), far inside e4m3's
    +-448, so no amax pass), then one torch._scaled_mm with a 16-bit output."""

    def __init__(self, w):
        import torch
        self.torch = torch
        self.w_scale = (w.abs().amax().float() / 448.0).clamp(min=1e-12)
        self.wq_t = (w.float() / self.w_scale).to(torch.float8_e4m3fn).t()   # column-major (in, out), as required
        self.a_scale = torch.ones((), dtype=torch.float32, device=w.device)
        self.out_dtype = w.dtype

    def __call__(self, x):
        torch = self.torch
        return torch._scaled_mm(x.to(torch.float8_e4m3fn), self.wq_t, scale_a=self.a_scale, scale_b=self.w_scale,
                                out_dtype=self.out_dtype)


class Int4Linear:
    """W4A16 as torchao's int4 weight-only path runs it: asymmetric 4-bit weights in groups of 128 along K,
    packed for tinygemm (aten._weight_int4pack_mm; bf16 activations), one kernel per projection."""

    def __init__(self, w):
        import torch
        self.torch = torch
        n, k = w.shape
        g = w.float().reshape(n, k // INT4_GROUP, INT4_GROUP)
        lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
        scale = ((hi - lo) / 15).clamp(min=1e-6)
        zero = lo + 8 * scale                                   # tinygemm dequantizes (q - 8) * scale + zero
        q = ((g - lo) / scale).round().clamp(0, 15).to(torch.int32).reshape(n, k)
        self.cuda = w.is_cuda
        if self.cuda:
            self.packed = torch.ops.aten._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8), 8)
        else:
            self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 8)
        self.scales_zeros = torch.stack([scale, zero], -1).reshape(n, k // INT4_GROUP, 2).transpose(0, 1) \
            .contiguous().to(w.dtype)

    def __call__(self, x):
        aten = self.torch.ops.aten
        mm = aten._weight_int4pack_mm if self.cuda else aten._weight_int4pack_mm_for_cpu
        return mm(x, self.packed, INT4_GROUP, self.scales_zeros)


def quantized_linear(w, fmt: str):
    return {"fp8_e4m3": Fp8Linear, "int4": Int4Linear}[fmt](w)


def _rotate_half(torch, x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


# --------------------------------------------------------------------------- run

def _sync(torch, device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run_steps(model: TinyLlama, prompt: int, decode_steps: int, device: str, seed: int, label: bool):
    """Prefill + decode_steps decode steps. Returns [(step, phase, q_len, kv_len)]."""
    torch = model.torch
    gen = torch.Generator(device="cpu").manual_seed(seed)
    tokens = torch.randint(0, model.cfg.vocab_size, (model.batch, prompt), generator=gen).to(device)
    shapes = []
    pos = 0
    for j in range(decode_steps + 1):
        phase = "prefill" if j == 0 else "decode"
        q = tokens.shape[1]
        shapes.append((j, phase, q, pos + q))
        if label:
            with torch.profiler.record_function(f"step{j}.{phase}"):
                logits = model.step(tokens, pos)
                tokens = logits.argmax(-1, keepdim=True)  # greedy next token
                _sync(torch, device)
        else:
            logits = model.step(tokens, pos)
            tokens = logits.argmax(-1, keepdim=True)
            _sync(torch, device)
        pos += q
    return shapes


def ops_table(events, shapes, batch: int) -> list[dict]:
    """One row per op per step from the profiler's per-event list."""
    from torch.autograd import DeviceType
    op_names = set(LAYER_OPS) | {"attention"}
    cpu = [e for e in events if e.device_type == DeviceType.CPU]
    steps = []
    for e in cpu:
        mm = _STEP_RE.match(e.name)
        if mm:
            steps.append((e.time_range.start, e.time_range.end, int(mm.group(1)), mm.group(2), e.thread))
    steps.sort()
    shape_of = {s[0]: s for s in shapes}
    rows = []
    for e in cpu:
        name = e.name
        if name in ("embed", "final_norm", "lm_head"):
            layer = ""
        else:
            mm = re.match(r"^L(\d+)\.(\w+)$", name)
            if not mm or mm.group(2) not in op_names:
                continue
            layer = int(mm.group(1))
        start, end = e.time_range.start, e.time_range.end
        # Same thread as the step: a GPU-side copy of the annotation never counts.
        owner = [s for s in steps if s[0] <= start and end <= s[1] and s[4] == e.thread]
        if not owner:
            continue  # an op outside any traced step (should not happen)
        j, phase = owner[-1][2], owner[-1][3]
        _, _, q_len, kv_len = shape_of[j]
        rows.append(dict(step=j, phase=phase, op=name, layer=layer,
                         cpu_time_us=round(e.time_range.elapsed_us(), 3),
                         device_time_us=round(float(e.device_time_total), 3),
                         batch=batch, q_len=q_len, kv_len=kv_len, _t=start))
    rows.sort(key=lambda r: (r["step"], r["_t"]))
    for r in rows:
        del r["_t"]
    step_rows = []
    for start, end, j, phase, _ in steps:
        step_rows.append(dict(step=j, phase=phase, wall_us=round(end - start, 3)))
    return rows, step_rows


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


def _nvidia_driver() -> str | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "model"


def default_name(cfg: ModelConfig, layers: int, args) -> str:
    parts = [_safe(cfg.name), f"L{layers}", args.dtype + (f"-w{args.weights}" if args.weights else ""),
             f"b{args.batch}", f"p{args.prompt}",
             f"d{args.decode_steps}", args.device] + (["flash"] if args.flash else [])
    return "_".join(parts)


def output_paths(out: str | None, name: str, device: str) -> tuple[Path, Path]:
    """(PREFIX, trace file). A directory (existing, or ending in '/') gets the
    automatic deterministic name; a '.json.gz' path is the trace file itself,
    with meta/ops beside it ('x.json.gz' or 'x.trace.json.gz' -> 'x.meta.json');
    anything else is the prefix."""
    if out is None:
        prefix = ROOT / "traces" / device / name
    elif out.endswith(("/", os.sep)) or Path(out).is_dir():
        prefix = Path(out) / name
    elif out.endswith(".json.gz"):
        stem = out[: -len(".json.gz")]
        stem = stem[: -len(".trace")] if stem.endswith(".trace") else stem
        return Path(stem), Path(out)
    else:
        prefix = Path(out)
    return prefix, prefix.with_name(prefix.name + ".trace.json.gz")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="preset name or path to a HF config.json (see sim.core.model)")
    ap.add_argument("--layers", type=int, default=None, help="keep only the first K layers")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--dtype", choices=DTYPES, default="fp32")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--decode-steps", type=int, default=16)
    ap.add_argument("--flash", action="store_true",
                    help="F.scaled_dot_product_attention as one `attention` op instead of qk/softmax/av")
    ap.add_argument("--weights", choices=WEIGHT_FORMATS, default=None,
                    help="quantize the layers' projection weights (fp8_e4m3: W8A8 torch._scaled_mm; int4: W4A16 "
                         "tinygemm, group 128); embed and lm_head stay in --dtype. Needs --dtype bf16")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--out", default=None,
                    help="path prefix, a .json.gz trace file (meta/ops beside it), or a directory "
                         "(automatic name; default traces/<device>/)")
    ap.add_argument("--no-shapes", action="store_true", help="don't record input shapes in the trace")
    ap.add_argument("--no-trace", action="store_true", help="write only meta.json and ops.csv")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true", help="replace a capture already at the output prefix")
    args = ap.parse_args(argv)
    for key in ("batch", "prompt"):
        if getattr(args, key) < 1:
            ap.error(f"--{key.replace('_', '-')} must be >= 1")
    if args.decode_steps < 0:
        ap.error("--decode-steps must be >= 0")
    if args.weights and args.dtype != "bf16":
        ap.error(f"--weights {args.weights} needs --dtype bf16 (the quantized kernels' activation format)")
    return args


def _refuse(message: str) -> None:
    """A user's mistake: one line and exit status 2, as argparse's own refusals (a trial: an unknown --model printed
    a traceback, and --layers 0 exited 1 where --batch 0 exited 2)."""
    print(f"capture_trace: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv=None) -> dict:
    args = parse_args(argv)
    import torch

    try:
        cfg = load_model(args.model)
    except ConfigError as exc:
        _refuse(f"--model {str(exc).removeprefix('model: ')}")
    if cfg.family != "llama":
        _refuse(f"only the llama family is modelled here, {cfg.name} is {cfg.family}")
    layers = cfg.num_layers if args.layers is None else args.layers
    if not 1 <= layers <= cfg.num_layers:
        _refuse(f"--layers must be in 1..{cfg.num_layers}")
    if args.device == "cuda" and not torch.cuda.is_available():
        _refuse("--device cuda but torch.cuda.is_available() is False")
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    max_len = args.prompt + args.decode_steps + 1
    prefix, trace_path = output_paths(args.out, default_name(cfg, layers, args), args.device)
    taken = [q for q in (trace_path, prefix.with_name(prefix.name + ".ops.csv"),
                         prefix.with_name(prefix.name + ".meta.json")) if q.exists()]
    if taken and not args.force:   # the default --out is the repository's traces/: never replace a capture unasked
        _refuse(f"{taken[0]} exists (a capture of this shape): --force replaces it, --out writes elsewhere")
    prefix.parent.mkdir(parents=True, exist_ok=True)

    load_before = _loadavg()
    t0 = time.perf_counter()
    model = TinyLlama(cfg, layers, args.batch, max_len, dtype, args.device, args.flash, seed=args.seed,
                      weights=args.weights)
    t_build = time.perf_counter() - t0

    with torch.inference_mode():
        t1 = time.perf_counter()
        run_steps(model, args.prompt, min(1, args.decode_steps), args.device, args.seed + 1, label=False)
        t_warm = time.perf_counter() - t1

        activities = [torch.profiler.ProfilerActivity.CPU]
        if args.device == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        t2 = time.perf_counter()
        with torch.profiler.profile(activities=activities, record_shapes=not args.no_shapes) as prof:
            shapes = run_steps(model, args.prompt, args.decode_steps, args.device, args.seed + 2, label=True)
        t_traced = time.perf_counter() - t2

    rows, step_rows = ops_table(prof.events(), shapes, args.batch)

    if not args.no_trace:
        fd, tmp = tempfile.mkstemp(suffix=".json", dir=str(prefix.parent))
        os.close(fd)
        try:
            prof.export_chrome_trace(tmp)
            # torch names the trace after the temp file's absolute path: name it after the
            # file it ends up in instead, and gzip with no name or time in the header.
            text = scrub_chrome_text(Path(tmp).read_bytes(), json_name(trace_path))
            write_gzip(text, trace_path)
        finally:
            os.unlink(tmp)

    csv_path = prefix.with_name(prefix.name + ".ops.csv")
    with open(csv_path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)

    cuda = args.device == "cuda"
    meta = {
        "tool": "scripts/capture_trace.py",
        # Path arguments relative to the repository (or their file name): no machine paths.
        "argv": portable_argv(list(sys.argv[1:] if argv is None else argv), ROOT),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": args.device,
        "device_name": torch.cuda.get_device_name() if cuda else _cpu_model(),
        "cuda_version": torch.version.cuda if cuda else None,
        "driver_version": _nvidia_driver() if cuda else None,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "dtype": args.dtype,
        # The layers' projection weights' format (embed and lm_head stay in dtype); absent: dtype.
        **({"weights": args.weights} if args.weights else {}),
        "flash": args.flash,
        "model": cfg.to_dict(),
        "layers": layers,
        "batch": args.batch,
        "prompt": args.prompt,
        "decode_steps": args.decode_steps,
        "record_shapes": not args.no_shapes,
        "files": {"trace": trace_path.name if not args.no_trace else None, "ops": csv_path.name},
        "ops_per_step": len(expected_ops(layers, args.flash)),
        "steps": step_rows,
        # 1-minute load average before and after: other processes on the machine skew CPU timings.
        "loadavg_1m": {"before": load_before, "after": _loadavg()},
        "wall_s": {"build": round(t_build, 3), "warmup": round(t_warm, 3), "traced": round(t_traced, 3)},
    }
    meta_path = prefix.with_name(prefix.name + ".meta.json")
    meta_path.write_text(json.dumps(meta, indent=1, sort_keys=False) + "\n")
    print(f"capture_trace: {cfg.name} x{layers} layers {args.dtype} b{args.batch} p{args.prompt} "
          f"d{args.decode_steps} on {args.device}: traced {t_traced:.1f}s (build {t_build:.1f}s, "
          f"warm-up {t_warm:.1f}s) -> {prefix}.*")
    return {"trace": None if args.no_trace else trace_path, "meta": meta_path, "ops": csv_path,
            "rows": len(rows), "wall_s": meta["wall_s"]}


if __name__ == "__main__":
    main()
