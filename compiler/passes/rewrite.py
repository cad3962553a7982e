"""Local graph rewrites: `rewrite` applies rules bottom-up, and `Pat` lets a pass write its rules as a table of
(pattern, function) rows with a one-line comment each (in the spirit of tinygrad's PatternMatcher):

    # dense(x, w) -> dense_pack(x, lt(w, NK->NK{n}n))          (w constant)
    (Pat("nn.dense", (ANY, CONST)), dense_to_pack),

A `Pat` matches one Call: its op (a name, or a predicate on the op's OpDef) and, optionally, its arguments, one
matcher each. An argument matcher maps a node to what it captures, or to None when the node does not match (ANY
captures any node, CONST a Constant; a pass may add its own). On a match the row's function is called as
fn(node, *captures) and returns the replacement, or None to decline.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from relayish import Call, Constant, IRModule, get_op
from relayish.expr import Function, rebuild


def rewrite(mod: IRModule, rules, origin: dict | None = None) -> IRModule:
    """Apply rules, (name, function node -> replacement or None) pairs tried in order, to every op call bottom-up,
    until none fires at the node. origin, if given, is filled with id(rewritten node) -> id(original node), for
    the node with its new children and for its final replacement (what its readers get as their argument), so
    that rules can ask about the original graph (use counts, channel maps)."""
    alive = []  # every node origin names stays alive, so that no later node reuses its id

    def visit(old, node):
        if origin is not None:
            origin[id(node)] = id(old)
            alive.append(node)
        for _ in range(16):  # a rule's result may match another rule
            for _, rule in rules:
                got = rule(node) if isinstance(node, Call) and isinstance(node.op, str) else None
                if got is not None:
                    node = got
                    break
            else:
                break
        if origin is not None:
            origin.setdefault(id(node), id(old))
            alive.append(node)
        return node
    return mod.with_main(Function(mod.main.params, rebuild(mod.main.body, visit), mod.main.attrs))


def ANY(node):  # noqa: N802  (matchers read as constants in rule tables)
    return node


def CONST(node):  # noqa: N802
    return node if isinstance(node, Constant) else None


class Pat(NamedTuple):
    """A pattern over one op Call."""
    op: str | Callable  # the op's name, or a predicate on its OpDef
    args: tuple[Callable, ...] | None = None  # one matcher per argument (exactly that many); None: any arguments

    def match(self, node: Call) -> tuple | None:
        """The captures of the argument matchers, or None when node does not match."""
        if not (node.op == self.op if isinstance(self.op, str) else self.op(get_op(node.op))):
            return None
        if self.args is None:
            return ()
        if len(node.args) != len(self.args):
            return None
        captures = []
        for matcher, arg in zip(self.args, node.args):
            got = matcher(arg)
            if got is None:
                return None
            captures.append(got)
        return tuple(captures)


def table_rules(table) -> list[tuple[str, Callable]]:
    """(Pat, fn) rows -> the (name, rule) pairs that `rewrite` tries in order."""
    def rule(pat: Pat, fn: Callable):
        def apply(node: Call):
            captures = pat.match(node)
            return None if captures is None else fn(node, *captures)
        return fn.__name__, apply
    return [rule(pat, fn) for pat, fn in table]
