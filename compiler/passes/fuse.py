"""Operator fusion, as Relay's FuseOps does it, driven only by each op's pattern kind.

Each op node is fused into the group of its immediate post-dominator when every node on the paths between them
(and the post-dominator itself) is cheap enough for the group's kind:
  - a group anchored by a conv/dense/pool (OUT_ELEMWISE_FUSABLE) absorbs elementwise and broadcast ops after it;
  - elementwise, broadcast and injective ops fuse with injective ops after them;
  - such ops fuse into a reduction (COMM_REDUCE) that post-dominates them: a reduction absorbs its inputs.
Post-dominance makes diamonds safe: the relu before a residual block is post-dominated by the residual add,
but the path through the next convolution is not elementwise, so it stays the output of its own group.
A group holds at most `max_ops` ops and at most one op of kind >= COMM_REDUCE. The result is a graph whose calls
are primitive Functions (attrs Primitive=1), each of which becomes one kernel.
"""
from __future__ import annotations

import networkx as nx

from relayish import Call, Constant, Function, IRModule, Tuple, TupleGetItem, Var, get_op
from relayish.expr import Expr, children, post_order
from relayish.op import Pattern

_OUT = "OUT"


def _pattern(node) -> Pattern:
    return get_op(node.op).pattern if isinstance(node, Call) and isinstance(node.op, str) else Pattern.OPAQUE


class _Groups:
    """Union-find over op nodes, tracking each group's size and anchor count."""

    def __init__(self, nodes):
        self.parent = {id(n): id(n) for n in nodes}
        self.size = {id(n): 1 for n in nodes}
        self.anchors = {id(n): int(_pattern(n) >= Pattern.COMM_REDUCE) for n in nodes}
        self.pattern = {id(n): _pattern(n) for n in nodes}

    def find(self, k):
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def can_merge(self, keys, max_ops) -> bool:
        roots = {self.find(k) for k in keys}
        return sum(self.size[r] for r in roots) <= max_ops and sum(self.anchors[r] for r in roots) <= 1

    def merge(self, keys):
        roots = list(dict.fromkeys(self.find(k) for k in keys))
        head = roots[0]
        for r in roots[1:]:
            self.parent[r] = head
            self.size[head] += self.size[r]
            self.anchors[head] += self.anchors[r]
            self.pattern[head] = max(self.pattern[head], self.pattern[r])


def fuse_ops(mod: IRModule, max_ops: int = 32, fuse: bool = True) -> IRModule:
    """Group op calls into primitive functions (one op per function when fuse=False)."""
    body = mod.main.body
    ops = [n for n in post_order(body) if isinstance(n, Call) and isinstance(n.op, str)]
    groups = _Groups(ops)
    if fuse:
        _fuse(body, ops, groups, max_ops)
    new_body = _build(body, ops, groups)
    return mod.with_main(Function(mod.main.params, new_body, mod.main.attrs))


def _dataflow(body: Expr, ops) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_node(_OUT)
    op_ids = {id(n) for n in ops}
    for n in ops:
        g.add_node(id(n))
    for node in post_order(body):
        if id(node) not in op_ids:
            continue
        for a in children(node):
            for src in _op_sources(a, op_ids):
                g.add_edge(src, id(node))
    outs = body.fields if isinstance(body, Tuple) else (body,)
    for o in outs:
        for src in _op_sources(o, op_ids):
            g.add_edge(src, _OUT)
    # an op whose value feeds a Tuple/TupleGetItem is an output-like use: no fusion past it
    for node in post_order(body):
        if isinstance(node, (Tuple, TupleGetItem)) and node is not body:
            for a in children(node):
                for src in _op_sources(a, op_ids):
                    g.add_edge(src, _OUT)
    return g


def _op_sources(e, op_ids):
    if id(e) in op_ids:
        return [id(e)]
    if isinstance(e, (Tuple, TupleGetItem)):
        return [s for c in children(e) for s in _op_sources(c, op_ids)]
    return []


def _fuse(body, ops, groups: _Groups, max_ops):
    g = _dataflow(body, ops)
    ipdom = nx.immediate_dominators(g.reverse(copy=False), _OUT)
    by_id = {id(n): n for n in ops}
    for n in ops:  # topological order
        k = id(n)
        dom = ipdom.get(k)
        if dom is None or dom == _OUT or dom == k:
            continue
        kind = _pattern(n)
        if kind == Pattern.OPAQUE:
            continue
        path = _path_nodes(g, k, dom)
        group_kind = groups.pattern[groups.find(k)]
        dom_kind = _pattern(by_id[dom])
        if group_kind == Pattern.OUT_ELEMWISE_FUSABLE:
            ok = all(_pattern(by_id[p]) <= Pattern.BROADCAST for p in path + [dom])
        elif kind <= Pattern.INJECTIVE:
            inner_ok = all(_pattern(by_id[p]) <= Pattern.INJECTIVE for p in path)
            ok = inner_ok and (dom_kind <= Pattern.INJECTIVE or dom_kind == Pattern.COMM_REDUCE)
        else:
            ok = False
        if ok and groups.can_merge([k, dom] + path, max_ops):
            groups.merge([k, dom] + path)


def _path_nodes(g: nx.DiGraph, src, dom) -> list:
    """Nodes strictly between src and its post-dominator dom (every path from src passes through dom)."""
    seen, stack = set(), [s for s in g.successors(src) if s != dom]
    while stack:
        v = stack.pop()
        if v in seen or v == _OUT:
            continue
        seen.add(v)
        stack.extend(s for s in g.successors(v) if s != dom)
    return list(seen)


def _build(body: Expr, ops, groups: _Groups) -> Expr:
    """Rebuild the graph with each group as a Call of a primitive Function."""
    members: dict[int, list] = {}
    for n in ops:
        members.setdefault(groups.find(id(n)), []).append(n)
    group_of = {id(n): groups.find(id(n)) for n in ops}
    for n in ops:  # FuseOps invariant: only a group's last member is used outside it
        for a in n.args:
            if id(a) in group_of and group_of[id(a)] != group_of[id(n)] and members[group_of[id(a)]][-1] is not a:
                raise AssertionError(f"fusion left {a.op} used outside its group")
    new_value: dict[int, Expr] = {}  # id(old node) -> its value in the new graph

    def value(e: Expr) -> Expr:
        if id(e) in new_value:
            return new_value[id(e)]
        if isinstance(e, Tuple):
            v = Tuple(tuple(value(f) for f in e.fields))
        elif isinstance(e, TupleGetItem):
            v = TupleGetItem(value(e.tuple_value), e.index)
        else:
            v = e  # Var or Constant
        new_value[id(e)] = v
        return v

    for n in ops:
        root = group_of[id(n)]
        if members[root][-1] is not n:
            continue  # a group is emitted when its last member (its output) is reached
        group = members[root]
        in_group = {id(m) for m in group}
        params, args, inner = [], [], {}
        for m in group:
            new_args = []
            for a in m.args:
                if id(a) in in_group:
                    new_args.append(inner[id(a)])
                elif isinstance(a, Constant) and a.type.size == 1:
                    new_args.append(a)  # scalars stay inside: they become immediates in the kernel
                else:
                    if id(a) not in inner:
                        p = Var(f"p{len(params)}", a.type)
                        params.append(p)
                        args.append(value(a))
                        inner[id(a)] = p
                    new_args.append(inner[id(a)])
            inner[id(m)] = m.replace(args=tuple(new_args))
        fn = Function(tuple(params), inner[id(n)], {"Primitive": 1})
        new_value[id(n)] = Call(fn, tuple(args))
    outs = body.fields if isinstance(body, Tuple) else None
    return Tuple(tuple(value(f) for f in outs)) if outs is not None else value(body)
