"""What PIM can run, and how an op splits over the stacks by data layout: FC
weights interleaved over every unit of every stack, the KV cache of one
(request, KV head), or of one request, on one stack (pim.kv_placement)."""

from __future__ import annotations

import math

from hw_models.pim.config import Geometry, PimConfig
from hw_models.pim.plan import ATTN_KINDS, SERIAL, Piece, Schedule
from sim.core import graph as g
from sim.core.frozen import frozen
from sim.core.graph import Op


@frozen
class Layout:
    cfg: PimConfig
    geo: Geometry
    model_kv_heads: int      # the whole model's KV heads (head groups are slices of them)

    def format_refusal(self, op: Op) -> str | None:
        if op.compute_format not in self.cfg.formats:
            return f"activations in {op.compute_format}: PIM units compute {'/'.join(self.cfg.formats)} only"
        return None

    def split(self, op: Op, s: Schedule = SERIAL) -> tuple[Piece, ...] | str:
        """The op's pieces per stack, or why PIM cannot run it."""
        cfg = self.cfg
        if op.kind == g.GEMM:
            return self.split_gemm(op)   # checks the formats itself (GEMM sharing calls it directly)
        refusal = self.format_refusal(op)
        if refusal:
            return refusal
        if op.kind in ATTN_KINDS:
            return self.split_attention(op, s)
        if op.kind == g.SOFTMAX:
            if cfg.softmax != "buffer_die":
                return "exp/max/sum: not in the PIM ISA, runs on the host"
            return self.split_attention(op, s)
        if op.kind == g.ELEMENTWISE:
            elements = sum(t.elements for t in op.writes)
            if op.flops > elements and not cfg.activation_functions:
                return "activation needs exp (SiLU/GELU): no transcendental unit in the banks"
            share = 1 / cfg.stacks
            return tuple(Piece(s, op.bytes * share, op.flops * share, 0.0, 0.0) for s in range(cfg.stacks))
        return {g.NORM: "row reduction and rsqrt across banks: host",
                g.ROPE: "pairs elements across lanes with sin/cos tables: host",
                g.KV_APPEND: "writes the new K/V through the pins: host",
                g.EMBED: "table gather: host"}.get(op.kind, f"{op.kind}: host only")

    def split_gemm(self, op: Op, any_rows: bool = False) -> tuple[Piece, ...] | str:
        cfg, S, P = self.cfg, self.cfg.stacks, self.cfg.pseudo_channels_per_stack
        refusal = self.format_refusal(op)
        if refusal:
            return refusal
        mats = [t for t in op.reads if t.role == "weight" and len(t.shape) > 1]
        if not mats:
            return "no weight matrix"
        if mats[0].fmt not in cfg.formats:
            return f"{mats[0].fmt} weights: PIM units compute {'/'.join(cfg.formats)} only"
        m = op.dims["m"]
        if m > cfg.max_rows and not any_rows:
            return f"wide GEMM: {m} rows > {cfg.max_rows} (weights are reused across rows on the host)"
        wbytes = sum(t.bytes for t in mats)
        x_bytes = sum(t.bytes for t in op.reads if t.role == "activation")
        out = sum(t.bytes for t in op.writes)
        # Rows of W are interleaved over every unit; each pseudo-channel needs the whole input;
        # PIM has no reuse, so each of the m input rows re-streams the weights (PIMSimulator GEMV
        # loops over the batch). Lanes not reduced in-unit come back as partial sums.
        return tuple(Piece(s, m * wbytes / S, op.flops / S, x_bytes * P,
                           out / S * cfg.partial_sums_per_output) for s in range(S))

    def groups_per_stack(self, batch: int, kv_heads: int, group: int = 0) -> list[int]:
        """(request, KV head) granules per stack for an op over `kv_heads` heads. With head
        groups the op is head group `group` of the model's heads, whose KV lives where the
        whole model's layout put it: granule (r, h) of the model sits on stack
        (r x all KV heads + h) % stacks (kv_placement head) or r % stacks (request)."""
        S = self.cfg.stacks
        counts = [0] * S
        if self.cfg.kv_placement == "request":
            for r in range(batch):
                counts[r % S] += kv_heads
        else:
            total = self.model_kv_heads
            for r in range(batch):
                for j in range(kv_heads):
                    counts[(r * total + group * kv_heads + j) % S] += 1
        return counts

    def split_attention(self, op: Op, s: Schedule) -> tuple[Piece, ...] | str:
        cfg, P = self.cfg, self.cfg.pseudo_channels_per_stack
        d = op.dims
        B, H, KV, q_len, kv_len = d["batch"], d["heads"], d["kv_heads"], d["q_len"], d["kv_len"]
        rows = q_len * H // KV           # query rows sharing one KV head's matrix
        if rows > cfg.max_rows:
            return f"{rows} query rows per KV head (prefill): K/V are reused across them on the host"
        kv = [t for t in op.reads if t.role == "kv"]
        if kv and kv[0].fmt not in cfg.formats:
            return f"{kv[0].fmt} KV cache: PIM units compute {'/'.join(cfg.formats)} only"
        groups = B * KV
        kv_bytes = sum(t.bytes for t in kv) / groups
        in_bytes = sum(t.bytes for t in op.reads if t.role == "activation") / groups
        out_bytes = sum(t.bytes for t in op.writes) / groups
        flops = op.flops / groups
        elem = 2.0  # fp16 scores
        pieces = []
        for stack, n in enumerate(self.groups_per_stack(B, KV, s.head_group.get(op.name, 0))):
            if n == 0:
                continue
            # n groups over P pseudo-channels: whole groups per channel, or each group spread over
            # P // n channels (its input written to each; context partials come back from each).
            span = max(1, P // n)
            imbalance = math.ceil(n / P) / (n / P) if n >= P else P / (n * span)
            partials = cfg.partial_sums_per_output * (span if op.kind == g.ATTN_CONTEXT else 1)
            if op.kind == g.SOFTMAX:  # buffer die: scores in, probabilities out, at the pin rate
                nbytes = n * (in_bytes + out_bytes)
                pieces.append(Piece(stack, 0.0, n * flops, 0.0, 0.0, nbytes / self.geo.stack_external_bytes_per_s,
                                    nbytes))
                continue
            extra_s = extra_b = 0.0
            if op.kind == g.ATTENTION:  # fused: softmax on the buffer die at the pin rate (AttAcc)
                extra_b = n * rows * kv_len * elem * 2
                extra_s = extra_b / self.geo.stack_external_bytes_per_s
            pieces.append(Piece(stack, n * kv_bytes * rows, n * flops, n * in_bytes * span,
                                n * out_bytes * partials, extra_s, extra_b, imbalance))
        return tuple(pieces)
