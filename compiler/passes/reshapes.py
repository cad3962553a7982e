"""Sinking reshapes that add or drop unit axes: a 1-D network computed by 2-D ops keeps the 2-D shape between them.

The frontend computes a 1-D convolution or pool on (N, C, L) as the 2-D op on (N, C, 1, L) between two reshapes
(frontends/onnx/ops/conv.py), so a Conv1d -> BatchNorm1d -> ReLU -> MaxPool1d -> Conv1d chain has its batch norm
and relu on 3-D values, between a reshape to 3-D and one back to 4-D: the batch norm does not fold into the
convolution, and the layout pass stops at every reshape (a layout_transform to NCHW and back between every two
convolutions, and the relu in NCHW). Moved past the per-channel ops, the reshapes meet and cancel
(eliminate_identity_ops), and the network stays 4-D, blocked, between its convolutions.

A table of `pattern -> replacement` rows (passes/rewrite.py), one comment each.
"""
from __future__ import annotations

import numpy as np

from relayish import Call, Constant, IRModule
from relayish.expr import Expr
from relayish.op import Pattern

from .rewrite import CONST, Pat, rewrite, table_rules
from .simplify import _drop_identity


def _squeezed(shape) -> tuple:
    return tuple(d for d in shape if d != 1)


def UNIT_RESHAPE(node) -> Call | None:  # noqa: N802  (an argument matcher, see rewrite.Pat)
    """Matches reshape(y) that only adds or drops axes of extent 1 after the first two (batch and channels)."""
    if not (isinstance(node, Call) and node.op == "reshape"):
        return None
    src, dst = tuple(node.args[0].type.shape), tuple(node.type.shape)
    if len(src) < 3 or len(dst) < 3 or src[:2] != dst[:2] or _squeezed(src[2:]) != _squeezed(dst[2:]):
        return None
    return node


def _reshape(x: Expr, like: Call) -> Call:
    return Call("reshape", (x,), like.attrs)


def _per_channel_as(c: Constant, ndim: int, channels: int) -> Constant | None:
    """A constant broadcast against an (N, C, ...) value of rank `ndim` as the same broadcast against rank
    ndim', if it is a scalar or varies along the channels only: a scalar stays, else (C, 1, ..., 1)."""
    if c.data.size == 1:
        return c if c.data.ndim <= 1 else Constant(c.data.reshape(()))
    if c.data.ndim > ndim:
        return None
    full = c.data.reshape((1,) * (ndim - c.data.ndim) + c.data.shape)
    if any(d != 1 for i, d in enumerate(full.shape) if i != 1) or full.shape[1] != channels:
        return None
    return Constant(np.ascontiguousarray(full.reshape(channels)))


def _through_unary(node: Call, r: Call):
    # op(reshape(y)) -> reshape(op(y))
    return _reshape(node.replace(args=(r.args[0],)), r)


def _through_binary(node: Call, a: Call, b: Call):
    # op(reshape(a), reshape(b)) -> reshape(op(a, b))              (a and b of one shape, as the reshapes')
    if a.args[0].type.shape != b.args[0].type.shape or a.type.shape != b.type.shape:
        return None
    return _reshape(node.replace(args=(a.args[0], b.args[0])), a)


def _through_binary_constant(node: Call, r: Call, c: Constant, const_first: bool):
    # op(reshape(y), c) -> reshape(op(y, c'))                       (c a scalar or per channel)
    if node.type.shape != r.type.shape:
        return None
    y = r.args[0]
    per = _per_channel_as(c, r.type.ndim, r.type.shape[1])
    if per is None:
        return None
    if per.data.ndim == 1 and per.data.size > 1:
        per = Constant(per.data.reshape((per.data.size,) + (1,) * (y.type.ndim - 2)))
    return _reshape(node.replace(args=(per, y) if const_first else (y, per)), r)


def _batch_norm(node: Call, r: Call, *params: Constant):
    # batch_norm(reshape(y), ...) -> reshape(batch_norm(y, ...))     (over axis 1: the channels in both)
    if node.attrs.axis % r.type.ndim != 1 or any(not isinstance(a, Constant) for a in node.args[1:]):
        return None
    return _reshape(node.replace(args=(r.args[0],) + tuple(node.args[1:])), r)


def _is(pattern: Pattern):
    return lambda opdef: opdef.pattern == pattern


SINK_RULES = table_rules([
    # reshape(reshape(y)) -> reshape(y), or y when that is y's shape
    (Pat("reshape"), _drop_identity),
    # batch_norm(reshape(y), g, b, m, v) -> reshape(batch_norm(y, g, b, m, v))   (channels on axis 1)
    (Pat("nn.batch_norm", (UNIT_RESHAPE, CONST, CONST, CONST, CONST)), _batch_norm),
    # op(reshape(y)) -> reshape(op(y))                                          (op elementwise)
    (Pat(_is(Pattern.ELEMWISE), (UNIT_RESHAPE,)), _through_unary),
    # op(reshape(a), reshape(b)) -> reshape(op(a, b))                           (op broadcast, same shapes)
    (Pat(_is(Pattern.BROADCAST), (UNIT_RESHAPE, UNIT_RESHAPE)), _through_binary),
    # op(reshape(y), c) -> reshape(op(y, c')), op(c, reshape(y)) likewise       (c scalar or per channel)
    (Pat(_is(Pattern.BROADCAST), (UNIT_RESHAPE, CONST)),
     lambda node, r, c: _through_binary_constant(node, r, c, const_first=False)),
    (Pat(_is(Pattern.BROADCAST), (CONST, UNIT_RESHAPE)),
     lambda node, c, r: _through_binary_constant(node, r, c, const_first=True)),
])


def sink_reshapes(mod: IRModule) -> IRModule:
    """Move reshapes that only add or drop unit axes past the per-channel ops after them, merging them as they
    meet (see the module's docstring)."""
    return rewrite(mod, SINK_RULES)

