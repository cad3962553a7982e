"""Converters of the recurrent ops RNN, GRU and LSTM (opsets 7, 14: the layout attribute, 22: bfloat16 types).
One nn.dense projects the inputs of every time step at once, then the recurrence is unrolled statically over the
(static) sequence length, in one of two forms:
- fused (rnn_cells.py), for the default activations without clip, every sequence full length (and LSTM
  without input_forget or peepholes): one cell op per step for every direction (relayish/ops/recurrent.py), one
  kernel each;
- composed, for everything else: per step and direction, an nn.dense of the hidden state plus the gate math as
  elementwise ops (a few kernels); the per-step outputs are concatenated.

Semantics are the ONNX schema's (which onnx's reference implementation only partly follows: it ignores the
activations, clip and sequence_lens attributes/inputs; onnxruntime implements them):
- activations: per direction, f (RNN), f, g (GRU) or f, g, h (LSTM); activation_alpha/activation_beta are
  consumed in order by the activations that take them (Affine, LeakyRelu, ThresholdedRelu, ScaledTanh,
  HardSigmoid, Elu), the others taking none, as onnxruntime does.
- clip bounds the input of the gate activations (f, g; not LSTM's h(C), as onnxruntime) to [-clip, clip].
- sequence_lens: a batch's steps at and past its length output zeros and leave its state unchanged, so Y_h (and
  Y_c) is the state after its last valid step (the first such step, reversed), zero for a length of 0 (as
  onnxruntime). Applied with selects on a per-batch mask when the lengths are a run-time input or shorter than
  the sequence; run-time lengths outside [0, seq_length] act as clamped to it (no memory is indexed by them).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from relayish import Constant, Expr, const
from relayish.types import is_float, is_static_dim

from ..builders import binary, fold, reshape, shape_of, transpose
from ..registry import converter
from ..values import ConversionError
from .rnn_cells import default_activations, packed_weight, pad_units, projection, run_layer, zero_constant

# activation name (lower case) -> (number of alpha values, number of beta values, default alpha, default beta)
_ACTIVATION_ARGS = {"relu": (0, 0), "tanh": (0, 0), "sigmoid": (0, 0), "softsign": (0, 0), "softplus": (0, 0),
                    "affine": (1, 1), "leakyrelu": (1, 0), "thresholdedrelu": (1, 0), "scaledtanh": (1, 1),
                    "hardsigmoid": (1, 1), "elu": (1, 0)}
_ACTIVATION_DEFAULTS = {"leakyrelu": (0.01, None), "thresholdedrelu": (1.0, None), "hardsigmoid": (0.2, 0.5),
                        "elu": (1.0, None)}


def _activation(name: str, alpha: float | None, beta: float | None) -> Callable[[Expr], Expr]:
    """The activation function `name` (any case) with its alpha/beta, as a builder of relayish expressions."""
    kind = name.lower()
    default_alpha, default_beta = _ACTIVATION_DEFAULTS.get(kind, (None, None))
    alpha = default_alpha if alpha is None else alpha
    beta = default_beta if beta is None else beta
    if kind in ("affine", "scaledtanh") and (alpha is None or beta is None):
        raise ConversionError(f"activation {name} needs its alpha and beta in activation_alpha/activation_beta")

    def scaled(x: Expr, factor: float) -> Expr:
        return binary("multiply", x, const(factor, x.type.dtype))

    builders = {
        "relu": lambda x: fold("nn.relu", x),
        "tanh": lambda x: fold("tanh", x),
        "sigmoid": lambda x: fold("sigmoid", x),
        "softsign": lambda x: fold("nn.softsign", x),
        "softplus": lambda x: fold("nn.softplus", x),
        "affine": lambda x: binary("add", scaled(x, alpha), const(beta, x.type.dtype)),
        "leakyrelu": lambda x: fold("nn.leaky_relu", x, alpha=alpha),
        "thresholdedrelu": lambda x: fold("nn.thresholded_relu", x, alpha=alpha),
        "scaledtanh": lambda x: scaled(fold("tanh", scaled(x, beta)), alpha),
        "hardsigmoid": lambda x: fold("hard_sigmoid", x, alpha=alpha, beta=beta),
        "elu": lambda x: fold("nn.elu", x, alpha=alpha),
    }
    return builders[kind]


def _activations(names, alphas, betas, defaults: tuple[str, ...], num_directions: int) -> list[list[Callable]]:
    """Per direction, the list of its activation functions (len(defaults) of them)."""
    per_dir = len(defaults)
    names = tuple(defaults) * num_directions if names is None else tuple(names)
    if len(names) != per_dir * num_directions:
        raise ConversionError(f"activations must list {per_dir} function(s) per direction ({num_directions} "
                              f"direction(s)), got {list(names)}")
    unknown = [n for n in names if n.lower() not in _ACTIVATION_ARGS]
    if unknown:
        raise ConversionError(f"unsupported activation(s) {unknown}; supported: Relu, Tanh, Sigmoid, Affine, "
                              f"LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus")
    alphas, betas = list(alphas or ()), list(betas or ())
    funcs = []
    for name in names:
        n_alpha, n_beta = _ACTIVATION_ARGS[name.lower()]
        alpha = float(alphas.pop(0)) if n_alpha and alphas else None
        beta = float(betas.pop(0)) if n_beta and betas else None
        funcs.append(_activation(name, alpha, beta))
    return [funcs[d * per_dir:(d + 1) * per_dir] for d in range(num_directions)]


# ---- checks of the inputs ----

def _num_directions(direction: str) -> int:
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ConversionError(f"direction must be 'forward', 'reverse' or 'bidirectional', got {direction!r}")
    return 2 if direction == "bidirectional" else 1


def _check_tensor(t: Expr | None, name: str, shape: tuple, dtype: str):
    if t is not None and (shape_of(t) != shape or t.type.dtype != dtype):
        raise ConversionError(f"input {name} must be {shape} of {dtype}, got {shape_of(t)} of {t.type.dtype}")


def _zeros(shape, dtype) -> Constant:
    return Constant(np.zeros(shape, dtype=np.dtype(dtype)))


class _Spec:
    """The checked inputs of a recurrent node, in the layout-0 ([seq, batch, ...]) form."""

    def __init__(self, x, w, r, b, sequence_lens, initial, *, gates, direction, hidden_size, layout, clip):
        if layout not in (0, 1):
            raise ConversionError(f"attribute layout must be 0 or 1, got {layout}")
        if len(shape_of(x)) != 3:
            raise ConversionError(f"input X must be 3-D, got shape {shape_of(x)}")
        dtype = x.type.dtype
        if not is_float(dtype) or dtype in ("float16", "bfloat16"):
            raise ConversionError(f"input X must be float32 or float64, got {dtype}")
        if layout:
            x = transpose(x, (1, 0, 2))
        self.seq, self.batch, inputs = shape_of(x)
        self.dirs = _num_directions(direction)
        if len(shape_of(r)) != 3:
            raise ConversionError(f"input R must be 3-D [num_directions, {gates} * hidden_size, hidden_size], got "
                                  f"shape {shape_of(r)}")
        hidden = shape_of(r)[2]
        if hidden_size is not None and hidden_size != hidden:
            raise ConversionError(f"attribute hidden_size={hidden_size} does not match R's shape {shape_of(r)}")
        self.hidden, self.dtype, self.x = hidden, dtype, x
        _check_tensor(w, "W", (self.dirs, gates * hidden, inputs), dtype)
        _check_tensor(r, "R", (self.dirs, gates * hidden, hidden), dtype)
        _check_tensor(b, "B", (self.dirs, 2 * gates * hidden), dtype)
        self.w, self.r = w, r
        self.b = _zeros((self.dirs, 2 * gates * hidden), dtype) if b is None else b
        if clip is not None and not clip > 0:
            raise ConversionError(f"attribute clip must be positive, got {clip}")
        self.clip = clip
        self.initial = []
        for name, state in initial:
            if state is not None:
                if layout:
                    _check_tensor(state, name, (self.batch, self.dirs, hidden), dtype)
                    state = transpose(state, (1, 0, 2))
                _check_tensor(state, name, (self.dirs, self.batch, hidden), dtype)
            self.initial.append(_zeros((self.dirs, self.batch, hidden), dtype) if state is None else state)
        self.masks = self._masks(sequence_lens)
        self.layout = layout

    def _masks(self, lens: Expr | None) -> list[Expr] | None:
        """Per time step, a [batch, 1] bool 'step is within this batch's length', or None if every step is."""
        if lens is None:
            return None
        if not is_static_dim(self.seq):
            raise ConversionError(f"input sequence_lens over a sequence length known only at run time "
                                  f"({self.seq}) is not supported")
        if shape_of(lens) != (self.batch,) or lens.type.dtype != "int32":
            raise ConversionError(f"input sequence_lens must be int32 [batch={self.batch}], got {shape_of(lens)} of "
                                  f"{lens.type.dtype}")
        if isinstance(lens, Constant):
            values = lens.data
            if ((values < 0) | (values > self.seq)).any():
                raise ConversionError(f"sequence_lens {values.tolist()} must lie in [0, seq_length={self.seq}]")
            if (values == self.seq).all():
                return None
        column = reshape(lens, (self.batch, 1))
        # a batch of length 0 has zero final states, not its initial ones (as onnxruntime; ONNX does not say)
        self.nonempty = fold("less", const(0, "int32"), column)
        return [fold("less", const(t, "int32"), column) for t in range(self.seq)]

    def clipped(self, x: Expr) -> Expr:
        return x if self.clip is None else fold("clip", x, a_min=-float(self.clip), a_max=float(self.clip))

    def take(self, t: Expr, d: int) -> Expr:
        """Direction d's slice of a [num_directions, ...] tensor, without that axis."""
        return reshape(fold("strided_slice", t, begin=(d,), end=(d + 1,), axes=(0,)), shape_of(t)[1:])


def _cols(x: Expr, begin: int, end: int) -> Expr:
    """Columns [begin, end) of a 2-D tensor."""
    return fold("strided_slice", x, begin=(begin,), end=(end,), axes=(1,))


def _rows(x: Expr, begin: int, end: int) -> Expr:
    return fold("strided_slice", x, begin=(begin,), end=(end,), axes=(0,))


def _project_inputs(spec: _Spec, w: Expr, bias: Expr | None, dense: Callable | None = None) -> list[Expr]:
    """x_t @ w^T + bias for every step t at once (one nn.dense, or dense(x) if given), as a list of [batch, units]
    per step."""
    if not is_static_dim(spec.seq):
        raise ConversionError(f"over a sequence length known only at run time ({spec.seq}), a recurrent layer "
                              f"runs in its fused form only: the default activations, no clip, no peepholes or "
                              f"input_forget (LSTM), float weights")
    seq, batch, inputs = shape_of(spec.x)
    units = shape_of(w)[0]
    flat = reshape(spec.x, (seq * batch, inputs))
    proj = fold("nn.dense", flat, w) if dense is None else dense(flat)
    if bias is not None:
        proj = binary("add", proj, reshape(bias, (1, units)))
    proj = reshape(proj, (seq, batch, units))
    return [reshape(fold("strided_slice", proj, begin=(t,), end=(t + 1,), axes=(0,)), (batch, units))
            for t in range(seq)]


def _unroll(spec: _Spec, reverse: bool, step, states: list[Expr]):
    """Run `step(t, states) -> (new states)` over the time steps (in reverse if asked), the first state being the
    output. Returns (the output per time step in time order, the final states)."""
    order = range(spec.seq - 1, -1, -1) if reverse else range(spec.seq)
    outputs: dict[int, Expr] = {}
    for t in order:
        new = step(t, states)
        if spec.masks is not None:
            mask = spec.masks[t]
            new = [fold("where", mask, n, s) for n, s in zip(new, states)]
            outputs[t] = fold("where", mask, new[0], const(0.0, spec.dtype))
        else:
            outputs[t] = new[0]
        states = list(new)
    if spec.masks is not None:
        states = [fold("where", spec.nonempty, s, const(0.0, spec.dtype)) for s in states]
    return [outputs[t] for t in range(spec.seq)], states


def _outputs(spec: _Spec, per_direction: list[tuple[list[Expr], list[Expr]]]) -> tuple[Expr, ...]:
    """(Y, Y_h[, Y_c]) in the node's layout from each direction's per-step outputs and final states."""
    b, h = spec.batch, spec.hidden
    ys = [fold("concatenate", *[reshape(y, (1, 1, b, h)) for y in steps], axis=0) for steps, _ in per_direction]
    y = ys[0] if len(ys) == 1 else fold("concatenate", *ys, axis=1)
    finals = []
    for i in range(len(per_direction[0][1])):
        parts = [reshape(states[i], (1, b, h)) for _, states in per_direction]
        finals.append(parts[0] if len(parts) == 1 else fold("concatenate", *parts, axis=0))
    if spec.layout:
        y = transpose(y, (2, 0, 1, 3))
        finals = [transpose(f, (1, 0, 2)) for f in finals]
    return (y, *finals)


def _directions(direction: str) -> list[bool]:
    """Per direction index, whether it runs in reverse."""
    return {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]


def _reverse_flags(direction: str) -> tuple[int, ...]:
    return tuple(int(r) for r in _directions(direction))


def _fast(spec: _Spec, activations, defaults: tuple[str, ...]) -> bool:
    """Whether the layer takes the fast form (rnn_cells.py: one fused kernel per step for every direction):
    the default activations, no clip, every sequence full length. Anything else is the unrolled composition below
    (a few kernels per step and direction)."""
    return default_activations(activations, defaults, spec.dirs) and spec.clip is None and spec.masks is None


# ---- RNN ----

def _rnn(x, w, r, b, sequence_lens, initial_h, *, activation_alpha, activation_beta, activations, clip, direction,
         hidden_size, layout):
    spec = _Spec(x, w, r, b, sequence_lens, [("initial_h", initial_h)], gates=1, direction=direction,
                 hidden_size=hidden_size, layout=layout, clip=clip)
    funcs = _activations(activations, activation_alpha, activation_beta, ("Tanh",), spec.dirs)
    h = spec.hidden
    if _fast(spec, activations, ("Tanh",)):
        bias = binary("add", _cols(spec.b, 0, h), _cols(spec.b, h, 2 * h))
        return run_layer(spec, "nn.rnn_cell", projection(spec, w, bias, 1), packed_weight(spec, r, 1),
                         _reverse_flags(direction))
    results = []
    for d, reverse in enumerate(_directions(direction)):
        bias = spec.take(spec.b, d)
        xs = _project_inputs(spec, spec.take(w, d), binary("add", _rows(bias, 0, h), _rows(bias, h, 2 * h)))
        rd, (f,) = spec.take(r, d), funcs[d]

        def step(t, states, xs=xs, rd=rd, f=f):
            return [f(spec.clipped(binary("add", xs[t], fold("nn.dense", states[0], rd))))]
        results.append(_unroll(spec, reverse, step, [spec.take(spec.initial[0], d)]))
    return _outputs(spec, results)


@converter("RNN", since=7)
def rnn_v7(x, w, r, b=None, sequence_lens=None, initial_h=None, *, activation_alpha=None, activation_beta=None,
           activations=None, clip=None, direction="forward", hidden_size=None):
    return _rnn(x, w, r, b, sequence_lens, initial_h, activation_alpha=activation_alpha,
                activation_beta=activation_beta, activations=activations, clip=clip, direction=direction,
                hidden_size=hidden_size, layout=0)


@converter("RNN", since=14)
def rnn_v14(x, w, r, b=None, sequence_lens=None, initial_h=None, *, activation_alpha=None, activation_beta=None,
            activations=None, clip=None, direction="forward", hidden_size=None, layout=0):
    return _rnn(x, w, r, b, sequence_lens, initial_h, activation_alpha=activation_alpha,
                activation_beta=activation_beta, activations=activations, clip=clip, direction=direction,
                hidden_size=hidden_size, layout=layout)


# ---- GRU ----

def _gru(x, w, r, b, sequence_lens, initial_h, *, activation_alpha, activation_beta, activations, clip, direction,
         hidden_size, layout, linear_before_reset):
    """Gates z, r, h (in that order in W, R and B): z = f(Xz + Hz), r = f(Xr + Hr),
    h = g(Xh + (r * H) @ Rh^T + Rbh), or with linear_before_reset g(Xh + r * (H @ Rh^T + Rbh));
    H' = (1 - z) * h + z * H."""
    if linear_before_reset not in (0, 1):
        raise ConversionError(f"attribute linear_before_reset must be 0 or 1, got {linear_before_reset}")
    spec = _Spec(x, w, r, b, sequence_lens, [("initial_h", initial_h)], gates=3, direction=direction,
                 hidden_size=hidden_size, layout=layout, clip=clip)
    funcs = _activations(activations, activation_alpha, activation_beta, ("Sigmoid", "Tanh"), spec.dirs)
    h, one = spec.hidden, const(1.0, spec.dtype)
    if _fast(spec, activations, ("Sigmoid", "Tanh")):
        # z and r take both biases with the input projection, h only Wbh: Rbh goes to the cell (inside the reset
        # gate's product with linear_before_reset)
        wb, rb = _cols(spec.b, 0, 3 * h), _cols(spec.b, 3 * h, 6 * h)
        bias = fold("concatenate", binary("add", _cols(wb, 0, 2 * h), _cols(rb, 0, 2 * h)), _cols(wb, 2 * h, 3 * h),
                    axis=1)
        return run_layer(spec, "nn.gru_cell", projection(spec, w, bias, 3), packed_weight(spec, r, 3),
                         _reverse_flags(direction), (pad_units(_cols(rb, 2 * h, 3 * h), 1, h),),
                         linear_before_reset=linear_before_reset)
    results = []
    for d, reverse in enumerate(_directions(direction)):
        bias = spec.take(spec.b, d)
        wb, rb = _rows(bias, 0, 3 * h), _rows(bias, 3 * h, 6 * h)
        # z and r take both biases with the input projection; h's recurrent bias Rbh stays with the recurrence
        zr_bias = binary("add", _rows(wb, 0, 2 * h), _rows(rb, 0, 2 * h))
        xs = _project_inputs(spec, spec.take(w, d), fold("concatenate", zr_bias, _rows(wb, 2 * h, 3 * h), axis=0))
        rd, rbh, (f, g) = spec.take(r, d), reshape(_rows(rb, 2 * h, 3 * h), (1, h)), funcs[d]

        def step(t, states, xs=xs, rd=rd, rbh=rbh, f=f, g=g):
            hprev = states[0]
            if linear_before_reset:
                rec = fold("nn.dense", hprev, rd)
                rec_zr, rec_h = _cols(rec, 0, 2 * h), binary("add", _cols(rec, 2 * h, 3 * h), rbh)
            else:
                rec_zr = fold("nn.dense", hprev, _rows(rd, 0, 2 * h))
            zr = f(spec.clipped(binary("add", _cols(xs[t], 0, 2 * h), rec_zr)))
            z, reset = _cols(zr, 0, h), _cols(zr, h, 2 * h)
            if linear_before_reset:
                rec_h = binary("multiply", reset, rec_h)
            else:
                rec_h = binary("add", fold("nn.dense", binary("multiply", reset, hprev), _rows(rd, 2 * h, 3 * h)),
                                rbh)
            cand = g(spec.clipped(binary("add", _cols(xs[t], 2 * h, 3 * h), rec_h)))
            return [binary("add", binary("multiply", binary("subtract", one, z), cand),
                            binary("multiply", z, hprev))]
        results.append(_unroll(spec, reverse, step, [spec.take(spec.initial[0], d)]))
    return _outputs(spec, results)


@converter("GRU", since=7)
def gru_v7(x, w, r, b=None, sequence_lens=None, initial_h=None, *, activation_alpha=None, activation_beta=None,
           activations=None, clip=None, direction="forward", hidden_size=None, linear_before_reset=0):
    return _gru(x, w, r, b, sequence_lens, initial_h, activation_alpha=activation_alpha,
                activation_beta=activation_beta, activations=activations, clip=clip, direction=direction,
                hidden_size=hidden_size, layout=0, linear_before_reset=linear_before_reset)


@converter("GRU", since=14)
def gru_v14(x, w, r, b=None, sequence_lens=None, initial_h=None, *, activation_alpha=None, activation_beta=None,
            activations=None, clip=None, direction="forward", hidden_size=None, layout=0, linear_before_reset=0):
    return _gru(x, w, r, b, sequence_lens, initial_h, activation_alpha=activation_alpha,
                activation_beta=activation_beta, activations=activations, clip=clip, direction=direction,
                hidden_size=hidden_size, layout=layout, linear_before_reset=linear_before_reset)


# ---- LSTM ----

def lstm(x, w, r, b, sequence_lens, initial_h, initial_c, p, *, activation_alpha, activation_beta, activations,
          clip, direction, hidden_size, input_forget, layout, dense: Callable | None = None,
          quantized: Callable | None = None):
    """Gates i, o, f, c (in that order in W, R and B; peepholes P in the order i, o, f):
    i = f(Xi + Hi + Pi * C), f = f(Xf + Hf + Pf * C) (or 1 - i with input_forget), c = g(Xc + Hc),
    C' = f * C + i * c, o = f(Xo + Ho + Po * C'), H' = o * h(C').
    For onnxruntime's DynamicQuantizeLSTM (contrib_qmatmul.py), whose products quantize X and H to uint8 at run
    time: the composed form computes dense(direction, "W" or "R", x), x @ W^T (R^T) of that direction (default:
    nn.dense with W and R); the fused form, where it applies, takes quantized(spec, bias) -> (xp, R's integers less
    their zero points in LSTM's layout, R's scales [D, G*Hp]) for cells that quantize H (quantize_state); bias:
    W's and R's biases summed, [D, 4H]."""
    if input_forget not in (0, 1):
        raise ConversionError(f"attribute input_forget must be 0 or 1, got {input_forget}")
    spec = _Spec(x, w, r, b, sequence_lens, [("initial_h", initial_h), ("initial_c", initial_c)], gates=4,
                 direction=direction, hidden_size=hidden_size, layout=layout, clip=clip)
    funcs = _activations(activations, activation_alpha, activation_beta, ("Sigmoid", "Tanh", "Tanh"), spec.dirs)
    h, one = spec.hidden, const(1.0, spec.dtype)
    _check_tensor(p, "P", (spec.dirs, 3 * h), spec.dtype)
    fused = dense is None or quantized is not None  # the fused cells read float W and R or quantized's parts
    if fused and _fast(spec, activations, ("Sigmoid", "Tanh", "Tanh")) and not input_forget and zero_constant(p):
        bias = binary("add", _cols(spec.b, 0, 4 * h), _cols(spec.b, 4 * h, 8 * h))
        if quantized is not None:
            xp, integers, scales = quantized(spec, bias)
            return run_layer(spec, "nn.lstm_cell", xp, packed_weight(spec, integers, 4), _reverse_flags(direction),
                             extra=(scales,), quantize_state=1)
        return run_layer(spec, "nn.lstm_cell", projection(spec, w, bias, 4), packed_weight(spec, r, 4),
                         _reverse_flags(direction))
    results = []
    for d, reverse in enumerate(_directions(direction)):
        bias = spec.take(spec.b, d)
        xs = _project_inputs(spec, spec.take(w, d), binary("add", _rows(bias, 0, 4 * h), _rows(bias, 4 * h, 8 * h)),
                             None if dense is None else (lambda a, d=d: dense(d, "W", a)))
        rd, (f, g, hact) = spec.take(r, d), funcs[d]
        recur = (lambda a, rd=rd: fold("nn.dense", a, rd)) if dense is None else (lambda a, d=d: dense(d, "R", a))
        peep = None if p is None else [reshape(_rows(spec.take(p, d), k * h, (k + 1) * h), (1, h))
                                       for k in range(3)]

        def step(t, states, xs=xs, recur=recur, peep=peep, f=f, g=g, hact=hact):
            hprev, cprev = states
            gates = binary("add", xs[t], recur(hprev))
            pre_i, pre_o, pre_f, pre_c = (_cols(gates, k * h, (k + 1) * h) for k in range(4))
            if peep is not None:
                pre_i = binary("add", pre_i, binary("multiply", peep[0], cprev))
                pre_f = binary("add", pre_f, binary("multiply", peep[2], cprev))
            i = f(spec.clipped(pre_i))
            forget = binary("subtract", one, i) if input_forget else f(spec.clipped(pre_f))
            cell = binary("add", binary("multiply", forget, cprev),
                           binary("multiply", i, g(spec.clipped(pre_c))))
            if peep is not None:
                pre_o = binary("add", pre_o, binary("multiply", peep[1], cell))
            o = f(spec.clipped(pre_o))
            return [binary("multiply", o, hact(cell)), cell]
        results.append(_unroll(spec, reverse, step, [spec.take(spec.initial[0], d),
                                                        spec.take(spec.initial[1], d)]))
    return _outputs(spec, results)


@converter("LSTM", since=7)
def lstm_v7(x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, *, activation_alpha=None,
            activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None,
            input_forget=0):
    return lstm(x, w, r, b, sequence_lens, initial_h, initial_c, p, activation_alpha=activation_alpha,
                 activation_beta=activation_beta, activations=activations, clip=clip, direction=direction,
                 hidden_size=hidden_size, input_forget=input_forget, layout=0)


@converter("LSTM", since=14)
def lstm_v14(x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, *, activation_alpha=None,
             activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None,
             input_forget=0, layout=0):
    return lstm(x, w, r, b, sequence_lens, initial_h, initial_c, p, activation_alpha=activation_alpha,
                 activation_beta=activation_beta, activations=activations, clip=clip, direction=direction,
                 hidden_size=hidden_size, input_forget=input_forget, layout=layout)
