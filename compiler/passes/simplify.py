"""Graph simplifications: constant folding, batch-norm folding, identity-op elimination.

Local rewrites are a table of (name, function) pairs; each function returns a replacement node or None.
`rewrite(mod, rules)` (passes/rewrite.py) applies them bottom-up until no rule fires at a node.
"""
from __future__ import annotations

import numpy as np

from relayish import Call, Constant, IRModule, get_op
from relayish.types import numpy_dtype
from relayish.expr import Expr, children, post_order

from .rewrite import rewrite

# A constant computation is folded whatever its size (a 302 MB fc weight repacked for its dense kernel once at
# compile time, not on every run), unless folding would blow it up: a result over EXPANSION_MIN_BYTES and more than
# EXPANSION_FACTOR times the bytes of its constant inputs (a scalar broadcast to a huge shape, a ConstantOfShape)
# is cheaper to compute per run than to store and read.
EXPANSION_FACTOR = 4
EXPANSION_MIN_BYTES = 16 << 20


def expands(result_type, inputs) -> bool:
    """Whether a computation of constants `inputs` (arrays) into a result of `result_type` is an expansion that
    stays a computation (see EXPANSION_FACTOR); a result sized at run time (a constant table sliced to an input's
    length) always stays one."""
    if not result_type.is_static:
        return True
    out = result_type.size * np.dtype(numpy_dtype(result_type.dtype)).itemsize
    return out > EXPANSION_MIN_BYTES and out > EXPANSION_FACTOR * sum(a.nbytes for a in inputs)


# ---------------------------------------------------------------------------------------------- folding

def _fold_call(node: Call):
    """op(constants...) -> constant, evaluated with the op's numpy reference."""
    if not node.args or not all(isinstance(a, Constant) for a in node.args):
        return None
    if expands(node.type, [a.data for a in node.args]):
        return None
    value = get_op(node.op).ref(*[a.data for a in node.args], **node.attrs.as_dict())
    return Constant(np.asarray(value, dtype=node.type.dtype).reshape(node.type.shape))


def fold_constants(mod: IRModule) -> IRModule:
    """Evaluate every call whose inputs are all constants."""
    return rewrite(mod, [("fold", _fold_call)])


# ---------------------------------------------------------------------------------------------- batch norm

def _const(node) -> np.ndarray | None:
    return node.data if isinstance(node, Constant) else None


def _bn_to_affine(node: Call):
    # batch_norm(x, g, b, m, v) -> x * s + (b - m * s), s = g / sqrt(v + eps), per channel on `axis`
    if node.op != "nn.batch_norm":
        return None
    x, g, b, m, v = node.args
    params = [_const(a) for a in (g, b, m, v)]
    if any(p is None for p in params):
        return None
    g, b, m, v = (p.astype(np.float64) for p in params)
    scale = g / np.sqrt(v + node.attrs.epsilon)
    shift = b - m * scale
    axis = node.attrs.axis % len(x.type.shape)
    shape = [1] * (len(x.type.shape) - axis)
    shape[0] = -1
    dtype = x.type.dtype
    s = Constant(scale.astype(dtype).reshape(shape))
    t = Constant(shift.astype(dtype).reshape(shape))
    return Call("add", (Call("multiply", (x, s)), t))


def _per_out_channel(scale: np.ndarray, conv: Call) -> np.ndarray | None:
    """scale as a vector over conv's output channels, if it broadcasts only along them."""
    oc = conv.type.shape[1]
    s = scale.reshape(scale.shape[-3:]) if scale.ndim == 4 and scale.shape[0] == 1 else scale
    if s.size == 1:
        return np.full(oc, s.reshape(()), dtype=scale.dtype)
    if s.ndim == 3 and s.shape[1:] == (1, 1) and s.shape[0] == oc:
        return s.reshape(oc)
    return None


def _is_conv(node, single_use) -> bool:
    return isinstance(node, Call) and node.op == "nn.conv2d" and isinstance(node.args[1], Constant) and \
        single_use(node)


def _make_rules(uses, origin):
    single = lambda n: uses.get(origin.get(id(n), id(n)), 0) <= 1

    def scale_conv(node: Call):
        # conv(x, w) * s -> conv(x, w * s)                 (s per output channel)
        # (conv(x, w) + b) * s -> conv(x, w * s) + b * s
        if node.op != "multiply" or not isinstance(node.args[1], Constant):
            return None
        lhs, s = node.args
        if _is_conv(lhs, single):
            conv, bias = lhs, None
        elif isinstance(lhs, Call) and lhs.op == "add" and single(lhs) and _is_conv(lhs.args[0], single) \
                and isinstance(lhs.args[1], Constant):
            conv, bias = lhs.args
        else:
            return None
        vec = _per_out_channel(s.data, conv)
        if vec is None:
            return None
        w = conv.args[1].data * vec.reshape(-1, 1, 1, 1)
        new_conv = conv.replace(args=(conv.args[0], Constant(w.astype(conv.args[1].data.dtype))))
        if bias is None:
            return new_conv
        b = np.broadcast_to(bias.data, np.broadcast_shapes(bias.data.shape, s.data.shape)) * s.data
        return Call("add", (new_conv, Constant(b.astype(bias.data.dtype))))

    def merge_bias(node: Call):
        # (x + c1) + c2 -> x + (c1 + c2)                   (both constants)
        # (x - c1) + c2 -> x + (c2 - c1)                   (integers, exact: an integer product's zero-point term
        #                                                   and its bias, one add in the int8 kernel's epilogue)
        if node.op != "add" or not isinstance(node.args[1], Constant):
            return None
        lhs, c2 = node.args
        if isinstance(lhs, Call) and lhs.op in ("add", "subtract") and single(lhs) \
                and isinstance(lhs.args[1], Constant) and (lhs.op == "add" or "int" in lhs.type.dtype):
            merged = c2.data + lhs.args[1].data if lhs.op == "add" else c2.data - lhs.args[1].data
            if merged.ndim <= lhs.type.ndim:
                return Call("add", (lhs.args[0], Constant(merged.astype(c2.data.dtype))))
        return None

    return [("bn_to_affine", _bn_to_affine), ("scale_conv", scale_conv), ("merge_bias", merge_bias),
            ("fold", _fold_call)]


def use_counts(root: Expr) -> dict[int, int]:
    uses: dict[int, int] = {}
    for node in post_order(root):
        for c in children(node):
            uses[id(c)] = uses.get(id(c), 0) + 1
    return uses


def fold_batch_norm(mod: IRModule) -> IRModule:
    """Fold inference batch norms into the convolution before them (weights scaled, bias shifted); a batch norm
    with no convolution before it becomes a multiply and an add."""
    # bn -> affine first, then fold the affine into convs (use counts taken on the affine form)
    mod = rewrite(mod, [("bn_to_affine", _bn_to_affine)])
    origin: dict[int, int] = {}
    return rewrite(mod, _make_rules(use_counts(mod.main.body), origin), origin)


# ---------------------------------------------------------------------------------------------- identity

def _drop_identity(node: Call):
    # copy(x) -> x;  reshape(x) to x's own shape -> x
    if node.op == "copy":
        return node.args[0]
    if node.op == "reshape" and tuple(node.type.shape) == tuple(node.args[0].type.shape):
        return node.args[0]
    if node.op == "reshape" and isinstance(node.args[0], Call) and node.args[0].op == "reshape":
        return Call("reshape", (node.args[0].args[0],), node.attrs)
    return None


def eliminate_identity_ops(mod: IRModule) -> IRModule:
    """Drop ops that change nothing (copies, reshapes to the same shape) and merge chained reshapes. There is no
    dead code to eliminate: a graph holds only the nodes its outputs reach."""
    return rewrite(mod, [("identity", _drop_identity)])


# ---------------------------------------------------------------------------------------------- dead taps

def live_taps(size: int, out: int, kernel: int, stride: int, dilation: int, pad_begin: int) -> tuple[int, int]:
    """(first, last + 1) of the kernel taps along one axis that read the input (not only its padding) at some
    output position; (0, 0) if none does."""
    live = [k for k in range(kernel)
            if any(0 <= o * stride + k * dilation - pad_begin < size for o in range(out))]
    return (live[0], live[-1] + 1) if live else (0, 0)


def _cropped_axis(size, out, kernel, stride, dilation, pad_begin):
    """(first tap, last tap + 1, new pad_begin, new pad_end) of one axis with its dead outer taps cropped, or None
    when nothing is cropped or the cropped window cannot keep every output where it was (or the axis's size is
    known only at run time: every tap may read it)."""
    if not (isinstance(size, int) and isinstance(out, int)):
        return None
    first, end = live_taps(size, out, kernel, stride, dilation, pad_begin)
    if end == 0 or (first, end) == (0, kernel):
        return None
    begin = pad_begin - first * dilation
    pad_end = max(0, (out - 1) * stride + (end - first - 1) * dilation + 1 - size - begin)
    span = size + begin + pad_end - (end - first - 1) * dilation - 1
    if begin < 0 or span // stride + 1 != out:
        return None
    return first, end, begin, pad_end


def _crop_dead_taps(node: Call):
    # conv2d(x, w) -> conv2d(x, w[:, :, h0:h1, w0:w1]) with less padding    (w constant; the taps outside
    #                                  h0:h1, w0:w1 read only padding: a 3x3 convolution of a 1x1 map is a 1x1 one)
    if node.op != "nn.conv2d" or not isinstance(node.args[1], Constant):
        return None
    (_, _, h, wd), (oh, ow) = node.args[0].type.shape, node.type.shape[2:]
    kh, kw = node.args[1].type.shape[2:]
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = node.attrs.strides, node.attrs.dilation, node.attrs.padding
    rows = _cropped_axis(h, oh, kh, sh, dh, pt) or (0, kh, pt, pb)
    cols = _cropped_axis(wd, ow, kw, sw, dw, pl) or (0, kw, pl, pr)
    if rows == (0, kh, pt, pb) and cols == (0, kw, pl, pr):
        return None
    weight = np.ascontiguousarray(node.args[1].data[:, :, rows[0]:rows[1], cols[0]:cols[1]])
    attrs = dict(node.attrs.as_dict(), padding=(rows[2], cols[2], rows[3], cols[3]))
    return Call("nn.conv2d", (node.args[0], Constant(weight)), attrs)


def crop_dead_taps(mod: IRModule) -> IRModule:
    """Crop each convolution's kernel to the taps that read its input: on a map smaller than the kernel, the outer
    taps read only zeros of the padding (a 3x3 convolution of 1,024 -> 384 channels on a 1x1 map read 14 MB of
    weights for nothing and ran 3.3x onnxruntime's time)."""
    return rewrite(mod, [("crop_dead_taps", _crop_dead_taps)])
