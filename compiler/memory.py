"""Static memory planning: where every kernel argument of a model lives, decided before codegen.

Graph inputs and outputs are the caller's buffers; weights are packed into one params blob (each at a 64-byte
aligned offset); every intermediate tensor and kernel scratch buffer gets an offset in one workspace.

Workspace values are allocated in execution order; a block is reused by a later value once every reader of its previous
value has run (last use strictly before the new value's producer), so a kernel never writes over its own inputs.
Best fit among free blocks; a block too small for any free request is never split (fragmentation is small for
the straight-line graphs models are).

Concatenation in place: when every input of a concatenation kernel is a contiguous slice of its output
(in_place_concats: batch 1, the same channel block, 64-byte aligned offsets) and nothing stops it (an input is a
graph input, output or weight, is concatenated twice or into another concatenation too), each input's producer
writes straight into its slice of the output, and the concatenation's call is elided. Chains nest (DenseNet's
block: every feature map is a slice of the block's last concatenation); the output's region then lives from the
first member's producer to the last reader of any member.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from relayish import Call, Constant, Tuple, Var
from relayish.types import numpy_dtype

from .codegen.executor import BufferRef, ExecutorPlan, KernelCall
from .task import TaskCalls

ALIGN = 64


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class _Block:
    offset: int
    size: int
    free_after: int  # index of the last call that reads the value held here


class WorkspacePlanner:
    def __init__(self):
        self.blocks: list[_Block] = []
        self.size = 0

    def alloc(self, nbytes: int, first_call: int, last_call: int) -> int:
        """Offset of a region of nbytes live from call first_call to call last_call (inclusive)."""
        nbytes = align(max(nbytes, 1))
        free = [b for b in self.blocks if b.free_after < first_call and b.size >= nbytes]
        if free:
            best = min(free, key=lambda b: b.size)
            best.free_after = last_call
            return best.offset
        # grow the last block if it is free, else append
        if self.blocks and self.blocks[-1].free_after < first_call and \
                self.blocks[-1].offset + self.blocks[-1].size == self.size:
            last = self.blocks[-1]
            self.size += nbytes - last.size
            last.size, last.free_after = nbytes, last_call
            return last.offset
        block = _Block(self.size, nbytes, last_call)
        self.blocks.append(block)
        self.size += nbytes
        return block.offset


@dataclass
class MemoryPlan:
    """executor: the kernel calls in order, each with one BufferRef per kernel parameter (inputs, output, then
    scratch); params: the weights blob; workspace_bytes: the size of the workspace the refs point into."""
    executor: ExecutorPlan
    params: np.ndarray  # uint8
    workspace_bytes: int


def plan_memory(fused, task_calls: TaskCalls, kernels: list) -> MemoryPlan:
    """Place every argument of every call of `fused` (kernels[i] is the PrimFunc of task_calls.tasks[i]).

    An intermediate lives in the workspace from its producer to its last reader; a kernel's scratch buffers
    only during its own call. The model's outputs are written straight into the caller's output buffers."""
    calls = task_calls.calls
    params, const_offset = pack_params(calls)
    last_use = last_uses(calls)
    body = fused.main.body
    outputs = list(body.fields) if isinstance(body, Tuple) else [body]
    out_index = {id(o): j for j, o in enumerate(outputs)}  # distinct calls: materialize_outputs saw to it
    params_in = {id(p): i for i, p in enumerate(fused.main.params)}
    planner = WorkspacePlanner()
    value_ref: dict[int, BufferRef] = {}
    executor = ExecutorPlan()
    kinds = [task_calls.tasks[t].ops for t in task_calls.task_of]
    in_place = in_place_concats(calls, kinds, set(out_index))
    regions, spans = concat_regions(calls, in_place, last_use)
    bases: dict[int, int] = {}  # root concatenation -> its region's offset
    for i, c in enumerate(calls):
        refs = []
        for a in c.args:
            if isinstance(a, Var):
                refs.append(BufferRef("input", params_in[id(a)]))
            elif isinstance(a, Constant):
                refs.append(BufferRef("param", 0, const_offset[id(a)]))
            else:
                refs.append(value_ref[id(a)])
        if id(c) in out_index:
            ref = BufferRef("output", out_index[id(c)])
        elif id(c) in regions:  # a slice of a concatenation's output (see the module docstring)
            root, offset = regions[id(c)]
            if root not in bases:
                bases[root] = planner.alloc(*spans[root])
            ref = BufferRef("workspace", 0, bases[root] + offset)
        else:
            ref = BufferRef("workspace", 0, planner.alloc(nbytes(c.type), i, last_use[id(c)]))
        value_ref[id(c)] = ref
        refs.append(ref)
        kernel = kernels[task_calls.task_of[i]]
        n_fixed = kernel.attrs["num_inputs"] + kernel.attrs["num_outputs"]
        for buf in kernel.params[n_fixed:]:
            refs.append(BufferRef("workspace", 0, planner.alloc(buf.size * numpy_dtype(buf.dtype).itemsize, i, i)))
        executor.calls.append(KernelCall(kernel.name, refs, elided=id(c) in in_place))
    return MemoryPlan(executor, params, planner.size)


CONCAT_OPS = ("nn.concat_blocked", "concatenate")


def in_place_concats(calls: list[Call], ops: list, graph_outputs: set) -> dict[int, list[tuple[int, int]]]:
    """The concatenation calls that can run in place: id(call) -> [(id(input value), byte offset in the output)].

    calls[k] runs a kernel of ops[k]. A call qualifies when its kernel is one concatenation (nothing fused into
    it), it is not a graph output, and each input is produced by an earlier call, is no graph output, occurs once
    in it and in no other qualifying concatenation, and is a contiguous slice of the output at a 64-byte aligned
    offset: every axis before the concatenated one has extent 1 (batch 1), and for a blocked concatenation the
    input has the output's channel block."""
    produced = {id(c) for c in calls}
    claimed: set[int] = set()
    out = {}
    for c, kind in zip(calls, ops):
        if len(kind) != 1 or kind[0] not in CONCAT_OPS or id(c) in graph_outputs:
            continue
        inputs = _concat_inputs(c)
        if inputs is None:
            continue
        slices, offset, ok = [], 0, True
        ids = [id(x) for x in inputs]
        for v in inputs:
            if id(v) not in produced or id(v) in graph_outputs or id(v) in claimed or ids.count(id(v)) > 1 or \
                    offset % ALIGN or v.type.dtype != c.type.dtype or not _is_leading_slice(v.type, c):
                ok = False
                break
            slices.append((id(v), offset))
            offset += nbytes(v.type)
        if ok and offset == nbytes(c.type):
            claimed.update(i for i, _ in slices)
            out[id(c)] = slices
    return out


def _concat_inputs(call: Call) -> list | None:
    """The values a concatenation kernel's call concatenates, in order (the primitive function's body is the one
    concatenation of its parameters)."""
    fn = call.op
    body = getattr(fn, "body", None)
    if not isinstance(body, Call) or body.op not in CONCAT_OPS:
        return None
    if body.op == "nn.concat_blocked" and (body.attrs.in_maps or body.attrs.out_map):
        return None  # channels padded per group (relayish/ops/channel_pad.py): the inputs are not slices of it
    arg_of = {id(p): a for p, a in zip(fn.params, call.args)}
    if any(id(a) not in arg_of for a in body.args):
        return None
    return [arg_of[id(a)] for a in body.args]


def _is_leading_slice(part, c: Call) -> bool:
    """Whether `part` (an input of concatenation c) is stored as one contiguous run of c's output."""
    fn_body = c.op.body
    if fn_body.op == "nn.concat_blocked":
        return part.shape[0] == 1 and part.shape[-1] == c.type.shape[-1]
    axis = fn_body.attrs.axis % len(c.type.shape)
    return all(d == 1 for d in c.type.shape[:axis])


def concat_regions(calls: list[Call], in_place: dict, last_use: dict) -> tuple[dict, dict]:
    """For the in-place concatenations: id(value) -> (id(root), byte offset in the root's output) for each
    concatenation and each value written into one (root: the outermost concatenation of a nest), and per root
    the planner's request (bytes, first call, last call) covering every member's producer and reader."""
    parent = {v: (cat, off) for cat, slices in in_place.items() for v, off in slices}
    index = {id(c): i for i, c in enumerate(calls)}

    def resolve(v):
        offset = 0
        while v in parent:
            v, off = parent[v]
            offset += off
        return v, offset

    regions, spans = {}, {}
    for v in list(parent) + list(in_place):
        root, offset = resolve(v)
        regions[v] = (root, offset)
        size, first, last = spans.get(root, (nbytes(calls[index[root]].type), index[root], last_use[root]))
        spans[root] = (size, min(first, index[v]), max(last, last_use[v]))
    return regions, spans


def pack_params(calls: list[Call]) -> tuple[np.ndarray, dict[int, int]]:
    """The constants read by `calls`, in first-read order, in one uint8 blob; and id(constant) -> its offset."""
    offsets: dict[int, int] = {}
    blobs, size = [], 0
    for c in calls:
        for a in c.args:
            if isinstance(a, Constant) and id(a) not in offsets:
                offsets[id(a)] = size
                data = np.ascontiguousarray(a.data).view(np.uint8).reshape(-1)
                blobs.append((size, data))
                size = align(size + data.size)
    params = np.zeros(size, dtype=np.uint8)
    for off, data in blobs:
        params[off:off + data.size] = data
    return params, offsets


def last_uses(calls: list[Call]) -> dict[int, int]:
    """id(call) -> the index of the last call that reads its value (its own index when nothing reads it)."""
    last = {id(c): i for i, c in enumerate(calls)}
    for i, c in enumerate(calls):
        for a in c.args:
            if id(a) in last:
                last[id(a)] = i
    return last


def nbytes(ty) -> int:
    return int(np.prod(ty.shape, dtype=np.int64)) * numpy_dtype(ty.dtype).itemsize
