"""The pass pipeline, on one page. Read this first.

Each pass is a function IRModule -> IRModule. `PIPELINE` lists them in order with the opt level from which they run;
`run_pipeline` runs them, timing each, and can stop after any one (`relayish inspect --after NAME`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from relayish import IRModule

from .constants import check_constant_kernels, fold_constant_kernels
from .fuse import fuse_ops
from .layout import alter_layout, propagate_layout
from .patterns import recognize_patterns
from .reshapes import sink_reshapes
from .simplify import crop_dead_taps, eliminate_identity_ops, fold_batch_norm, fold_constants


@dataclass(frozen=True)
class Pass:
    name: str
    fn: Callable  # (IRModule, PassContext) -> IRModule
    opt_level: int  # runs when the context's opt_level >= this
    doc: str


@dataclass(frozen=True)
class PassContext:
    opt_level: int = 3
    layout: str = "NCHWc"  # or "NCHW": keep the model's layout
    vector_width: int = 16
    max_fused_ops: int = 32
    winograd: bool = True  # 3x3 stride-1 convolutions as Winograd F(m x m, 3 x 3) (see passes/layout.py)
    conv_algorithms: tuple = ()  # (conv_signature, tile) pairs overriding the rule (compiler/algorithms.py)
    channel_block: int = 0  # the widest channel block of convolutions; 0: vector_width (compiler/algorithms.py)

    @property
    def block(self) -> int:
        return self.channel_block or self.vector_width


PIPELINE = [
    Pass("fold_constants", lambda m, c: fold_constants(m), 1, "evaluate calls whose inputs are constants"),
    Pass("recognize_patterns", lambda m, c: recognize_patterns(m), 1,
         "layer_norm and gelu from their decompositions; x**2, x**3 as products"),
    Pass("sink_reshapes", lambda m, c: sink_reshapes(m), 1,
         "reshapes that add or drop unit axes (1-D convolutions and pools as 2-D ones) past per-channel ops"),
    Pass("fold_batch_norm", lambda m, c: fold_batch_norm(m), 0, "batch norm into the conv before it, else affine"),
    Pass("eliminate_identity_ops", lambda m, c: eliminate_identity_ops(m), 0,
         "drop copies and same-shape reshapes, merge chained reshapes"),
    Pass("crop_dead_taps", lambda m, c: crop_dead_taps(m), 1,
         "convolution kernels cropped to the taps that read the input, not only its padding (small maps)"),
    Pass("alter_layout",
         lambda m, c: alter_layout(m, c.vector_width, c.winograd, dict(c.conv_algorithms), c.block)
         if c.layout == "NCHWc"
         else m, 2, "conv2d -> NCHW{c}c conv2d_nchwc (or Winograd) between layout transforms; dense -> dense_pack"),
    Pass("propagate_layout", lambda m, c: propagate_layout(m, c.block) if c.layout == "NCHWc" else m, 2,
         "push layout transforms through elementwise ops, pools, shuffles and concats; cancel inverse pairs"),
    Pass("fold_constants_2", lambda m, c: fold_constants(m), 0, "pre-transform constant weights"),
    Pass("fuse", lambda m, c: fuse_ops(m, c.max_fused_ops, fuse=c.opt_level >= 1), 0,
         "group ops into primitive functions (one kernel each) by post-dominator fusion"),
    Pass("fold_constant_kernels", lambda m, c: fold_constant_kernels(m), 0,
         "evaluate every kernel whose inputs are all constants: constant work is done once (passes/constants.py)"),
]

PASS_NAMES = [p.name for p in PIPELINE]


def run_pipeline(mod: IRModule, ctx: PassContext = PassContext(), stop_after: str | None = None,
                 timings: dict | None = None) -> IRModule:
    if stop_after is not None and stop_after not in PASS_NAMES:
        raise ValueError(f"unknown pass {stop_after!r}; passes are {', '.join(PASS_NAMES)}")
    for p in PIPELINE:
        if ctx.opt_level >= p.opt_level:
            t0 = time.perf_counter()
            mod = p.fn(mod, ctx)
            if timings is not None:
                timings[p.name] = time.perf_counter() - t0
        if p.name == stop_after:
            break
    return mod
