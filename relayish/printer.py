"""The text form of the graph IR, in the style of Relay's A-normal-form printer.

    fn (%x: Tensor[(1, 3, 8, 8), float32]) -> Tensor[(1, 4, 8, 8), float32] {
      %0 = nn.conv2d(%x, meta[Constant][0] /* (4, 3, 3, 3) */, strides=[1, 1], ...) /* ty=Tensor[...] */;
      %1 = fn (%p0: Tensor[...], Primitive=1) -> Tensor[...] {
        nn.relu(%p0) /* ty=Tensor[...] */
      };
      %2 = %1(%0) /* ty=Tensor[...] */;
      %2
    }

Every Call, Tuple and TupleGetItem gets its own `%n = ...` line (each node printed once, however often it is
used); Vars and Constants are printed inline. Scalar constants print as their value, others as
`meta[Constant][k]` with their shape. Fused primitive Functions are printed nested and indented, bound to a `%n`
and then called. Numbering is shared by the whole text so that a name means one node.
"""
from __future__ import annotations

import numpy as np

from .expr import Call, Constant, Expr, Function, Tuple, TupleGetItem, Var, post_order
from .op import OpError, get_op

INDENT = "  "


def astext(node, show_types: bool = True) -> str:
    """The text of an expression, a Function or an IRModule (its main Function)."""
    from .module import IRModule
    if isinstance(node, IRModule):
        text = _Printer(show_types).top(node.main)
        return text + f"\n/* outputs: {', '.join(node.output_names)} */"
    return _Printer(show_types).top(node)


class _Printer:
    def __init__(self, show_types: bool):
        self.show_types = show_types
        self.names: dict[int, str] = {}  # id(node) -> how a use of the node is printed
        self.var_names: set[str] = set()
        self.constants: dict[int, int] = {}  # id(Constant) -> meta index
        self.counter = 0

    def top(self, node: Expr) -> str:
        if isinstance(node, Function):
            return "\n".join(self.function(node, 0))
        lines: list[str] = []
        result = self.block(node, 0, lines)
        return "\n".join(lines + [result])

    # -------------------------------------------------------------------------------------------- blocks

    def function(self, fn: Function, depth: int) -> list[str]:
        """Lines of `fn (params) -> type { ... }` at indentation depth (the first line is not indented)."""
        params = [f"{self.var(p)}: {p.type}" for p in fn.params]
        params += [f"{k}={_value(v)}" for k, v in fn.attrs.items()]
        lines = [f"fn ({', '.join(params)}) -> {fn.ret_type} {{"]
        body_lines: list[str] = []
        result = self.block(fn.body, depth + 1, body_lines)
        lines += body_lines + [INDENT * (depth + 1) + result, INDENT * depth + "}"]
        return lines

    def block(self, root: Expr, depth: int, lines: list[str]) -> str:
        """Append the `%n = ...;` lines of every non-atomic node under root; return how root itself reads.

        The root's own value is printed as the block's result: a Call root is printed in full, not bound."""
        pad = INDENT * depth
        for node in post_order(root):
            if id(node) in self.names or isinstance(node, (Var, Constant)):
                continue
            if isinstance(node, Function):  # a Function reached as a value (not as a Call target)
                self.bind_function(node, depth, lines)
                continue
            if isinstance(node, Call) and isinstance(node.op, Function) and id(node.op) not in self.names:
                self.bind_function(node.op, depth, lines)
            text = self.node_text(node)
            if node is root:
                return text
            name = self.fresh()
            lines.append(f"{pad}{name} = {text};")
            self.names[id(node)] = name
        return self.atom(root)

    def bind_function(self, fn: Function, depth: int, lines: list[str]):
        name = self.fresh()
        fn_lines = self.function(fn, depth)
        lines.append(f"{INDENT * depth}{name} = {fn_lines[0]}")
        lines.extend(fn_lines[1:-1])
        lines.append(fn_lines[-1] + ";")
        self.names[id(fn)] = name

    # -------------------------------------------------------------------------------------------- nodes

    def node_text(self, node: Expr) -> str:
        if isinstance(node, Call):
            callee = self.names[id(node.op)] if isinstance(node.op, Function) else node.op
            parts = [self.atom(a) for a in node.args] + self.attrs_text(node)
            return f"{callee}({', '.join(parts)}){self.type_note(node)}"
        if isinstance(node, Tuple):
            inner = ", ".join(self.atom(f) for f in node.fields)
            return f"({inner}{',' if len(node.fields) == 1 else ''})"
        if isinstance(node, TupleGetItem):
            return f"{self.atom(node.tuple_value)}.{node.index}{self.type_note(node)}"
        return self.atom(node)

    def attrs_text(self, call: Call) -> list[str]:
        """key=value in the op's declaration order (the order a reader of the op table expects)."""
        if isinstance(call.op, Function):
            return []
        try:
            order = list(get_op(call.op).attrs)
        except OpError:
            order = []
        keys = [k for k in order if k in call.attrs] + [k for k in call.attrs.keys() if k not in order]
        return [f"{k}={_value(call.attrs[k])}" for k in keys]

    def type_note(self, node: Expr) -> str:
        return f" /* ty={node.type} */" if self.show_types else ""

    def atom(self, node: Expr) -> str:
        if isinstance(node, Var):
            return self.var(node)
        if isinstance(node, Constant):
            return self.constant(node)
        return self.names[id(node)]

    def var(self, v: Var) -> str:
        """%name, made unique when two distinct Vars share a name."""
        got = self.names.get(id(v))
        if got is None:
            base = v.name or "v"
            name, k = base, 1
            while name in self.var_names:
                name, k = f"{base}_{k}", k + 1
            self.var_names.add(name)
            got = self.names[id(v)] = f"%{name}"
        return got

    def constant(self, c: Constant) -> str:
        if c.data.ndim == 0:
            return _scalar(c.data.item(), c.type.dtype)
        index = self.constants.setdefault(id(c), len(self.constants))
        dtype = "" if c.type.dtype == "float32" else f", {c.type.dtype}"
        return f"meta[Constant][{index}] /* ({', '.join(map(str, c.type.shape))}){dtype} */"

    def fresh(self) -> str:
        name = f"%{self.counter}"
        self.counter += 1
        return name


def _scalar(v, dtype: str) -> str:
    if dtype.startswith("float"):
        return f"{float(v)!r}f" if dtype == "float32" else repr(float(v))
    if dtype == "bool":
        return str(bool(v))
    return f"{int(v)}" + ("" if dtype == "int32" else f"i{dtype[3:]}" if dtype.startswith("int") else "")


def _value(v) -> str:
    """An attribute value: tuples as [a, b], strings quoted, floats in their shortest exact form."""
    if isinstance(v, tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, float):  # a float32 attribute (e.g. from ONNX) prints as its shortest float32 form
        return str(np.float32(v)) if float(np.float32(v)) == v else repr(v)
    if isinstance(v, np.ndarray):
        return _value(tuple(v.tolist()))
    return str(v)
