"""Constant work is done once, at compile time: no kernel of a compiled module reads only constants.

fold_constants (passes/simplify.py) folds every op whose inputs are constants, before and after the layout pass.
What can still reach fusion with only constant inputs is a group that a later rewrite made constant; the last pass
evaluates every such primitive function with the numpy interpreter (`fold_constant_kernels`). The only kernels
allowed to read nothing but constants are the exceptions the rule states: an expansion (simplify.expands: a
result many times its inputs, cheaper computed than stored) and the copy that writes a constant graph output
(backend.materialize_outputs: an output is a fresh array on every call).

`check_constant_kernels` is the invariant's check: it names each offending kernel. The compile pipeline runs it
after materialize_outputs; it raises where RELAYISH_CHECK_INVARIANTS is set (the test suite sets it, so a path that
leaves constant work in a kernel fails a test) and is silent otherwise, the kernel still computing the right
values per run.
"""
from __future__ import annotations

import os

from relayish import Call, Constant, Function, IRModule
from relayish.expr import post_order, rebuild
from relayish.interp import evaluate

from .simplify import expands

INVARIANTS_ENV = "RELAYISH_CHECK_INVARIANTS"


class InvariantError(AssertionError):
    """A pipeline invariant does not hold: a compiler bug, named with what broke it."""


def _constant_group(node) -> bool:
    return isinstance(node, Call) and isinstance(node.op, Function) and bool(node.args) and \
        all(isinstance(a, Constant) for a in node.args)


def _fold_group(node):
    # fused(constants...) -> constant, evaluated by the interpreter (not an expansion: see simplify.expands)
    if not _constant_group(node) or expands(node.type, [a.data for a in node.args]):
        return None
    value, = evaluate(node.op, [a.data for a in node.args])
    return Constant(value)


def fold_constant_kernels(mod: IRModule) -> IRModule:
    """Evaluate every primitive function called with constant arguments only (but expansions)."""
    body = rebuild(mod.main.body, lambda old, node: _fold_group(node) or node)
    return mod.with_main(Function(mod.main.params, body, mod.main.attrs))


def constant_kernels(fused: IRModule) -> list[str]:
    """The kernels of a fused module that read only constants and are not allowed to: 'name (ops)' each."""
    bad = []
    for node in post_order(fused.main.body):
        if not _constant_group(node) or expands(node.type, [a.data for a in node.args]):
            continue
        ops = [n.op for n in post_order(node.op.body) if isinstance(n, Call) and isinstance(n.op, str)]
        if ops == ["copy"]:  # a constant graph output, written fresh on every call (materialize_outputs)
            continue
        bad.append(f"{','.join(ops)} -> {node.type}")
    return bad


def check_constant_kernels(fused: IRModule) -> None:
    """Raise InvariantError naming every kernel that reads only constants, when RELAYISH_CHECK_INVARIANTS is set."""
    if not os.environ.get(INVARIANTS_ENV):
        return
    bad = constant_kernels(fused)
    if bad:
        raise InvariantError(f"{len(bad)} kernel(s) read only constants (their work belongs at compile time): "
                             + "; ".join(bad))
