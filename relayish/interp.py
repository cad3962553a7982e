"""The numpy interpreter: evaluates any relayish graph with the ops' numpy references. The oracle of every test.

Every node is evaluated exactly once, in post order. A Call of a primitive Function (a fused group) evaluates the
Function's body recursively with its parameters bound to the call's arguments. Intermediate arrays are dropped
as soon as their last consumer has run, so whole models fit in memory.

Invariant checked at every Call: the reference returns an array of exactly the shape the op's shape rule
declared (a mismatch is a bug in the op declaration and raises), cast to the declared dtype.
"""
from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

import numpy as np

from .expr import (Call, Constant, Expr, Function, TensorType, Tuple, TupleGetItem, TupleType, Var, children,
                   free_vars, post_order)
from .module import IRModule
from .op import get_op
from .types import is_static_dim


def evaluate(target: "IRModule | Function | Expr", inputs: "Mapping[str, np.ndarray] | Sequence[np.ndarray]" = ()
             ) -> list[np.ndarray]:
    """Evaluate an IRModule, a Function or an expression; returns one array per output.

    inputs: a dict keyed by input (parameter / free Var) name, or a list in parameter order (for an expression:
    the order of free_vars, i.e. first use in post order). Inputs are cast to the declared dtype. A tuple-typed result
    is flattened into its fields (an IRModule's outputs are the fields of its main body's tuple)."""
    fn = target.main if isinstance(target, IRModule) else target
    if isinstance(fn, Function):
        params, body = list(fn.params), fn.body
    else:
        params, body = free_vars(fn), fn
    env = _bind_inputs(params, inputs)
    result = _eval_body(body, env)
    # copies: an output may alias an input, a Constant's read-only data or another output
    return [np.array(v) for v in _flatten(result)]


def evaluate_one(target, inputs=()) -> np.ndarray:
    """evaluate() of something with exactly one output."""
    out = evaluate(target, inputs)
    if len(out) != 1:
        raise ValueError(f"evaluate_one: expected 1 output, got {len(out)}")
    return out[0]


def _bind_inputs(params: list[Var], inputs) -> dict[Var, np.ndarray]:
    if isinstance(inputs, Mapping):
        missing = [p.name for p in params if p.name not in inputs]
        if missing:
            raise ValueError(f"evaluate: missing input(s) {missing}; given {sorted(inputs)}")
        unknown = set(inputs) - {p.name for p in params}
        if unknown:
            raise ValueError(f"evaluate: unknown input(s) {sorted(unknown)}; expected {[p.name for p in params]}")
        values = [inputs[p.name] for p in params]
    else:
        values = list(inputs)
        if len(values) != len(params):
            raise ValueError(f"evaluate: expected {len(params)} inputs {[p.name for p in params]}, "
                             f"got {len(values)}")
    return {p: _check_input(p, v) for p, v in zip(params, values)}


def _check_input(param: Var, value) -> np.ndarray:
    ty = param.type
    if not isinstance(ty, TensorType):
        raise TypeError(f"evaluate: input {param.name!r} has non-tensor type {ty}")
    arr = np.asarray(value)
    if arr.shape != ty.shape:
        raise ValueError(f"evaluate: input {param.name!r} expects shape {ty.shape}, got {arr.shape}")
    return arr.astype(ty.dtype, copy=False)


def _eval_body(body: Expr, env: dict):
    """Evaluate body given values for its free Vars in env (keyed by Var). Frees intermediates after last use."""
    nodes = list(post_order(body))
    uses = Counter(id(c) for n in nodes for c in children(n))
    values: dict[int, object] = {}
    for node in nodes:
        if isinstance(node, Function):
            raise TypeError("evaluate: a Function used as a value (not as a Call target) is not supported")
        values[id(node)] = _eval_node(node, values, env)
        for c in children(node):
            uses[id(c)] -= 1
            if uses[id(c)] == 0 and c is not body:
                values.pop(id(c), None)
    return values[id(body)]


def _eval_node(node: Expr, values: dict, env: dict):
    if isinstance(node, Var):
        try:
            return env[node]
        except KeyError:
            raise ValueError(f"evaluate: no value bound for variable %{node.name}") from None
    if isinstance(node, Constant):
        return node.data
    if isinstance(node, Tuple):
        return tuple(values[id(f)] for f in node.fields)
    if isinstance(node, TupleGetItem):
        return values[id(node.tuple_value)][node.index]
    if isinstance(node, Call):
        args = [values[id(a)] for a in node.args]
        if isinstance(node.op, Function):
            fn = node.op
            return _eval_body(fn.body, dict(zip(fn.params, args)))
        return _run_op(node, args)
    raise TypeError(f"evaluate: cannot evaluate node {type(node).__name__}")


def _run_op(node: Call, args: list) -> np.ndarray:
    opdef = get_op(node.op)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # IEEE results (inf, NaN) are the answer
        out = np.asarray(opdef.ref(*args, **node.attrs.as_dict()))
    ty = node.type
    if isinstance(ty, TupleType):
        raise TypeError(f"evaluate: {node.op} returns a tuple type, which op references do not support")
    # (a dim known only at run time, a data-sized op's, is what the reference gives)
    if len(out.shape) != len(ty.shape) or any(is_static_dim(d) and d != n for d, n in zip(ty.shape, out.shape)):
        raise AssertionError(f"{node.op}: reference returned shape {out.shape}, "
                             f"but the shape rule declared {ty.shape}")
    return out.astype(ty.dtype, copy=False)


def _flatten(value):
    if isinstance(value, tuple):
        for v in value:
            yield from _flatten(v)
    else:
        yield value
