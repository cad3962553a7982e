"""The converter of FlexAttention (ai.onnx.preview 1): scaled dot-product attention with user subgraphs that
modify the scores (score_mod) and the probabilities (prob_mod), inlined in the node's scope.

As onnx's reference (onnx/reference/ops/aionnx_preview/op_flex_attention.py), which generated the conformance
cases: Q and K are each scaled by sqrt(scale) in the inputs' dtype before their product, the scores are then
cast to the softmax precision (float32, float64 for float64 inputs, or softmax_precision), modified, softmaxed,
modified, multiplied by V in that precision and cast back to V's dtype.
"""
from __future__ import annotations

import math

import numpy as np

from relayish import Constant, Expr
from relayish.types import numpy_dtype

from ..builders import astype, fold, shape_of, transpose
from ..registry import converter
from ..values import ConversionError
from .attention import float_dtype, grouped_matmul


def _modified(scope, graph, value: Expr, what: str) -> Expr:
    """value through the one-input, one-output subgraph `graph` (converted in the node's scope)."""
    if len(graph.input) != 1 or len(graph.output) != 1:
        raise ConversionError(f"{what} must have one input and one output, got {len(graph.input)} and "
                              f"{len(graph.output)}")
    out, = scope.convert(graph, [value], what)
    if shape_of(out) != shape_of(value) or out.type.dtype != value.type.dtype:
        raise ConversionError(f"{what} must keep the shape {shape_of(value)} and dtype {value.type.dtype} of its "
                              f"input, got {shape_of(out)} {out.type.dtype}")
    return out


@converter("FlexAttention", since=1, domain="ai.onnx.preview")
def flex_attention(q, k, v, *, scale=None, score_mod=None, prob_mod=None, softmax_precision=None, _scope=None):
    shapes = [shape_of(t) for t in (q, k, v)]
    if any(len(s) != 4 for s in shapes):
        raise ConversionError(f"Q, K and V must be 4-D [batch, heads, seq, size], got {shapes}")
    (b, hq, _, e), (bk, hkv, s, ek), (bv, hv, sv, _) = shapes
    if bk != b or bv != b or hv != hkv or sv != s or ek != e or hkv < 1 or hq % hkv:
        raise ConversionError(f"Q {shapes[0]}, K {shapes[1]} and V {shapes[2]} do not agree (batch, K/V heads and "
                              f"length, head size; Q's heads a multiple of K's)")
    dtype = q.type.dtype
    if k.type.dtype != dtype or v.type.dtype != dtype or dtype not in ("float32", "float64", "float16", "bfloat16"):
        raise ConversionError(f"Q, K and V must have one float dtype, got {q.type.dtype}, {k.type.dtype}, "
                              f"{v.type.dtype}")
    compute = float_dtype(softmax_precision, "softmax_precision") if softmax_precision is not None else \
        ("float64" if dtype == "float64" else "float32")
    scale = 1.0 / math.sqrt(e) if scale is None else float(scale)
    root = Constant(np.asarray(np.sqrt(np.float32(scale)), numpy_dtype(dtype)))
    scores = grouped_matmul(fold("multiply", q, root), transpose(fold("multiply", k, root), (0, 1, 3, 2)))
    scores = astype(scores, compute)
    if score_mod is not None:
        scores = _modified(_scope, score_mod, scores, "score_mod")
    probs = fold("nn.softmax", scores, axis=3)
    if prob_mod is not None:
        probs = _modified(_scope, prob_mod, probs, "prob_mod")
    return astype(grouped_matmul(probs, astype(v, compute)), dtype)
