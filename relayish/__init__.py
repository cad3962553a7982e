"""relayish: the graph IR (typed immutable nodes, op registry, type inference, printer, numpy interpreter).

Importing relayish (or any module in it) imports `relayish.ops`, which registers every op: the registry is full
before anyone can ask it.
"""
from . import ops, te  # noqa: F401  (ops: registers every op)
from .expr import (Call, Constant, Expr, Function, Tuple, TupleGetItem, Var, astext, call, const, free_vars,
                   post_order, rebuild)
from .module import IRModule
from .op import OpError, Pattern, get_op, list_ops, register_op
from .types import Attrs, TensorType, TupleType
