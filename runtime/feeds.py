"""Checking what a caller passes to `Module.run`, before anything native runs.

A wrong shape or dtype reaching native code is a silent out-of-bounds read, not an exception, so every input is
checked against its TensorSpec here. The rule: an array of the right dtype and shape is used as is, or copied when
only its memory layout is off (not C-contiguous, not 64-byte aligned, other byte order: copying changes no value;
the binding in Module copies the first two into its workspace slot's aligned buffers);
anything else is a ValueError naming the input, what was expected and what was given. Arrays are never cast
(float64 -> float32 would silently change results; onnxruntime refuses it too). A numpy scalar is a 0-d array of
its dtype; Python numbers and lists of them are converted to the input's dtype as onnxruntime converts a list, but
only where every value is representable (no 1.5 into int64, no 300 into uint8). Inputs are only read by the native
code, so read-only arrays are fine.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np



def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype named in a library's metadata. bfloat16 is not numpy's own: it is ml_dtypes' (onnx's
    dependency), imported only for a model that has a bfloat16 input or output."""
    if name == "bfloat16":
        try:
            import ml_dtypes  # noqa: F401  (registers the name with numpy)
        except ImportError:
            raise ValueError("this model has bfloat16 inputs or outputs, which numpy represents only with the "
                             "ml_dtypes package: pip install ml_dtypes") from None
    return np.dtype(name)


def _spelled(dtype: np.dtype) -> str:
    """How a user names dtype in Python."""
    return "ml_dtypes.bfloat16" if dtype.name == "bfloat16" else f"np.{dtype}"


def _expected(spec) -> str:
    return f"a numpy.ndarray of shape {spec.shape} and dtype {spec.dtype}"


def check_input(spec, value) -> np.ndarray:
    """`value` itself if it is an array of `spec`'s shape and dtype (a copy in native byte order if it is in the
    other one); a ValueError naming the input otherwise. Its memory layout is the binding's concern
    (Module._bind_inputs copies a misaligned or non-contiguous array into aligned memory)."""
    if type(value) is np.ndarray and value.dtype is spec.dtype and value.shape == spec.shape \
            and spec.index_bounds is None:  # the usual case, decided in a few attribute reads: run's hot path
        return value
    if isinstance(value, np.generic):  # a numpy scalar: a 0-d array of its own dtype (checked below as one)
        value = np.asarray(value)
    elif not isinstance(value, np.ndarray):
        value = _from_python(spec, value)
    if isinstance(value, np.ma.MaskedArray):
        raise ValueError(f"input '{spec.name}' must be {_expected(spec)}, got a masked array (its mask would be "
                         f"ignored: pass value.filled(...))")
    if value.dtype != spec.dtype:
        if value.dtype.newbyteorder("=") != spec.dtype:
            raise ValueError(f"input '{spec.name}' has dtype {value.dtype}, expected {spec.dtype} (no implicit "
                             f"casting: pass value.astype({_spelled(spec.dtype)}))")
        value = value.astype(spec.dtype)  # the other byte order: the same values
    if value.ndim != len(spec.shape):
        raise ValueError(f"input '{spec.name}' has rank {value.ndim} (shape {value.shape}), expected rank "
                         f"{len(spec.shape)} (shape {spec.shape})")
    if value.shape != spec.shape:
        raise ValueError(f"input '{spec.name}' has shape {value.shape}, expected {spec.shape}")
    if getattr(spec, "index_bounds", None) is not None:
        check_index_values(spec, value)
    return value


def _from_python(spec, value) -> np.ndarray:
    """A Python number or a (nested) list of them as an array of spec's dtype, as onnxruntime converts a list; but
    only where every value is representable: integers within the dtype's range, floats into float dtypes (rounded
    to nearest), integral floats into integer dtypes, 0/1 into bool. Anything else is a ValueError naming it."""
    if not isinstance(value, (bool, int, float, list, tuple)):
        raise ValueError(f"input '{spec.name}' must be {_expected(spec)}, got {type(value).__name__}")
    try:
        raw = np.array(value)
    except ValueError:  # numpy refuses a ragged nesting
        raw = None
    if raw is None or raw.dtype.kind not in "biuf":
        raise ValueError(f"input '{spec.name}' must be {_expected(spec)}, got a {type(value).__name__} that is not "
                         f"a rectangular nesting of numbers")
    kind = spec.dtype.kind
    if kind not in "biu" or raw.size == 0:  # float16/32/64 and ml_dtypes' bfloat16 (kind 'V')
        bad = None
    elif raw.dtype.kind == "f" and not np.all(raw == np.round(raw)):
        bad = "a fraction"
    elif kind == "b":
        bad = None if np.all((raw == 0) | (raw == 1)) else "a value other than 0 and 1"
    else:
        info = np.iinfo(spec.dtype)
        exact = raw.astype(object)  # Python ints: no numpy promotion between uint64 and the int64 bounds
        bad = None if np.all((exact >= info.min) & (exact <= info.max)) else \
            f"a value outside [{info.min}, {info.max}]"
    if bad:
        raise ValueError(f"input '{spec.name}' is a {type(value).__name__} holding {bad}, which {spec.dtype} cannot "
                         f"represent (pass a numpy.ndarray of dtype {spec.dtype})")
    return raw.astype(spec.dtype)


def check_index_values(spec, value: np.ndarray) -> None:
    """_check_index_bounds, the spec's ignored value (a loss's ignore_index, masked before use) allowed too."""
    ignored = getattr(spec, "index_ignored", None)
    if ignored is None:
        return _check_index_bounds(spec, value)
    try:
        _check_index_bounds(spec, np.where(value == ignored, np.zeros((), value.dtype), value))
    except ValueError as e:
        raise ValueError(f"{e}, or equal the ignored index {ignored}") from None


def _check_index_bounds(spec, value: np.ndarray) -> None:
    """An input used as indices into a table: every value in [lo, hi) (negative ones count from the end); with
    one (lo, hi) per position of the last axis, the value at last position t in pair t."""
    if isinstance(spec.index_bounds[0], (tuple, list)):
        lo, hi = (np.array([b[k] for b in spec.index_bounds]) for k in (0, 1))
    else:
        lo, hi = spec.index_bounds
    bad = (value < lo) | (value >= hi)
    if value.size and bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        low, high = (int(np.broadcast_to(b, value.shape)[where]) for b in (lo, hi))
        raise ValueError(f"input '{spec.name}' holds {int(value[where])} at {where}, outside [{low}, {high}): it "
                         f"indexes a table of {high} entries (ids must be < {high})")


def check_feed(specs, input_feed) -> list[np.ndarray]:
    """check_input for every spec, in ABI order; the feed must name each input exactly once."""
    if type(input_feed) is not dict and not isinstance(input_feed, Mapping):
        raise ValueError(f"input_feed must be a dict of input name -> numpy array, got {type(input_feed).__name__}")
    try:
        values = [input_feed[spec.name] for spec in specs]
    except KeyError:
        values = None
    if values is None or len(input_feed) != len(specs):
        names = [s.name for s in specs]
        unknown = [k for k in input_feed if k not in names]
        missing = [n for n in names if n not in input_feed]
        parts = ([f"unknown input(s) {', '.join(map(repr, unknown))}"] if unknown else []) + \
                ([f"missing input(s) {', '.join(map(repr, missing))}"] if missing else [])
        raise ValueError(f"{'; '.join(parts)} (the model's inputs are {', '.join(map(repr, names))})")
    return [check_input(spec, value) for spec, value in zip(specs, values)]


def output_indices(output_names, index: dict[str, int]) -> list[int]:
    """Positions of the requested outputs; None or an empty list mean all of them, as in onnxruntime."""
    if output_names is None:
        return list(index.values())
    if isinstance(output_names, (str, bytes)) or not isinstance(output_names, Sequence) or \
            not all(isinstance(n, str) for n in output_names):
        raise ValueError(f"output_names must be a list of output names or None, got {output_names!r}")
    if not output_names:
        return list(index.values())
    unknown = [n for n in output_names if n not in index]
    if unknown:
        raise ValueError(f"unknown output(s) {', '.join(map(repr, unknown))} (the model's outputs are "
                         f"{', '.join(map(repr, index))})")
    return [index[n] for n in output_names]


def pick_outputs(outputs: list[np.ndarray], wanted: list[int]) -> list[np.ndarray]:
    """outputs[i] for i in wanted; an output asked for twice is returned as two arrays, not one array twice."""
    seen, picked = set(), []
    for i in wanted:
        picked.append(outputs[i].copy() if i in seen else outputs[i])
        seen.add(i)
    return picked
