"""Free dims of a model's inputs: what compile_model's input_shapes leave free (a dim given as None, -1 or a
(lo, hi) range, or one the model leaves unbound), and the sizes a call's input shapes give them.

    specs = input_specs(declared, input_shapes)   # input name -> (Dim, ...): fixed size, or symbol with its range
    sizes = bind(specs, {"x": (1, 3, 48, 320)})    # symbol -> size; ValueError naming the input and dim otherwise

The session over free dims (compiler/dynamic.py) and the generic module with run-time extents
(compiler/generic.py) check their inputs with the same bind.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Dim:
    """One dim of an input: fixed (size) or free (symbol, lo <= size <= hi; hi None: no bound)."""
    size: int | None = None
    symbol: str | None = None
    lo: int = 0
    hi: int | None = None

    def show(self) -> str:
        if self.size is not None:
            return str(self.size)
        if self.lo == 0 and self.hi is None:
            return self.symbol
        return f"{self.symbol} in [{self.lo}, {'inf' if self.hi is None else self.hi}]"


def is_free(d) -> bool:
    """Whether an input_shapes dim leaves the dim free: None, -1 or a (lo, hi) range."""
    return d is None or (isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d == -1) or \
        isinstance(d, (tuple, list))


def has_free_dims(input_shapes: dict) -> bool:
    return any(is_free(d) for shape in (input_shapes or {}).values() for d in tuple(shape))


def input_specs(declared: dict, input_shapes: dict) -> dict[str, tuple[Dim, ...]]:
    """Each graph input's dims, from the model's declared dims (int, dim_param name or None) and input_shapes.
    Raises ValueError naming the input and dim for what cannot be: a rank or fixed size the model contradicts, a
    bad range, an unknown input."""
    unknown = sorted(set(input_shapes) - set(declared))
    if unknown:
        raise ValueError(f"input_shapes names {unknown}, which are not graph inputs of the model "
                         f"(inputs: {sorted(declared)})")
    specs = {}
    for name, dims in declared.items():
        given = input_shapes.get(name)
        if dims is None and given is None:
            raise ValueError(f"input {name!r} declares no shape: give it in input_shapes (None for a free dim)")
        if given is not None and dims is not None and len(tuple(given)) != len(dims):
            raise ValueError(f"input_shapes[{name!r}] = {tuple(given)} has rank {len(tuple(given))}, but the "
                             f"model's input {name!r} has rank {len(dims)}")
        rank = len(tuple(given)) if given is not None else len(dims)
        specs[name] = tuple(_dim(name, axis, None if dims is None else dims[axis],
                                 None if given is None else tuple(given)[axis], given is not None)
                            for axis in range(rank))
    return specs


def _dim(name: str, axis: int, declared, given, was_given: bool) -> Dim:
    symbol = declared if isinstance(declared, str) else f"{name}.{axis}"
    where = f"input_shapes[{name!r}] dim {axis}"
    if not was_given:
        return Dim(size=declared) if isinstance(declared, int) else Dim(symbol=symbol)
    if is_free(given):
        if isinstance(declared, int):
            raise ValueError(f"{where} is left free, but the model fixes it to {declared}")
        if isinstance(given, (tuple, list)):
            if len(given) != 2 or not all(isinstance(b, (int, np.integer)) for b in given) or \
                    not 0 <= given[0] <= given[1]:
                raise ValueError(f"{where} = {given}: a range is (lo, hi) with 0 <= lo <= hi")
            return Dim(symbol=symbol, lo=int(given[0]), hi=int(given[1]))
        return Dim(symbol=symbol)
    if not isinstance(given, (int, np.integer)) or isinstance(given, bool) or given < 0:
        raise ValueError(f"{where} = {given!r}: a dim is a size (int >= 0), None or -1 (free), or (lo, hi)")
    if isinstance(declared, int) and declared != given:
        raise ValueError(f"{where} = {given}, but the model fixes it to {declared}")
    return Dim(size=int(given))


def bind(specs: dict, shapes: dict) -> dict[str, int]:
    """The size of every free symbol for these input shapes (name -> tuple), or a ValueError naming the input,
    the dim and what was expected."""
    sizes, seen_in = {}, {}
    for name, dims in specs.items():
        if name not in shapes:
            raise ValueError(f"missing input {name!r} (inputs: {sorted(specs)})")
        shape = tuple(shapes[name])

        def expected():  # (made only for an error: a call's binding is on every run's path)
            return f"expected ({', '.join(d.show() for d in dims)})"
        if len(shape) != len(dims):
            raise ValueError(f"input {name!r} has shape {shape}, {expected()}")
        for axis, (size, d) in enumerate(zip(shape, dims)):
            if d.size is not None and size != d.size:
                raise ValueError(f"input {name!r} has shape {shape}, {expected()}: dim {axis} must be {d.size}")
            if d.symbol is None:
                continue
            if size < d.lo or (d.hi is not None and size > d.hi):
                raise ValueError(f"input {name!r} has shape {shape}, {expected()}: dim {axis} ({d.symbol!r}) is "
                                 f"{size}, outside its range")
            if sizes.setdefault(d.symbol, size) != size:
                raise ValueError(f"input {name!r} has shape {shape}: dim {axis} ({d.symbol!r}) is {size}, but "
                                 f"input {seen_in[d.symbol]!r} has {d.symbol!r} = {sizes[d.symbol]}")
            seen_in.setdefault(d.symbol, name)
    return sizes
