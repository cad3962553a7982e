"""Recurrent cells: one time step of an LSTM, GRU or RNN layer, every direction at once, in one kernel; and the
gather of a layer's output sequence. frontends/onnx/ops/rnn.py builds a layer from them:

    xp   = dense(x [T*B, I], W') + b'                 the input projection of every step: one matmul
    s1   = nn.lstm_cell(xp, steps0, s0, R')            one kernel per step (both directions), the same task
    ...                                                for every step
    hist = concatenate(s1, ..., sT)                    in place: each cell writes its own slice (compiler/memory.py)
    Y    = nn.recurrent_output(hist)

Shapes: T steps, B batch, D directions, G gates (LSTM 4: i, o, f, c; GRU 3: z, r, h; RNN 1, ONNX's orders), H
hidden units padded to Hp (a multiple of the weight's column block nb), S state slots (LSTM 2: h then c; else 1):
- xp [T*B, D*G*Hp]: row t*B + b holds time t's input projection with its biases, gate g of direction d in columns
  (d*G + g)*Hp + [0, Hp) (zero in the padded ones).
- steps int32 [2]: (s, T-1-s) at step s: the time a forward direction processes, and a reverse one. Besides the
  state, it is all that changes from one step to the next: passed as data, every step is the same task (one
  compiled kernel). A value outside [0, T) is taken modulo T (no memory outside xp is read; a modulo, unlike a
  clamp, gives the index an interval that lowering can prove in bounds without clamping every load).
- state [1, D, S, B, Hp]: the state after the previous step (the leading 1: the states of all steps concatenate
  into the history [T, D, S, B, Hp] along it).
- weight [D, Hp/nb, H, G, nb]: weight[d, jo, k, g, ji] = R[d][g*H + jo*nb + ji, k] (0 for padded columns): a tile
  of nb columns reads one contiguous panel of H x G x nb.
Padded units have zero weights and biases, so from a zero state they stay 0; no real unit reads them (the
reductions run over k < H) and the frontend crops them from the outputs.

Each cell's compute: the gates as one reduction stage over (d, b, g, j) (tag GATES_TAG), the cell math as the output
stage (tag CELL_TAG) reading the gates of its own column (LSTM's output axis s selects h' or c': both from the
same loaded gates). compiler/recurrent_schedule.py computes the gates at the output's column tile.
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..op import OpError, Pattern, register_op, stage_tag
from ..dims import exact_quotient
from ..types import TensorType
from .common import expect_float, same_dtype

GATES_TAG = stage_tag("recurrent_gates")  # the hidden state times the recurrent weight, all gates of a tile
CELL_TAG = stage_tag("recurrent_cell")  # the new state from the gates (and a GRU's reset-gated product)
RANGE_TAG = stage_tag("recurrent_range")  # a quantized LSTM's range of its hidden state (quantize_state)
CELLS = {"nn.lstm_cell": (4, 2), "nn.gru_cell": (3, 1), "nn.rnn_cell": (1, 1)}  # op -> (gates, state slots)


def _reverse(op: str, attrs, directions: int) -> tuple[int, ...]:
    reverse = tuple(int(r) for r in attrs["reverse"])
    if reverse not in ((0,), (1,), (0, 1)) or len(reverse) != directions:
        raise OpError(f"{op}: reverse must be (0,), (1,) or (0, 1) (one flag per direction, the forward one first) "
                      f"for {directions} direction(s), got {reverse}")
    return reverse


_EXTRA_DOC = {"nn.gru_cell": ", bias", "nn.lstm_cell": ", scales"}


def _extra_inputs(op: str, attrs) -> int:
    """Inputs of a cell after its weight: a GRU's bias, a quantized LSTM's scales."""
    return int(op == "nn.gru_cell" or (op == "nn.lstm_cell" and bool(attrs.get("quantize_state"))))


def _cell_infer(op: str):
    gates, slots = CELLS[op]

    def infer(arg_types, attrs):
        xp, steps, state, weight = arg_types[:4]
        for t in (xp, state, weight) + tuple(arg_types[4:]):
            expect_float(op, t)
        same_dtype(op, [xp, state, weight] + list(arg_types[4:]))
        if steps.shape != (2,) or steps.dtype != "int32":
            raise OpError(f"{op}: steps must be int32 [2] (the forward and the reverse time), got {steps.shape} "
                          f"{steps.dtype}")
        if state.ndim != 5 or state.shape[0] != 1 or state.shape[2] != slots:
            raise OpError(f"{op}: state must be [1, directions, {slots}, batch, hidden], got {state.shape}")
        _, dirs, _, batch, padded = state.shape
        _reverse(op, attrs, dirs)
        if weight.ndim != 5 or weight.shape[0] != dirs or weight.shape[3] != gates or \
                weight.shape[1] * weight.shape[4] != padded or weight.shape[2] > padded:
            raise OpError(f"{op}: weight must be [{dirs}, hidden/nb, units, {gates}, nb] with hidden/nb * nb = "
                          f"{padded} and units <= {padded}, got {weight.shape}")
        if xp.ndim != 2 or exact_quotient(xp.shape[0], batch) is None or xp.shape[1] != dirs * gates * padded:
            raise OpError(f"{op}: xp must be [steps * {batch}, {dirs * gates * padded}], got {xp.shape}")
        if len(arg_types) != 4 + _extra_inputs(op, attrs):
            raise OpError(f"{op}: expected xp, steps, state, weight{_EXTRA_DOC.get(op, '')}"
                          f"{' (quantize_state)' if attrs.get('quantize_state') else ''}, got {len(arg_types)} inputs")
        if op == "nn.gru_cell" and arg_types[4].shape != (dirs, padded):
            raise OpError(f"{op}: bias must be [{dirs}, {padded}], got {arg_types[4].shape}")
        if op == "nn.lstm_cell" and attrs.get("quantize_state") and arg_types[4].shape != (dirs, gates * padded):
            raise OpError(f"{op}: the recurrent weight's scales must be [{dirs}, {gates * padded}], got "
                          f"{arg_types[4].shape}")
        return TensorType(state.shape, state.dtype)
    return infer


# ---------------------------------------------------------------------------------------------- references

def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _ref_parts(xp, steps, state, weight, reverse):
    """(float64 arrays) per direction: x [B, G, Hp] (its time's projection), h [B, Hp], the recurrent weight as
    [G, Hp, H] (gate, column, k); and the number of real units H."""
    _, dirs, _, batch, padded = state.shape
    _, blocks, units, gates, nb = weight.shape
    steps_total = xp.shape[0] // batch
    parts = []
    for d in range(dirs):
        t = int(steps[reverse[d]]) % steps_total
        x = xp[t * batch:(t + 1) * batch].astype(np.float64).reshape(batch, dirs, gates, padded)[:, d]
        r = weight[d].astype(np.float64).transpose(2, 0, 3, 1).reshape(gates, padded, units)  # [g, jo, ji, k]
        parts.append((x, state[0, d, 0].astype(np.float64), r))
    return parts, units


def _quantized_state_ref(h):
    """(q - zero point, scale): h (float32) quantized to uint8 over the range [min(h, 0), max(h, 0)] in float32, as
    DynamicQuantizeLinear (frontends/onnx/ops/quantization.py dynamic_quantize)."""
    h = h.astype(np.float32)
    lo, hi = np.float32(min(0.0, h.min())), np.float32(max(0.0, h.max()))
    scale = np.float32(hi - lo) / np.float32(255) if hi > lo else np.float32(1)
    zp = np.round(np.clip(np.float32(0) - lo / scale, 0, 255))
    return np.clip(np.round(h / scale) + zp, 0, 255) - zp, scale


def _lstm_ref(xp, steps, state, weight, *scales, reverse, quantize_state=0):
    parts, units = _ref_parts(xp, steps, state, weight, reverse)
    out = np.empty(state.shape, np.float64)
    for d, (x, h, r) in enumerate(parts):
        if quantize_state:  # integers: the product exact, then scaled in float32 (as onnxruntime's int32 GEMM)
            q, scale = _quantized_state_ref(state[0, d, 0])
            product = np.einsum("bk,gjk->bgj", q[:, :units].astype(np.float64), r).astype(np.float32)
            gate_scales = (np.float32(scale) * scales[0][d].reshape(r.shape[:2])).astype(np.float32)
            pre = x + (product * gate_scales).astype(np.float64)
        else:
            pre = x + np.einsum("bk,gjk->bgj", h[:, :units], r)
        i, o, f, c = _sigmoid(pre[:, 0]), _sigmoid(pre[:, 1]), _sigmoid(pre[:, 2]), np.tanh(pre[:, 3])
        cell = f * state[0, d, 1].astype(np.float64) + i * c
        out[0, d, 0], out[0, d, 1] = o * np.tanh(cell), cell
    return out.astype(state.dtype)


def _gru_ref(xp, steps, state, weight, bias, reverse, linear_before_reset):
    parts, units = _ref_parts(xp, steps, state, weight, reverse)
    out = np.empty(state.shape, np.float64)
    for d, (x, h, r) in enumerate(parts):
        rec = np.einsum("bk,gjk->bgj", h[:, :units], r)
        z, reset = _sigmoid(x[:, 0] + rec[:, 0]), _sigmoid(x[:, 1] + rec[:, 1])
        rbh = bias[d].astype(np.float64)
        if linear_before_reset:
            n = np.tanh(x[:, 2] + reset * (rec[:, 2] + rbh))
        else:
            n = np.tanh(x[:, 2] + (reset * h)[:, :units] @ r[2].T + rbh)
        out[0, d, 0] = (1.0 - z) * n + z * h
    return out.astype(state.dtype)


def _rnn_ref(xp, steps, state, weight, reverse):
    parts, units = _ref_parts(xp, steps, state, weight, reverse)
    out = np.empty(state.shape, np.float64)
    for d, (x, h, r) in enumerate(parts):
        out[0, d, 0] = np.tanh(x[:, 0] + h[:, :units] @ r[0].T)
    return out.astype(state.dtype)


# ---------------------------------------------------------------------------------------------- computes

def _gates(h_at, weight, shape, first: int, count: int, name="gates"):
    """[D, B, count, Hp]: gate first + g of every unit, sum over k < H of h_at(d, b, k) * weight[d, j // nb, k,
    first + g, j % nb]. shape: the cell's output shape."""
    _, _, units, _, nb = weight.shape
    rk = te.reduce_axis(units, "rk")

    def body(d, b, g, j):
        return te.sum(h_at(d, b, rk.var) * weight[d, j // nb, rk.var, first + g, j % nb], rk)
    return te.compute((shape[1], shape[3], count, shape[4]), body, name=name, tag=GATES_TAG)


class _Inputs:
    """Index helpers over a cell's inputs: x(d, b, g, j) reads the projection of d's time step."""

    def __init__(self, xp, steps, state, reverse):
        self.xp, self.state = xp, state
        _, self.dirs, _, self.batch, self.padded = state.shape
        self.gates = xp.shape[1] // (self.dirs * self.padded)
        self.steps, self.length, self.first = steps, xp.shape[0] // self.batch, reverse[0]

    def x(self, d, b, g, j):
        # direction d processes time steps[d + reverse[0]] (reverse is (0,), (1,) or (0, 1)), modulo T
        time = self.steps[d + self.first] % self.length
        return self.xp[time * self.batch + b, (d * self.gates + g) * self.padded + j]

    def h(self, d, b, k):
        return self.state[0, d, 0, b, k]


def _quantized_state(state):
    """(the stage [D, B, Hp] of each direction's hidden state quantized to uint8 over its range (every batch row
    and unit, and 0) less its zero point: integers, in float32; scale(d): that quantization's scale): range stages
    (tag RANGE_TAG), then the quantized state (tag CELL_TAG), as DynamicQuantizeLinear."""
    _, dirs, _, batch, padded = state.shape
    ranges = []
    for name, reduce in (("state_min", te.min_reduce), ("state_max", te.max_reduce)):
        rb, rk = te.reduce_axis(batch, "rb"), te.reduce_axis(padded, "rk")
        ranges.append(te.compute((dirs,), lambda d, reduce=reduce, rb=rb, rk=rk:
                                 reduce(state[0, d, 0, rb.var, rk.var], (rb, rk)), name=name, tag=RANGE_TAG))
    low, high = ranges

    def scale(d):
        lo, hi = te.min_(low[d], 0.0), te.max_(high[d], 0.0)
        return te.select(hi > lo, (hi - lo) / 255.0, te.const(1.0, "float32"))

    def body(d, b, k):
        s, lo = scale(d), te.min_(low[d], 0.0)
        zp = te.intrin("roundeven", te.max_(te.min_(0.0 - lo / s, 255.0), 0.0))
        return te.max_(te.min_(te.intrin("roundeven", state[0, d, 0, b, k] / s) + zp, 255.0), 0.0) - zp
    return te.compute((dirs, batch, padded), body, name="state_quantized", tag=CELL_TAG), scale


def _lstm_compute(inputs, attrs, out_type):
    xp, steps, state, weight = inputs[:4]
    io = _Inputs(xp, steps, state, attrs.reverse)
    if attrs.quantize_state:  # (q - zp) @ (R - zp_R) exact in float32 (integers below 2^24), then scaled
        quantized, scale = _quantized_state(state)
        gates = _gates(lambda d, b, k: quantized[d, b, k], weight, state.shape, 0, 4)
        padded, gate_scales = state.shape[4], inputs[4]

        def product(d, b, g, j):
            return gates[d, b, g, j] * (scale(d) * gate_scales[d, g * padded + j])
    else:
        gates = _gates(io.h, weight, state.shape, 0, 4)

        def product(d, b, g, j):
            return gates[d, b, g, j]

    def body(_, d, s, b, j):
        pre = [product(d, b, g, j) + io.x(d, b, g, j) for g in range(4)]
        cell = te.sigmoid(pre[2]) * state[0, d, 1, b, j] + te.sigmoid(pre[0]) * te.tanh(pre[3])
        return te.select(te.eq(s, 0), te.sigmoid(pre[1]) * te.tanh(cell), cell)
    return te.compute(out_type.shape, body, name="cell", tag=CELL_TAG)


def _gru_compute(inputs, attrs, out_type):
    xp, steps, state, weight, bias = inputs
    io = _Inputs(xp, steps, state, attrs.reverse)
    units = weight.shape[2]
    if attrs.linear_before_reset:
        gates = _gates(io.h, weight, state.shape, 0, 3)

        def candidate(d, b, j):
            reset = te.sigmoid(gates[d, b, 1, j] + io.x(d, b, 1, j))
            return te.tanh(io.x(d, b, 2, j) + reset * (gates[d, b, 2, j] + bias[d, j]))
    else:  # the reset gate of every unit first: (r * h) @ Rh reads all of them
        gates = _gates(io.h, weight, state.shape, 0, 2)
        shape = (state.shape[1], state.shape[3], units)
        reset_h = te.compute(shape, lambda d, b, k: te.sigmoid(gates[d, b, 1, k] + io.x(d, b, 1, k)) * io.h(d, b, k),
                             name="reset_h", tag=CELL_TAG)
        hidden = _gates(lambda d, b, k: reset_h[d, b, k], weight, state.shape, 2, 1, name="gates_h")

        def candidate(d, b, j):
            return te.tanh(io.x(d, b, 2, j) + hidden[d, b, 0, j] + bias[d, j])

    def body(_, d, s, b, j):
        z = te.sigmoid(gates[d, b, 0, j] + io.x(d, b, 0, j))
        return (1.0 - z) * candidate(d, b, j) + z * io.h(d, b, j)
    return te.compute(out_type.shape, body, name="cell", tag=CELL_TAG)


def _rnn_compute(inputs, attrs, out_type):
    xp, steps, state, weight = inputs
    io = _Inputs(xp, steps, state, attrs.reverse)
    gates = _gates(io.h, weight, state.shape, 0, 1)
    return te.compute(out_type.shape, lambda _, d, s, b, j: te.tanh(gates[d, b, 0, j] + io.x(d, b, 0, j)),
                      name="cell", tag=CELL_TAG)


def _cell_flops(arg_types, attrs, out_type):
    _, dirs, _, batch, padded = arg_types[2].shape
    _, _, units, gates, _ = arg_types[3].shape
    return 2.0 * dirs * batch * gates * padded * units + 10.0 * out_type.size


_CELL_DOC = ("one time step of every direction: xp [T*B, D*G*Hp] (the input projections), steps int32 [2] (the "
             "forward and reverse time), state [1, D, S, B, Hp], weight [D, Hp/nb, H, G, nb] (R packed by column "
             "blocks) -> the new state (relayish/ops/recurrent.py)")
register_op("nn.lstm_cell", inputs=None, pattern=Pattern.OPAQUE, op_class="dense", infer=_cell_infer("nn.lstm_cell"),
            ref=_lstm_ref, compute=_lstm_compute, flops=_cell_flops, attrs={"reverse": (0,), "quantize_state": 0},
            doc="LSTM " + _CELL_DOC + "; gates i, o, f, c; state slots h, c; with quantize_state, h quantized to "
                "uint8 over its range per direction (integers less the zero point) for an exact product with the "
                "weight's integers, scaled by scales [D, G*Hp] (R's scale per column) times its own scale "
                "(onnxruntime's DynamicQuantizeLSTM)")
register_op("nn.gru_cell", inputs=5, pattern=Pattern.OPAQUE, op_class="dense", infer=_cell_infer("nn.gru_cell"),
            ref=_gru_ref, compute=_gru_compute, flops=_cell_flops, attrs={"reverse": (0,), "linear_before_reset": 0},
            doc="GRU " + _CELL_DOC + ", bias [D, Hp] (the h gate's recurrent bias Rbh); gates z, r, h")
register_op("nn.rnn_cell", inputs=4, pattern=Pattern.OPAQUE, op_class="dense", infer=_cell_infer("nn.rnn_cell"),
            ref=_rnn_ref, compute=_rnn_compute, flops=_cell_flops, attrs={"reverse": (0,)},
            doc="RNN (tanh) " + _CELL_DOC)


# ---------------------------------------------------------------------------------------------- scan

def scan_step_types(arg_types) -> list:
    """The argument types of one step of a scan (the cell's: xp, steps, state, weight, extra) from the scan's
    (xp, initial state, weight, extra)."""
    xp, state, *rest = arg_types
    return [xp, TensorType((2,), "int32"), state, *rest]


def scan_length(xp_type, state_type):
    """The scan's number of steps T: xp's rows over the batch (exact, also over run-time sizes)."""
    rows, batch = xp_type.shape[0], state_type.shape[3]
    steps = exact_quotient(rows, batch)
    if steps is None:
        raise OpError(f"nn.recurrent_scan: xp has {rows} rows, not a multiple of the batch {batch}")
    return steps


def _scan_infer(arg_types, attrs):
    if attrs.cell not in CELLS:
        raise OpError(f"nn.recurrent_scan: cell must be one of {sorted(CELLS)}, got {attrs.cell!r}")
    if len(arg_types) != 3 + _extra_inputs(attrs.cell, attrs):
        raise OpError(f"nn.recurrent_scan of {attrs.cell}: expected xp, state, weight"
                      f"{_EXTRA_DOC.get(attrs.cell, '') if _extra_inputs(attrs.cell, attrs) else ''}, got "
                      f"{len(arg_types)} inputs")
    state = _cell_infer(attrs.cell)(scan_step_types(arg_types), attrs)
    return TensorType((scan_length(arg_types[0], state),) + state.shape[1:], state.dtype)


def _scan_ref(xp, state, weight, *extra, cell, reverse, linear_before_reset, quantize_state):
    length, history = xp.shape[0] // state.shape[3], []
    for s in range(length):
        steps = np.array([s, length - 1 - s], np.int32)
        if cell == "nn.lstm_cell":
            state = _lstm_ref(xp, steps, state, weight, *extra, reverse=reverse, quantize_state=quantize_state)
        elif cell == "nn.gru_cell":
            state = _gru_ref(xp, steps, state, weight, extra[0], reverse, linear_before_reset)
        else:
            state = _rnn_ref(xp, steps, state, weight, reverse)
        history.append(state)
    return np.concatenate(history, axis=0)


# no compute: a scan's steps are one kernel, its cell's, that the generic module calls once per step
# (compiler/generic.py); static sequence lengths are unrolled into cells by the frontend
register_op("nn.recurrent_scan", inputs=None, pattern=Pattern.OPAQUE, op_class="dense", infer=_scan_infer,
            ref=_scan_ref, attrs={"cell": "nn.lstm_cell", "reverse": (0,), "linear_before_reset": 0,
                                  "quantize_state": 0},
            doc="every step of a recurrent layer over a sequence length known only at run time: xp [T*B, D*G*Hp], "
                "the initial state [1, D, S, B, Hp], the packed weight (and a GRU's bias) -> the history of the "
                "states [T, D, S, B, Hp], step s's state the `cell` of step s - 1's (the cells' shapes above)")


# ---------------------------------------------------------------------------------------------- output sequence

def _output_infer(arg_types, attrs):
    op = "nn.recurrent_output"
    hist, = arg_types
    if hist.ndim != 5:
        raise OpError(f"{op}: the history must be [steps, directions, slots, batch, hidden], got {hist.shape}")
    steps, dirs, _, batch, padded = hist.shape
    _reverse(op, attrs, dirs)
    if not 1 <= attrs.hidden <= padded:
        raise OpError(f"{op}: hidden={attrs.hidden} must be in [1, {padded}]")
    return TensorType((batch, steps, dirs, attrs.hidden) if attrs.batch_major else (steps, dirs, batch, attrs.hidden),
                      hist.dtype)


def _output_ref(hist, reverse, hidden, batch_major):
    y = np.stack([hist[::-1, d, 0, :, :hidden] if r else hist[:, d, 0, :, :hidden] for d, r in enumerate(reverse)],
                 axis=1)
    return np.ascontiguousarray(y.transpose(2, 0, 1, 3) if batch_major else y)


def _output_compute(inputs, attrs, out_type):
    hist, = inputs
    last = hist.shape[0] - 1

    def body(*i):
        t, d, b, j = (i[1], i[2], i[0], i[3]) if attrs.batch_major else i
        if len(attrs.reverse) == 1:
            time = last - t if attrs.reverse[0] else t
        else:  # (0, 1): direction 1 runs backwards
            time = t + d * (last - 2 * t)
        return hist[time, d, 0, b, j]
    return te.compute(out_type.shape, body, name="recurrent_output", tag="injective")


# OPAQUE: a fusion barrier, so that the concatenation of the states before it stays a kernel of its own, which the
# memory plan elides (each state is written in place)
register_op("nn.recurrent_output", inputs=1, pattern=Pattern.OPAQUE, op_class="layout", infer=_output_infer,
            ref=_output_ref, compute=_output_compute, attrs={"reverse": (0,), "hidden": 1, "batch_major": 0},
            doc="a recurrent layer's Y from the history of its states [T, D, S, B, Hp]: slot 0's first `hidden` "
                "units, time-ordered (reverse directions read the history backwards); [T, D, B, H], or [B, T, D, H] "
                "with batch_major")
