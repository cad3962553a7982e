"""relayish: the graph IR (typed immutable nodes, op registry, type inference, printer, numpy interpreter)."""
from .expr import (Attrs, Call, Constant, Expr, Function, TensorType, Tuple, TupleGetItem, TupleType, Var, call,
                   const, free_vars, post_order, rebuild)
from .module import IRModule
from .op import OpError, Pattern, get_op, list_ops, register_op
