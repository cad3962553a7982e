"""What a compile is asked to do, as one object (like TVM's PassContext and Target together): `CompileOptions`.

compile_model's keyword arguments make one; the compile cache's key, the value specializer and the command line
all read the same object, so that an option added here reaches each of them. Modes that were strings are enums
whose values are those strings (`DefaultSchedules("naive")`, `Layout("NCHW")`): code and records that spell them
as strings keep working.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum


class DefaultSchedules(str, Enum):
    """What a task without a tuning record runs (compiler/backend.py untuned_schedule)."""
    HAND_WRITTEN = "hand-written"  # compiler/default_schedule.py's rules
    NAIVE = "naive"  # the plain loop nest: what a template-free tuner starts from


class Layout(str, Enum):
    """The activation layout of convolutions: channel-blocked (NCHW{b}c) or the model's own."""
    NCHWC = "NCHWc"
    NCHW = "NCHW"


def _enum(kind, value, what: str):
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"{what} must be one of {[m.value for m in kind]}, got {value!r}") from None


def as_default_schedules(value) -> DefaultSchedules:
    """DefaultSchedules from the enum or its string, with an error naming the choices."""
    return _enum(DefaultSchedules, value, "default_schedules")


SPECIALIZE = ("auto", "eager", "never")


@dataclass(frozen=True)
class CompileOptions:
    """Every option of compile_model (see its docstring for what each does)."""
    input_shapes: dict = field(default_factory=dict)  # input name -> shape (binds symbolic dims; None: free)
    layout: Layout = Layout.NCHWC
    opt_level: int = 3
    records: str | None = None  # a tuning records database
    num_threads: int | None = None
    verbose: bool = False
    winograd: bool = True
    strict: bool = False  # refuse unbound symbolic dims instead of binding them to 1
    default_schedules: DefaultSchedules = DefaultSchedules.HAND_WRITTEN
    cache: bool | None = None  # None: on unless RELAYISH_CACHE=0
    input_values: dict = field(default_factory=dict)  # input name -> array: compiled as constants
    max_specializations: int = 8  # with free dims: compiled shapes kept (compiler/dynamic.py)
    specialize: str = "auto"  # with free dims: "auto", "eager" or "never" (compiler/dynamic.py)

    def __post_init__(self):
        set_ = object.__setattr__  # (frozen: normalized once, here)
        set_(self, "layout", _enum(Layout, self.layout, "layout"))
        set_(self, "default_schedules", as_default_schedules(self.default_schedules))
        set_(self, "input_shapes", dict(self.input_shapes or {}))
        set_(self, "input_values", dict(self.input_values or {}))
        if not isinstance(self.opt_level, int) or not 0 <= self.opt_level <= 3:
            raise ValueError(f"opt_level must be an int from 0 to 3, got {self.opt_level!r}")
        if self.specialize not in SPECIALIZE:
            raise ValueError(f"specialize must be one of {list(SPECIALIZE)}, got {self.specialize!r}")
        if self.num_threads is not None and (not isinstance(self.num_threads, int) or self.num_threads < 1):
            raise ValueError(f"num_threads must be a positive int or None, got {self.num_threads!r}")

    def replace(self, **changes) -> CompileOptions:
        return dataclasses.replace(self, **changes)

    def cache_fields(self) -> dict:
        """What decides the compiled code, as the compile cache's key reads it (not records, hashed by content,
        nor num_threads/verbose/cache, which change no code; input_values by their digest, see compile.py)."""
        return {"input_shapes": {k: list(v) for k, v in self.input_shapes.items()}, "layout": self.layout.value,
                "opt_level": self.opt_level, "winograd": self.winograd, "strict": self.strict,
                "default_schedules": self.default_schedules.value}
