"""Tasks: a primitive (fused) Function turned into a tensor-level stage DAG, with a stable workload key.

The key is a hash of the computation (ops, attributes, shapes and dtypes in the order the function computes
them), not of the weights: two fused groups that compute the same thing on the same shapes are one task.
`extract_task_calls` is where a fused module's calls are deduplicated into tasks (the only place).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from relayish import te
from relayish.expr import Call, Constant, Function, Tuple, TupleGetItem, Var, post_order
from relayish.types import Attrs, TensorType
from relayish.op import get_op

from .schedule import State, initial_state


@dataclass(eq=False)
class Task:
    key: str
    name: str
    func: Function
    inputs: list  # te placeholders, one per function parameter
    outputs: list  # te tensors, one per function output
    flops: float
    weight: int = 1  # occurrences in the model(s)
    ops: list = field(default_factory=list)  # op names, in compute order
    # (conv site signature, its tile here, the rule's tile) when the task is one algorithm of a convolution with a
    # choice of algorithms and the tuner weighs them (compiler/algorithms.py), else None
    alternative: tuple | None = None
    # (the rule's channel block, {channel block: calls in the model compiled with that widest block}) for each block
    # whose model has this task, when the tuner weighs channel blocks (compiler/algorithms.py), else None
    blocks: tuple | None = None
    # per function parameter: whether the call the task was built from passes a constant (a weight), None unknown
    constant_inputs: tuple | None = None

    def activation_inputs(self) -> tuple[int, ...]:
        """Indices of the parameters a producer kernel writes just before the call in a model (not constants);
        () when unknown."""
        return tuple(i for i, c in enumerate(self.constant_inputs or ()) if not c)

    def initial_state(self) -> State:
        return initial_state(self.outputs, self.inputs)

    def __repr__(self):
        return f"Task({self.name}, key={self.key[:10]}, weight={self.weight}, flops={self.flops:.3g})"


@dataclass
class TaskCalls:
    """The kernel calls of a fused module and the tasks they run.

    calls: the module's primitive-function calls in execution order; tasks: unique by key, in first-use order,
    each built once, with weight = its number of calls; task_of[k]: the index in tasks of call k's task;
    prepared[k]: what extract_task_calls' `prepare` said of call k's function (None without one)."""
    calls: list  # of Call
    tasks: list  # of Task
    task_of: list  # of int, one per call
    prepared: list = field(default_factory=list)  # one per call


def primitive_calls(fused) -> list[Call]:
    """The primitive-function calls of a fused module (relayish Module), in execution order."""
    calls = [n for n in post_order(fused.main.body) if isinstance(n, Call)]
    for c in calls:
        if not isinstance(c.op, Function):
            raise AssertionError(f"op {c.op} outside a primitive function after fusion")
    return calls


def scan_of(func: Function) -> Call | None:
    """The nn.recurrent_scan call a primitive function is (its kernel is one step: scan_step), or None."""
    body = func.body
    return body if isinstance(body, Call) and body.op == "nn.recurrent_scan" else None


def scan_step(func: Function) -> Function:
    """The primitive function of one step of a scan function: its cell over (xp, steps, state, weight[, bias]),
    steps int32 [2] the forward and reverse time (relayish/ops/recurrent.py)."""
    scan = scan_of(func)
    xp, state, *rest = func.params
    steps = Var("steps", TensorType((2,), "int32"))
    attrs = {"reverse": scan.attrs["reverse"]}
    if scan.attrs["cell"] == "nn.gru_cell":
        attrs["linear_before_reset"] = scan.attrs["linear_before_reset"]
    if scan.attrs["cell"] == "nn.lstm_cell":
        attrs["quantize_state"] = scan.attrs["quantize_state"]
    params = (xp, steps, state, *rest)
    return Function(params, Call(scan.attrs["cell"], params, Attrs(attrs)), {"Primitive": 1})


def extract_task_calls(fused, prepare=None) -> TaskCalls:
    """Deduplicate a fused module's calls into tasks by workload key; a task is built for the first call only. A
    scan's task is one step of it (scan_step): its caller runs the kernel once per step. prepare(func) ->
    (func, info), when given, rewrites each call's function before its key is taken (the generic tier's own dims,
    compiler/generic.py); the infos are kept per call in `prepared`."""
    calls = primitive_calls(fused)
    index: dict[str, int] = {}
    tasks, task_of, prepared = [], [], []
    for c in calls:
        step = scan_step(c.op) if scan_of(c.op) is not None else c.op
        func, info = prepare(step) if prepare is not None else (step, None)
        prepared.append(info)
        key = workload_key(func)
        if key in index:
            tasks[index[key]].weight += 1
        else:
            index[key] = len(tasks)
            tasks.append(build_task(func))
            args = c.args if step is c.op else (c.args[0], None, *c.args[1:])  # a step's steps: written per step
            tasks[-1].constant_inputs = tuple(isinstance(a, Constant) for a in args)
        task_of.append(index[key])
    return TaskCalls(calls, tasks, task_of, prepared)


def extract_tasks(fused) -> list[Task]:
    """Unique tasks of a fused module with their weights (number of calls)."""
    return extract_task_calls(fused).tasks


def workload_key(func: Function) -> str:
    """A stable hash of the computation, shapes and dtypes of a primitive function."""
    ids, lines = {}, []
    for i, p in enumerate(func.params):
        ids[id(p)] = f"p{i}"
        lines.append(["param", _dims(p.type.shape), p.type.dtype])
    for node in post_order(func.body):
        if id(node) in ids:
            continue
        if isinstance(node, Call):
            if not isinstance(node.op, str):
                raise ValueError("nested function calls cannot form a task")
            attrs = [[k, _jsonable(v)] for k, v in node.attrs.items()]
            lines.append([node.op, [ids[id(a)] for a in node.args], attrs, _dims(node.type.shape), node.type.dtype])
        elif isinstance(node, Tuple):
            lines.append(["tuple", [ids[id(f)] for f in node.fields]])
        elif isinstance(node, TupleGetItem):
            lines.append(["get", ids[id(node.tuple_value)], node.index])
        elif isinstance(node, Constant):
            if node.type.size != 1:
                raise ValueError("a primitive function must take its non-scalar constants as parameters")
            lines.append(["const", list(node.type.shape), node.type.dtype, _jsonable(node.data.item())])
        elif isinstance(node, Var):
            raise ValueError(f"free variable {node.name} in a primitive function")
        ids[id(node)] = f"v{len(lines)}"
    text = json.dumps(lines, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _dims(shape) -> list:
    """A shape in a key: ints, and a dim known only at run time as its (canonical) expression's text."""
    return [d if isinstance(d, int) else str(d) for d in shape]


def _jsonable(v):
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return repr(v)
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, te.PrimExpr):  # a dim known only at run time (a reshape's newshape)
        return str(v)
    return v


def build_task(func: Function, name: str | None = None) -> Task:
    """Instantiate each op's compute definition over placeholders for the function's parameters. A function that
    is one op with no compute (its kernel written by hand, compiler/sequential.py) is a task with no stages."""
    body = func.body
    if isinstance(body, Call) and isinstance(body.op, str) and get_op(body.op).compute is None and \
            all(isinstance(a, Var) for a in body.args):
        return Task(workload_key(func), name or body.op, func, [], [], float("nan"), ops=[body.op])
    tensors: dict[int, te.Tensor] = {}
    inputs = []
    for i, p in enumerate(func.params):
        t = te.placeholder(p.type.shape, p.type.dtype, name=f"p{i}")
        tensors[id(p)] = t
        inputs.append(t)
    flops, ops = 0.0, []
    for node in post_order(func.body):
        if id(node) in tensors:
            continue
        if isinstance(node, Call):
            opdef = get_op(node.op)
            if opdef.compute is None:
                raise NotImplementedError(f"op {node.op} has no compute definition")
            args = [tensors[id(a)] for a in node.args]
            tensors[id(node)] = opdef.compute(args, node.attrs, node.type)
            arg_types = [a.type for a in node.args]
            if not all(t.is_static for t in arg_types + [node.type]):
                flops = float("nan")  # a task over sizes known only at run time: its flops are known then
            elif not flops != flops:
                flops += opdef.flops(arg_types, node.attrs, node.type) if opdef.flops else node.type.size
            ops.append(node.op)
        elif isinstance(node, Constant) and node.type.size == 1:
            value = te.const(node.data.item(), node.type.dtype)
            tensors[id(node)] = te.compute(node.type.shape, lambda *i: value, name="scalar")
        elif isinstance(node, (Tuple, TupleGetItem)):
            continue
        else:
            raise ValueError(f"unexpected {type(node).__name__} in a primitive function")
    body = func.body
    outs = body.fields if isinstance(body, Tuple) else (body,)
    outputs = [tensors[id(o)] for o in outs]
    outputs = [_ensure_compute(t, inputs) for t in outputs]
    if name is None:
        name = "fused_" + "_".join(o.replace("nn.", "") for o in ops[:4])
    return Task(workload_key(func), name, func, inputs, outputs, flops, ops=ops)


def _ensure_compute(t: te.Tensor, inputs) -> te.Tensor:
    """An output that is directly an input (identity function) gets a copy stage."""
    if isinstance(t.op, te.PlaceholderOp):
        return te.compute(t.shape, lambda *i: t[i], name="copy")
    return t
