"""Analyses of loop IR that codegen and the tuner's features share: walking statements and expressions, and
whether a vectorize loop can run as one <N x T> pass (index arithmetic itself is in compiler/arith.py)."""
from __future__ import annotations

from collections import defaultdict

from relayish import te
from relayish.te import IntImm, Var

from ..arith import affine_form, coefficient, interval, variables
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


def carried_dependence(loop: For) -> str | None:
    """Why an iteration of `loop` may access memory that another iteration writes (None: no iteration does, and
    codegen tells LLVM so: llvm.loop.parallel_accesses, which spares its loop access analysis the pairwise
    dependence checks of every access in the loop; an unrolled tile of 392 accumulators took 3.5 s of them).

    Proved for each buffer the body writes: every access to it (load or store) has an affine index
    c * var + R + g with one nonzero c and one R (terms of variables bound outside the loop) for all of them, and
    g (constants and the variables of loops inside the body, each over its constant range) stays within a window
    narrower than |c|. Then iteration v touches only [c * v + R + min g, c * v + R + max g], disjoint from any
    other iteration's. Conditions are ignored (an access they skip is still in the window). Refused: a parallel
    loop inside (its closure is written by every iteration), a let-bound variable, a loaded value or an opaque
    term over var in the index of a written buffer, an inner loop of non-constant range.
    """
    var, inner, lets = loop.var, {}, set()
    accesses, written = defaultdict(list), set()  # buffer -> [index]
    for s in walk_stmt(loop.body):
        if isinstance(s, For):
            if s.kind == "parallel":
                return f"parallel loop over {s.var.name} inside"
            if not (isinstance(s.start, IntImm) and isinstance(s.extent, IntImm) and s.extent.value >= 1):
                return f"loop over {s.var.name} of a range not constant"
            inner[s.var] = (s.start.value, s.start.value + s.extent.value - 1)
        elif isinstance(s, LetStmt):
            lets.add(s.var)
        elif isinstance(s, Store):
            written.add(s.buffer)
            accesses[s.buffer].append(s.index)
        elif not isinstance(s, (Seq, Allocate, IfThenElse)):
            return f"statement {type(s).__name__}"
        for e in stmt_exprs(s):
            for n in walk_expr(e, unique=True):
                if isinstance(n, Load):
                    accesses[n.buffer].append(n.index)

    def split(index):
        """(c, R, lo, hi) of index = c * var + R + g with g in [lo, hi]; raises _Blocked."""
        c, rest, lo, hi = 0, {}, 0, 0
        for term, coef in affine_form(index).items():
            if term == 1:
                rng = (1, 1)
            elif term is var:
                c += coef
                continue
            else:
                names = variables(term)
                if names & lets or any(isinstance(n, Load) for n in walk_expr(term)):
                    raise _Blocked(f"index {te.expr_str(index)} reads memory or a let-bound variable")
                if var in names and not isinstance(term, Var):
                    raise _Blocked(f"index {te.expr_str(index)} is not affine in {var.name}")
                if not names & inner.keys():
                    rest[term] = coef
                    continue
                if isinstance(term, Var):
                    rng = inner[term]
                elif names <= inner.keys() and all(inner[n][0] == 0 for n in names):
                    rng = interval(term, {n: inner[n][1] + 1 for n in names})
                    if rng is None:
                        raise _Blocked(f"term {te.expr_str(term)} has no known range")
                else:
                    raise _Blocked(f"term {te.expr_str(term)} mixes inner and outer variables")
            lo, hi = lo + min(coef * rng[0], coef * rng[1]), hi + max(coef * rng[0], coef * rng[1])
        return c, rest, lo, hi

    try:
        for buf in written:
            parts = [split(index) for index in accesses[buf]]
            c, rest = parts[0][0], parts[0][1]
            if c == 0:
                return f"buffer {buf.name} is written at an index independent of {var.name}"
            if any(p[0] != c or p[1] != rest for p in parts):
                return f"buffer {buf.name} is accessed at indices that move differently with {var.name}"
            span = max(p[3] for p in parts) - min(p[2] for p in parts)
            if span >= abs(c):
                return (f"buffer {buf.name}: one iteration's accesses span {span + 1} elements, iterations are "
                        f"{abs(c)} apart")
    except _Blocked as why:
        return str(why)
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
