"""A convolution's algorithm as a choice: direct, Winograd F(2x2, 3x3) or F(4x4, 3x3) (issue 13, item 3).

The rule (passes/layout.py winograd_tile) picks one per convolution from its shape. The tuner can weigh them
instead: every conv2d that may take more than one algorithm is a *site*, named by its signature (shapes and window,
passes.layout.conv_signature: the convolutions of one signature take one algorithm). For each algorithm the model
is run through the pass pipeline with that algorithm forced on every site where it is valid (`variants`); the
tasks of all variants are tuned together, each tagged with the site and tile its anchor convolution has
(`alternative_of`; the cost model sees the algorithm in the program it featurizes: a Winograd task computes
transforms and batched products, a direct one a sliding window). When a model is compiled with records,
`choose_algorithms` gives every site the algorithm whose tasks cost least by those records (kernel time x calls,
summed over the site's tasks); a site some of whose algorithms lack records, the rule's among them, keeps the
rule's choice: an algorithm is never picked over one that was not measured.

    ctx = choose_algorithms(mod, PassContext(), cost_of)    # cost_of(task_key) -> seconds or None
    fused = run_pipeline(mod, ctx)

The channel block is a choice of the whole model: the widest block of its convolutions (PassContext.channel_block;
the rule: one vector, vector_width) decides the layout of every activation between them, so a convolution's block
is not its own (a different one costs layout transforms around it). `block_choices` are half a vector, one and
two (8/16/32 lanes with AVX-512, 4/8/16 with AVX2), each where the channel counts allow (channel_block). The tuner
tunes the tasks of every block's model (`tasks_with_alternatives(..., blocks=True)`, each task tagged with its
calls in each block's model, Task.blocks); `choose_block` compiles with the block whose whole model costs least by
the records (every task of it measured, the rule's among them), under the rule's algorithms; the algorithms are
then chosen within that block.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from relayish import Call, IRModule
from relayish.expr import post_order

from .passes import PassContext, run_pipeline
from .passes.layout import WINOGRAD_MIN_CHANNELS, conv_signature, winograd_tile, winograd_tiles
from .backend import opened_records
from .task import Task, extract_task_calls

TILES = (0, 2, 4)  # 0: direct; m: Winograd F(m x m, 3 x 3)
NAMES = {0: "direct", 2: "winograd F(2x2,3x3)", 4: "winograd F(4x4,3x3)"}


def conv_sites(mod: IRModule) -> dict[str, tuple[int, int]]:
    """signature -> (the rule's tile, number of convolutions) for every conv2d of the model that has a choice
    (a Winograd tile besides direct). `mod` is the imported model (before the pass pipeline)."""
    sites: dict[str, tuple[int, int]] = {}
    for node in post_order(mod.main.body):
        if isinstance(node, Call) and node.op == "nn.conv2d" and winograd_tiles(node):
            sig = conv_signature(node)
            sites[sig] = (winograd_tile(node), sites.get(sig, (0, 0))[1] + 1)
    return sites


def variants(mod: IRModule, ctx: PassContext) -> dict[int, PassContext]:
    """tile -> the context that forces that algorithm on every site (where it is valid; others keep the rule).
    Empty when the model has no site, or Winograd is off."""
    sites = conv_sites(mod)
    if not sites or not ctx.winograd or ctx.layout != "NCHWc":
        return {}
    return {m: dataclasses.replace(ctx, conv_algorithms=tuple((sig, m) for sig in sorted(sites))) for m in TILES}


def alternative_of(task: Task) -> tuple[str, int] | None:
    """(site signature, tile) of a task whose anchor is a blocked convolution with an algorithm choice, else None."""
    for node in post_order(task.func.body):
        if not isinstance(node, Call):
            continue
        if node.op == "nn.conv2d_winograd_nchwc":
            return _blocked_signature(node, (3, 3), (1, 1), (1, 1), 1), node.attrs.tile_size
        if node.op == "nn.conv2d_nchwc":
            a = node.attrs
            kernel = tuple(node.args[1].type.shape[2:4])
            if kernel == (3, 3) and tuple(a.strides) == (1, 1) and tuple(a.dilation) == (1, 1) and a.groups == 1:
                sig = _blocked_signature(node, kernel, a.strides, a.dilation, a.groups)
                ic, oc = _channels(node)
                return (sig, 0) if min(ic, oc) >= WINOGRAD_MIN_CHANNELS else None
    return None


def _channels(node: Call) -> tuple[int, int]:
    x, out = node.args[0].type.shape, node.type.shape
    return x[1] * x[4], out[1] * out[4]


def _blocked_signature(node: Call, kernel, strides, dilation, groups) -> str:
    """conv_signature of the NCHW conv2d a blocked (NCHW{c}c) convolution came from."""
    n, _, h, w, _ = node.args[0].type.shape
    ic, oc = _channels(node)
    return (f"conv2d n{n} c{ic} {h}x{w} -> c{oc} k{kernel[0]}x{kernel[1]} s{tuple(strides)} "
            f"p{tuple(node.attrs.padding)} d{tuple(dilation)} g{groups}")


def variant_tasks(mod: IRModule, ctx: PassContext) -> dict[int, list[Task]]:
    """tile -> the tasks of the model compiled with that algorithm on every site (see variants)."""
    return {m: extract_task_calls(run_pipeline(mod, c)).tasks for m, c in variants(mod, ctx).items()}


def site_costs(tasks_by_tile: dict[int, list[Task]], cost_of: Callable[[str], float | None]
               ) -> dict[str, dict[int, float | None]]:
    """signature -> tile -> total cost (cost x calls over the site's tasks of that variant; None if any of them
    has no cost)."""
    out: dict[str, dict[int, float | None]] = {}
    for m, tasks in tasks_by_tile.items():
        for task in tasks:
            alt = alternative_of(task)
            if alt is None or alt[1] != m:
                continue
            c = cost_of(task.key)
            per_tile = out.setdefault(alt[0], {})
            prev = per_tile.get(m, 0.0)
            per_tile[m] = None if c is None or prev is None else prev + c * task.weight
    return out


def block_choices(vector_width: int) -> tuple[int, ...]:
    """The widest channel blocks the tuner weighs: half a vector, one (the rule) and two."""
    return tuple(b for b in (vector_width // 2, vector_width, 2 * vector_width) if b >= 4)


def block_variants(mod: IRModule, ctx: PassContext) -> dict[int, PassContext]:
    """block -> the context that compiles every convolution with at most that channel block (ctx itself for the
    rule's block). Empty when the model has no convolution or keeps NCHW."""
    if ctx.layout != "NCHWc" or not any(isinstance(n, Call) and n.op == "nn.conv2d" for n in post_order(mod.main.body)):
        return {}
    return {b: ctx if b == ctx.block else dataclasses.replace(ctx, channel_block=b)
            for b in block_choices(ctx.vector_width)}


def choose_block(mod: IRModule, ctx: PassContext, cost_of: Callable[[str], float | None]) -> PassContext:
    """ctx with the channel block whose whole model (rule algorithms) costs least by cost_of, among the blocks
    whose every task has a cost, if the rule's block has them all; else ctx."""
    totals = {}
    for b, c in block_variants(mod, ctx).items():
        tasks = extract_task_calls(run_pipeline(mod, c)).tasks
        costs = [cost_of(t.key) for t in tasks]
        if all(x is not None for x in costs):
            totals[b] = sum(x * t.weight for x, t in zip(costs, tasks))
    if ctx.block not in totals:
        return ctx
    best = min(totals, key=lambda b: (totals[b], b != ctx.block))
    return ctx if best == ctx.block else dataclasses.replace(ctx, channel_block=best)


def choose_algorithms(mod: IRModule, ctx: PassContext, cost_of: Callable[[str], float | None]) -> PassContext:
    """ctx with, for every site whose rule choice and some other algorithm have costs, the cheapest algorithm."""
    sites = conv_sites(mod)
    if not sites or not ctx.winograd or ctx.layout != "NCHWc":
        return ctx
    costs = site_costs(variant_tasks(mod, ctx), cost_of)
    chosen = []
    for sig, (rule, _) in sorted(sites.items()):
        known = {m: c for m, c in costs.get(sig, {}).items() if c is not None}
        if rule in known and len(known) > 1:
            best = min(known, key=lambda m: (known[m], m != rule))
            if best != rule:
                chosen.append((sig, best))
    return dataclasses.replace(ctx, conv_algorithms=tuple(chosen)) if chosen else ctx


def record_cost_lookup(store) -> Callable[[str], float | None]:
    """cost_of for choose_algorithms from an open records store (RecordsReader, or tuning's RecordStore)."""
    if hasattr(store, "best_cost"):
        return store.best_cost

    def cost_of(key: str) -> float | None:
        record = store.best_record(key)
        return None if record is None else record.cost
    return cost_of


def choose_from_records(mod: IRModule, ctx: PassContext, records) -> PassContext:
    """choose_block, then choose_algorithms, by the best records of `records` (None, a records DB path or an open
    store)."""
    if records is None or not (conv_sites(mod) or len(block_variants(mod, ctx)) > 1):
        return ctx
    with opened_records(records) as store:
        cost_of = record_cost_lookup(store)
        return choose_algorithms(mod, choose_block(mod, ctx, cost_of), cost_of)


def tasks_with_alternatives(mod: IRModule, ctx: PassContext, blocks: bool = False) -> list[Task]:
    """The model's tasks under the rule, plus every other algorithm's tasks of each site, each site task tagged
    with Task.alternative = (signature, tile, the rule's tile). Weights are calls in the model as compiled with
    that algorithm (a site's alternatives are never summed together: see estimated_latency). blocks: also the
    tasks of the model compiled with each other channel block (rule algorithms), every task tagged with its
    calls per block (Task.blocks; the rule block's algorithm alternatives count at the rule block)."""
    rule = extract_task_calls(run_pipeline(mod, ctx)).tasks
    sites = conv_sites(mod)
    by_key = {t.key: t for t in rule}
    if blocks:
        for b, c in block_variants(mod, ctx).items():
            for task in rule if b == ctx.block else extract_task_calls(run_pipeline(mod, c)).tasks:
                calls = task.weight  # in the model of block b
                task = by_key.setdefault(task.key, task)
                task.blocks = (ctx.block, {**(task.blocks[1] if task.blocks else {}), b: calls})
    for m, tasks in variant_tasks(mod, ctx).items():
        for task in tasks:
            alt = alternative_of(task)
            if alt is None or alt[1] != m or alt[0] not in sites:
                continue
            task = by_key.setdefault(task.key, task)
            task.alternative = (alt[0], m, sites[alt[0]][0])
    return list(by_key.values())


def estimated_latency(tasks: list[Task], cost_of: Callable[[Task], float], which: str = "best") -> float:
    """sum of weight x cost over the tasks, where a site's alternatives count once: the cheapest algorithm
    (which="best") or the rule's (which="rule"). A cost may be NaN (unknown): an algorithm with an unknown task is
    skipped by "best" unless every one is unknown. Tasks tagged with channel blocks (Task.blocks): the same sum for
    the model of each block (its tasks, its calls; the algorithm sites count in the rule's block), and "best" is
    the cheapest block whose every task is known (the rule's block if none is), "rule" the rule block's."""
    tagged = [t for t in tasks if t.blocks]
    if not tagged:
        return _model_latency(tasks, cost_of, which, lambda t: t.weight)
    rule = tagged[0].blocks[0]

    def block_latency(b: int, which: str) -> float:
        members = [t for t in tasks if (b in t.blocks[1] if t.blocks else b == rule)]
        return _model_latency(members, cost_of, which, lambda t: t.blocks[1][b] if t.blocks else t.weight)
    if which == "rule":
        return block_latency(rule, "rule")
    known = [e for e in (block_latency(b, "best") for b in sorted({b for t in tagged for b in t.blocks[1]})) if e == e]
    return min(known) if known else block_latency(rule, "best")


def _model_latency(tasks: list[Task], cost_of: Callable[[Task], float], which: str, weight) -> float:
    total, sites = 0.0, {}
    for t in tasks:
        c = weight(t) * cost_of(t)
        if t.alternative is None:
            total += c
        else:
            sig, m, rule = t.alternative
            per_tile = sites.setdefault(sig, ({}, rule))[0]
            per_tile[m] = per_tile.get(m, 0.0) + c
    for per_tile, rule in sites.values():
        if which == "rule":
            total += per_tile.get(rule, float("nan"))
        else:
            known = [c for c in per_tile.values() if c == c]
            total += min(known) if known else float("nan")
    return total
