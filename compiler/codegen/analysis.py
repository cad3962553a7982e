"""Analyses of loop IR that codegen and the tuner's features share: walking statements and expressions, and
whether a vectorize loop can run as one <N x T> pass (index arithmetic itself is in compiler/arith.py)."""
from __future__ import annotations

from collections import defaultdict

from relayish import te
from relayish.te import IntImm, Var

from ..arith import coefficient
from ..loopir import Allocate, For, IfThenElse, LetStmt, Load, PrimFunc, Seq, Store


def walk_expr(e, unique: bool = False):
    """Pre-order over an expression, descending into Load indices (te.walk does not know Load). unique: a node
    the expression (a DAG) shares is visited once, not once per parent."""
    stack, seen = [e], set()
    while stack:
        node = stack.pop()
        if unique:
            if id(node) in seen:
                continue
            seen.add(id(node))
        yield node
        stack.extend([node.index] if isinstance(node, Load) else reversed(te.expr_children(node)))


def walk_stmt(s):
    """Pre-order over statements."""
    yield s
    if isinstance(s, Seq):
        for x in s.stmts:
            yield from walk_stmt(x)
    elif isinstance(s, (For, LetStmt, Allocate)):
        yield from walk_stmt(s.body)
    elif isinstance(s, IfThenElse):
        yield from walk_stmt(s.then_case)
        if s.else_case is not None:
            yield from walk_stmt(s.else_case)


def stmt_exprs(s) -> tuple:
    """The expressions held directly by one statement."""
    if isinstance(s, For):
        return (s.start, s.extent)
    if isinstance(s, Store):
        return (s.index, s.value)
    if isinstance(s, IfThenElse):
        return (s.cond,)
    if isinstance(s, LetStmt):
        return (s.value,)
    return ()


def referenced(s) -> tuple[list, list]:
    """(Vars, Buffers) that statement s mentions, each in first-use order without duplicates."""
    vars_, bufs = {}, {}
    for st in walk_stmt(s):
        if isinstance(st, Store):
            bufs[st.buffer] = None
        for e in stmt_exprs(st):
            for n in walk_expr(e):
                if isinstance(n, Var):
                    vars_[n] = None
                elif isinstance(n, Load):
                    bufs[n.buffer] = None
    return list(vars_), list(bufs)


class _Blocked(Exception):
    pass


def vectorize_blocker(loop: For) -> str | None:
    """Why `loop`'s body cannot run as one <N x T> pass (None: it can).

    Emitting the body once on vectors performs each statement for all lanes before the next statement, which
    equals serial order only without cross-lane dependences through memory. We accept a body when: the extent is a
    positive constant; it holds no loop and no allocation; every condition is lane-uniform, or lane-dependent with
    no else branch (a split's tail guard: its body runs masked, the lanes where it fails neither store nor load);
    every store index depends on the loop variable; and every buffer the body writes is accessed at one single
    index expression (injective in the lane if the buffer is also read). A store at a lane-independent index (a
    reduction into an accumulator) is refused: it is a loop-carried dependence.
    """
    if not isinstance(loop.extent, IntImm) or loop.extent.value < 1:
        return f"extent {te.expr_str(loop.extent)} is not a positive constant"
    var, lets = loop.var, {}
    accesses = defaultdict(list)  # buffer -> [(is_store, index, coeff)]

    def note_loads(e):  # each distinct load once (a Winograd transform shares each of its loads in ~10 products)
        for n in walk_expr(e, unique=True):
            if isinstance(n, Load):
                accesses[n.buffer].append((False, n.index, coefficient(n.index, var, lets)))

    def visit(s):
        if isinstance(s, Seq):
            for x in s.stmts:
                visit(x)
        elif isinstance(s, For):
            raise _Blocked(f"nested loop over {s.var.name}")
        elif isinstance(s, Allocate):
            raise _Blocked(f"allocation of {s.buffer.name} inside the loop")
        elif isinstance(s, IfThenElse):
            if coefficient(s.cond, var, lets) != 0 and s.else_case is not None:
                raise _Blocked(f"condition {te.expr_str(s.cond)} depends on {var.name} and has an else branch")
            note_loads(s.cond)
            visit(s.then_case)
            if s.else_case is not None:
                visit(s.else_case)
        elif isinstance(s, LetStmt):
            note_loads(s.value)
            lets[s.var] = coefficient(s.value, var, lets)
            visit(s.body)
        elif isinstance(s, Store):
            note_loads(s.index)
            note_loads(s.value)
            coeff = coefficient(s.index, var, lets)
            if coeff == 0:
                raise _Blocked(f"store to {s.buffer.name} at an index independent of {var.name} (reduction)")
            accesses[s.buffer].append((True, s.index, coeff))
        else:
            raise _Blocked(f"statement {type(s).__name__}")

    try:
        visit(loop.body)
    except _Blocked as why:
        return str(why)
    for buf, acc in accesses.items():
        if not any(is_store for is_store, _, _ in acc):
            continue
        first = acc[0][1]
        if any(not (idx == first) for _, idx, _ in acc):
            return f"buffer {buf.name} is written and accessed at different indices"
        if len(acc) > 1 and acc[0][2] is None:
            return f"buffer {buf.name} is written and read at an index that is not injective in {var.name}"
    return None


def vectorize_report(func: PrimFunc) -> dict:
    """{loop variable name: None if the vectorize loop becomes <N x T> code, else why it runs serially}."""
    loops = [s for s in walk_stmt(func.body) if isinstance(s, For) and s.kind == "vectorize"]
    return {s.var.name: vectorize_blocker(s) for s in loops}


def unrolled_size(s) -> int:
    """Statements codegen emits for s (a PrimFunc or statement) with every unroll loop expanded: each store counts
    the product of the extents of the unroll loops around it (a vectorize loop is one statement, and so is a serial
    or parallel loop's body). LLVM's time grows with it: a register tile of 49 x 8 x 8 unrolled vector FMAs, which
    random annotation can draw, took longer than the tuner's 10 s build timeout."""
    body = s.body if isinstance(s, PrimFunc) else s

    def size(st, times: int) -> int:
        if isinstance(st, Store):
            return times
        if isinstance(st, Seq):
            return sum(size(x, times) for x in st.stmts)
        if isinstance(st, For):
            unrolled = st.kind == "unroll" and isinstance(st.extent, IntImm)
            return size(st.body, times * st.extent.value if unrolled else times)
        if isinstance(st, (LetStmt, Allocate)):
            return size(st.body, times)
        if isinstance(st, IfThenElse):
            return size(st.then_case, times) + (size(st.else_case, times) if st.else_case is not None else 0)
        return 0
    return size(body, 1)
