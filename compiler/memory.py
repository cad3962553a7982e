"""Static memory planning: every intermediate tensor and kernel scratch buffer gets an offset in one workspace.

Values are allocated in execution order; a block is reused by a later value once every reader of its previous
value has run (last use strictly before the new value's producer), so a kernel never writes over its own inputs.
Best fit among free blocks; a block too small for any free request is never split (fragmentation is small for
the straight-line graphs models are).
"""
from __future__ import annotations

from dataclasses import dataclass

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
