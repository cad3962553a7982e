"""Traces: what a MetaSchedule-style program did, as data (Shao et al., NeurIPS'22, section 3).

A trace is the straight-line list of schedule instructions a program ran, each naming its inputs and outputs as
random variables (RVs), plus the decision each sampling instruction made:

    b0 = get_block(name="conv2d_nchwc")                  # a block RV: a stage
    l1, l2, l3, l4, l5 = get_loops(b0)                   # loop RVs: its loops
    v6, v7 = sample_perfect_tile(l4, n=2, max_innermost_factor=16)    decision: [4, 14]
    l8, l9 = split(l4, [v6, v7])                         # expression RVs flow into later instructions

Replaying the instructions on a fresh `Schedule` of the same task with the same decisions gives the same
program; with other decisions (or none: sample afresh) it gives another program of the same design space.
Python control flow around a sampled value is not recorded, so a value that changes what follows must flow
through an instruction (an annotation the postprocessor reads, see schedule.py) rather than an `if`.

JSON form: {"insts": [[kind, inputs, attrs, outputs], ...], "decisions": {"<index>": decision}}. Inputs hold RV
ids (strings such as "v6") and literal ints/None, possibly in nested lists; literal names go in attrs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

SAMPLING_KINDS = ("sample_perfect_tile", "sample_categorical", "sample_compute_location")


@dataclass(frozen=True)
class RV:
    """A random variable of a schedule program: a block ("b"), a loop ("l") or an integer expression ("v")."""
    id: str

    def __repr__(self):
        return self.id


class BlockRV(RV):
    pass


class LoopRV(RV):
    pass


class ExprRV(RV):
    pass


@dataclass(frozen=True)
class Instruction:
    kind: str  # a Schedule method name
    inputs: tuple  # RV ids (str), ints, None, or tuples of those
    attrs: tuple  # (name, literal) pairs
    outputs: tuple  # RV ids

    def to_json(self) -> list:
        return [self.kind, _to_list(self.inputs), [[k, _to_list(v)] for k, v in self.attrs], list(self.outputs)]

    @staticmethod
    def from_json(item) -> "Instruction":
        if not isinstance(item, list) or len(item) != 4 or not isinstance(item[0], str):
            raise ValueError(f"a trace instruction is [kind, inputs, attrs, outputs], got {item!r}")
        kind, inputs, attrs, outputs = item
        return Instruction(kind, _to_tuple(inputs), tuple((k, _to_tuple(v)) for k, v in attrs), tuple(outputs))

    def attr(self, name, default=None):
        return dict(self.attrs).get(name, default)

    def __str__(self):
        args = ", ".join([str(i) for i in self.inputs] + [f"{k}={v!r}" for k, v in self.attrs])
        outs = ", ".join(self.outputs)
        return f"{outs + ' = ' if outs else ''}{self.kind}({args})"


@dataclass
class Trace:
    """Instructions in program order and the decisions of the sampling ones (instruction index -> decision).

    Invariant: every key of `decisions` is the index of a sampling instruction."""
    insts: list = field(default_factory=list)
    decisions: dict = field(default_factory=dict)

    def sampling_sites(self, kind: str | None = None) -> list[int]:
        """Indices of the sampling instructions (of one kind, when given)."""
        return [i for i, inst in enumerate(self.insts)
                if inst.kind in SAMPLING_KINDS and (kind is None or inst.kind == kind)]

    def with_decision(self, index: int, decision) -> "Trace":
        """The same instructions, with one decision replaced (None: sample it afresh on replay)."""
        if self.insts[index].kind not in SAMPLING_KINDS:
            raise ValueError(f"instruction {index} ({self.insts[index].kind}) makes no decision")
        decisions = dict(self.decisions)
        if decision is None:
            decisions.pop(index, None)
        else:
            decisions[index] = decision
        return Trace(list(self.insts), decisions)

    def without_decisions(self) -> "Trace":
        return Trace(list(self.insts), {})

    def to_json(self) -> str:
        return json.dumps({"insts": [i.to_json() for i in self.insts],
                           "decisions": {str(k): _to_list(v) for k, v in sorted(self.decisions.items())}})

    @staticmethod
    def from_json(text: str) -> "Trace":
        obj = json.loads(text)
        if not isinstance(obj, dict) or set(obj) != {"insts", "decisions"}:
            raise ValueError("a trace is a JSON object with 'insts' and 'decisions'")
        insts = [Instruction.from_json(i) for i in obj["insts"]]
        decisions = {int(k): _to_tuple(v) for k, v in obj["decisions"].items()}
        trace = Trace(insts, decisions)
        bad = [k for k in decisions if not 0 <= k < len(insts) or insts[k].kind not in SAMPLING_KINDS]
        if bad:
            raise ValueError(f"trace decisions {bad} do not belong to sampling instructions")
        return trace

    def __eq__(self, other):
        return isinstance(other, Trace) and self.insts == other.insts and self.decisions == other.decisions

    def __str__(self):
        lines = []
        for k, inst in enumerate(self.insts):
            d = f"    # decision: {self.decisions[k]!r}" if k in self.decisions else ""
            lines.append(f"{inst}{d}")
        return "\n".join(lines)


def _to_list(v):
    return [_to_list(x) for x in v] if isinstance(v, (list, tuple)) else v


def _to_tuple(v):
    return tuple(_to_tuple(x) for x in v) if isinstance(v, (list, tuple)) else v
