"""Static memory planning: where every kernel argument of a model lives, decided before codegen.

Graph inputs and outputs are the caller's buffers; weights are packed into one params blob (each at a 64-byte
aligned offset); every intermediate tensor and kernel scratch buffer gets an offset in one workspace.

Workspace values are allocated in execution order; a block is reused by a later value once every reader of its previous
value has run (last use strictly before the new value's producer), so a kernel never writes over its own inputs.
Best fit among free blocks; a block too small for any free request is never split (fragmentation is small for
the straight-line graphs models are).
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
        else:
            ref = BufferRef("workspace", 0, planner.alloc(nbytes(c.type), i, last_use[id(c)]))
        value_ref[id(c)] = ref
        refs.append(ref)
        kernel = kernels[task_calls.task_of[i]]
        n_fixed = kernel.attrs["num_inputs"] + kernel.attrs["num_outputs"]
        for buf in kernel.params[n_fixed:]:
            refs.append(BufferRef("workspace", 0, planner.alloc(buf.size * numpy_dtype(buf.dtype).itemsize, i, i)))
        executor.calls.append(KernelCall(kernel.name, refs))
    return MemoryPlan(executor, params, planner.size)


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
