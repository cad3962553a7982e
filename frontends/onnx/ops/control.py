"""Converters of the control-flow ops, decided at import: If (the branch cond takes, inlined), Loop (the body
unrolled: the trip count and the conditions known at import) and Scan (unrolled over the scan axis). Their graph
attributes are converted in the node's scope by the `_scope` the importer passes (importer.SubgraphScope).
Conventions: frontends/onnx/registry.py.
"""
from __future__ import annotations

import numpy as np

from relayish import Constant, Expr, const

from ..builders import fold, reshape, shape_of
from ..registry import converter
from ..values import ConversionError, constant_value


# ---- If, Loop ----

MAX_UNROLL = 200  # loop iterations unrolled at most (each adds the body to the graph, whose passes recurse)


def _flag_value(expr: Expr, what: str) -> bool:
    value = constant_value(expr, what)
    if value.size != 1:
        raise ConversionError(f"input {what!r} must hold one value, got shape {value.shape}")
    return bool(value.reshape(-1)[0])


@converter("If", since=1)
def if_(cond, *, then_branch, else_branch, _scope=None):
    """The branch that cond takes, inlined. cond must be known at import (a constant, or computed from graph inputs
    whose values then select the compilation: compiler/specialize.py)."""
    taken, name = (then_branch, "then_branch") if _flag_value(cond, "cond") else (else_branch, "else_branch")
    if len(taken.input):
        raise ConversionError(f"{name} has inputs {[i.name for i in taken.input]}: a branch takes none")
    outputs = _scope.convert(taken, {}, f"subgraph {name}")
    return tuple(outputs)


@converter("Loop", since=1)
def loop(max_trip_count=None, cond=None, *v_initial, body, _scope=None):
    """The body unrolled (at most MAX_UNROLL times): the trip count and the condition (the input and each
    iteration's cond output) must be known at import. Scan outputs are the per-iteration values stacked on a new
    first axis; they must have one shape in every iteration. An absent cond input means true; the body's cond
    output is read in every iteration all the same (as onnxruntime does)."""
    if max_trip_count is None and cond is None:
        raise ConversionError("a Loop with neither a trip count nor a condition never ends")
    trips = None
    if max_trip_count is not None:
        value = constant_value(max_trip_count, "M")
        if value.size != 1:
            raise ConversionError(f"input 'M' must hold one value, got shape {value.shape}")
        trips = int(value.reshape(-1)[0])
        if trips > MAX_UNROLL:
            raise ConversionError(f"trip count {trips} is above the {MAX_UNROLL} iterations a loop is unrolled to")
    going = True if cond is None else _flag_value(cond, "cond")
    n_in, n_carried = len(body.input), len(v_initial)
    if n_in != n_carried + 2:
        raise ConversionError(f"the body has {n_in} inputs, expected 2 + {n_carried} loop-carried values")
    n_scan = len(body.output) - 1 - n_carried
    if n_scan < 0:
        raise ConversionError(f"the body has {len(body.output)} outputs, fewer than 1 + {n_carried}")
    iter_dtype = max_trip_count.type.dtype if max_trip_count is not None else "int64"
    carried, scans, i = list(v_initial), [[] for _ in range(n_scan)], 0
    names = [vi.name for vi in body.input]
    while going and (trips is None or i < trips):
        if i >= MAX_UNROLL:
            raise ConversionError(f"the loop runs more than the {MAX_UNROLL} iterations it is unrolled to")
        bound = {names[0]: const(i, iter_dtype), names[1]: Constant(np.array(going))}
        bound.update(zip(names[2:], carried))
        outs = _scope.convert(body, bound, f"body (iteration {i})")
        going = _flag_value(outs[0], "the body's cond output")
        carried = outs[1:1 + n_carried]
        for k, value in enumerate(outs[1 + n_carried:]):
            scans[k].append(value)
        i += 1
    stacked = []
    for k, values in enumerate(scans):
        if not values:
            raise ConversionError(f"scan output {k} of a loop that runs no iteration is empty (zero-size tensors "
                                  f"are not supported)")
        shapes = {shape_of(v) for v in values}
        if len(shapes) != 1:
            raise ConversionError(f"scan output {k} has different shapes in different iterations {sorted(shapes)}")
        stacked.append(fold("concatenate", *[reshape(v, (1,) + shape_of(v)) for v in values], axis=0))
    return tuple(carried + stacked)


# ---- Scan ----

def _scan_axes(values, count: int, ranks: list[int], what: str) -> list[int]:
    """Per tensor, its normalized axis from an ONNX axes attribute (default 0 for each)."""
    values = [0] * count if values is None else list(values)
    if len(values) != count:
        raise ConversionError(f"attribute {what} must have {count} value(s), got {values}")
    for axis, rank in zip(values, ranks):
        if not -rank <= axis < rank:
            raise ConversionError(f"attribute {what}: axis {axis} out of range for rank {rank}")
    return [a % r for a, r in zip(values, ranks)]


def _directions_attr(values, count: int, what: str) -> list[int]:
    values = [0] * count if values is None else list(values)
    if len(values) != count or any(v not in (0, 1) for v in values):
        raise ConversionError(f"attribute {what} must have {count} value(s) of 0 (forward) or 1 (reverse), got "
                              f"{values}")
    return values


def _scan(states, scanned, body, scope, in_axes, in_dirs, out_axes, out_dirs) -> tuple[Expr, ...]:
    """Unrolled over the scan axis: step t slices every scan input at t (or from the end, reversed), converts the
    body on (states, slices), carries its first N outputs as the states and stacks the others along their scan
    output axes (reversed ones in reverse). Returns the final states, then the stacked scan outputs."""
    m = len(scanned)
    in_axes = _scan_axes(in_axes, m, [len(shape_of(x)) for x in scanned], "scan_input_axes")
    in_dirs = _directions_attr(in_dirs, m, "scan_input_directions")
    lengths = {shape_of(x)[a] for x, a in zip(scanned, in_axes)}
    if len(lengths) != 1:
        raise ConversionError(f"scan inputs have different lengths {sorted(lengths)} along their scan axes")
    length = lengths.pop()
    k = len(body.output) - len(states)
    if k < 0:
        raise ConversionError(f"the body has {len(body.output)} outputs, fewer than the {len(states)} states")
    steps: list[list[Expr]] = [[] for _ in range(k)]
    for t in range(length):
        slices = []
        for x, axis, reverse in zip(scanned, in_axes, in_dirs):
            at = length - 1 - t if reverse else t
            part = fold("strided_slice", x, begin=(at,), end=(at + 1,), axes=(axis,))
            slices.append(reshape(part, shape_of(x)[:axis] + shape_of(x)[axis + 1:]))
        outs = scope.convert(body, list(states) + slices)
        for i, (old, new) in enumerate(zip(states, outs)):
            if shape_of(old) != shape_of(new) or old.type.dtype != new.type.dtype:
                raise ConversionError(f"state {i}: the body turns {shape_of(old)} {old.type.dtype} into "
                                      f"{shape_of(new)} {new.type.dtype}; a state must keep its shape and dtype")
        states = list(outs[:len(states)])
        for i, y in enumerate(outs[len(states):]):
            steps[i].append(y)
    if k and length == 0:
        raise ConversionError("a scan of length 0 has empty scan outputs: zero-size tensors are not supported")
    out_axes = _scan_axes(out_axes, k, [len(shape_of(s[0])) + 1 for s in steps], "scan_output_axes")
    out_dirs = _directions_attr(out_dirs, k, "scan_output_directions")
    stacked = []
    for parts, axis, reverse in zip(steps, out_axes, out_dirs):
        parts = [reshape(p, shape_of(p)[:axis] + (1,) + shape_of(p)[axis:])
                 for p in (parts[::-1] if reverse else parts)]
        stacked.append(parts[0] if len(parts) == 1 else fold("concatenate", *parts, axis=axis))
    return (*states, *stacked)


def _stack(parts: list[Expr]) -> Expr:
    """[x0, x1, ...] of one shape -> one tensor with a new leading axis."""
    parts = [reshape(p, (1,) + shape_of(p)) for p in parts]
    return parts[0] if len(parts) == 1 else fold("concatenate", *parts, axis=0)


@converter("Scan", since=8)
def scan_v8(sequence_lens=None, *inputs, body, num_scan_inputs, directions=None, _scope=None):
    """Scan-8: states [batch, ...] and scan inputs [batch, seq, ...]; each batch element is scanned on its own
    (over axis 1) and the results stacked on the batch axis. sequence_lens must be omitted or a constant of the
    full length (shorter sequences would need per-batch lengths the static unroll does not have)."""
    m = num_scan_inputs
    if not 1 <= m <= len(inputs) or any(i is None for i in inputs):
        raise ConversionError(f"num_scan_inputs={m} must be between 1 and the {len(inputs)} inputs after "
                              f"sequence_lens, none omitted")
    batch = {shape_of(x)[0] if shape_of(x) else None for x in inputs}
    if len(batch) != 1 or None in batch:
        raise ConversionError(f"every state and scan input must have one leading batch axis, got shapes "
                              f"{[shape_of(x) for x in inputs]}")
    batch = batch.pop()
    if any(len(shape_of(x)) < 2 for x in inputs[-m:]):
        raise ConversionError("scan inputs must be [batch, sequence, ...]")
    if sequence_lens is not None:
        full = shape_of(inputs[-1])[1]
        if not isinstance(sequence_lens, Constant) or not (sequence_lens.data == full).all():
            raise ConversionError(f"sequence_lens must be omitted or a constant equal to the sequence length {full}: "
                                  f"shorter sequences are not supported")
    per_batch = []
    for b in range(batch):
        items = [reshape(fold("strided_slice", x, begin=(b,), end=(b + 1,), axes=(0,)), shape_of(x)[1:])
                 for x in inputs]
        per_batch.append(_scan(items[:-m], items[-m:], body, _scope, None, directions, None, None))
    return tuple(_stack([r[i] for r in per_batch]) for i in range(len(per_batch[0])))


@converter("Scan", since=9)
def scan(*inputs, body, num_scan_inputs, scan_input_axes=None, scan_input_directions=None, scan_output_axes=None,
         scan_output_directions=None, _scope=None):
    """inputs: the N initial states, then the num_scan_inputs scan inputs (see _scan)."""
    m = num_scan_inputs
    if not 1 <= m <= len(inputs) or any(i is None for i in inputs):
        raise ConversionError(f"num_scan_inputs={m} must be between 1 and the {len(inputs)} inputs, none omitted")
    return _scan(list(inputs[:-m]), list(inputs[-m:]), body, _scope, scan_input_axes, scan_input_directions,
                 scan_output_axes, scan_output_directions)
