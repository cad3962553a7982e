"""Running one case on one engine, as a user would, and judging the result.

relayish: `compile_model(case.model, input_shapes=<the case's input shapes>)`, then `run`. onnxruntime: an
`InferenceSession` on the CPU provider. Both run on one thread (a worker is one core; correctness, not speed).
Outputs are compared as onnx's own backend runner does: same count, shape and dtype, then
`assert_allclose(actual, expected, rtol, atol)` with the case's tolerances (onnx's defaults 1e-3 / 1e-7), NaN
positions equal; bool, integer and string outputs exactly.

A result's status is one of STATUSES:
  pass; wrong (ran, but an output differs); crash (the worker died or hung: set by the pool, never here);
  unsupported (the engine refused the model with a clear error: an op, opset, dtype or attribute it does not
  support); other-error (any other exception, at import, compile or run).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

STATUSES = ("pass", "wrong", "crash", "unsupported", "other-error")


@dataclass(frozen=True)
class CaseResult:
    name: str
    status: str  # one of STATUSES
    message: str = ""  # the error or the mismatch, as the engine said it
    seconds: float = 0.0
    ops: tuple[str, ...] = field(default=())


def graph_feeds(model, inputs) -> dict:
    """The case's input values by the name of the graph input they feed (initializers are not fed)."""
    init = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in init]
    return dict(zip(names, map(as_value, inputs)))


def as_value(value):
    """A case's input or expected output as onnx ships it, but TensorProtos (the cases' form for float8/int4 data,
    which no engine's Python API takes) as numpy arrays, element by element in sequences. Numpy scalars stay
    numpy scalars: a user's code feeds them as they are (onnxruntime refuses them; relayish takes them)."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, (list, tuple)):
        return [as_value(v) for v in value]
    return value


def compare(expected: list, actual: list, rtol: float, atol: float) -> str | None:
    """None if actual matches expected; otherwise what differs first, in one line."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for i, (want, got) in enumerate(zip(expected, actual)):
        problem = _compare_one(want, got, rtol, atol)
        if problem:
            return f"output {i}: {problem}"
    return None


def _compare_one(want, got, rtol, atol) -> str | None:
    if isinstance(want, (list, tuple)) or want is None:  # sequence and optional outputs
        if type(got) is not type(want) and not (isinstance(got, (list, tuple)) and isinstance(want, (list, tuple))):
            return f"a {type(got).__name__}, expected a {type(want).__name__}"
        if want is None:
            return None
        if len(got) != len(want):
            return f"a sequence of {len(got)}, expected {len(want)}"
        return next((p for w, g in zip(want, got) if (p := _compare_one(w, g, rtol, atol))), None)
    got = np.asarray(got)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    dtype = want.dtype.name
    if dtype == "bfloat16":  # ml_dtypes' (numpy kind 'V'): compared as floats, so that NaN matches NaN
        want, got = want.astype(np.float32), got.astype(np.float32)
    if want.dtype.kind not in "fc":
        bad = int(np.sum(got != want))
        return f"{bad} of {want.size} elements differ" if bad else None
    try:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as e:
        detail = " ".join(line.strip() for line in str(e).splitlines() if line.strip().startswith(("Mism", "Max")))
        if dtype in _MANTISSA_BITS:
            detail += f" (at most {ulps(want, got, dtype)} ulp of {dtype})"
        return detail or "values differ"
    return None


_MANTISSA_BITS = {"float16": 10, "bfloat16": 7}  # explicit mantissa bits of the 16-bit float types


def ulps(want: np.ndarray, got: np.ndarray, dtype: str) -> int:
    """The largest distance |got - want| over the finite elements, in units in the last place of `dtype` (a
    16-bit float type) at each expected value."""
    w, g = want.astype(np.float64), got.astype(np.float64)
    finite = np.isfinite(w) & np.isfinite(g)
    if not finite.any():
        return 0
    w, g = w[finite], g[finite]
    tiny = {"float16": -14, "bfloat16": -126}[dtype]  # subnormals share the smallest normal's spacing
    exponent = np.maximum(np.floor(np.log2(np.maximum(np.abs(w), 2.0 ** tiny))), tiny)
    return int(np.ceil(np.max(np.abs(g - w) / 2.0 ** (exponent - _MANTISSA_BITS[dtype]))))


def run_relayish(case) -> CaseResult:
    from compiler import compile_model
    from frontends import OnnxImportError
    return _run(case, lambda feeds: _relayish_session(case.model, feeds, compile_model),
                lambda e: isinstance(e, OnnxImportError) and bool(_UNSUPPORTED.search(str(e))))


def _relayish_session(model, feeds, compile_model):
    shapes = {k: np.shape(v) for k, v in feeds.items() if isinstance(v, (np.ndarray, np.generic))}
    module = compile_model(model, input_shapes=shapes, num_threads=1)
    return module.run


# An import error that says the model uses something relayish does not support (as opposed to a bug or a bad model)
_UNSUPPORTED = re.compile(r"unsupported|not supported|only .* supported|must be a constant|is not a tensor")


def run_onnxruntime(case) -> CaseResult:
    import onnxruntime as ort

    def session(feeds):
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.log_severity_level = 3
        sess = ort.InferenceSession(case.model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return sess.run

    return _run(case, session, lambda e: bool(_ORT_UNSUPPORTED.search(str(e))))


# onnxruntime's refusals of an op, opset or dtype (its Python binding cannot feed or fetch float8/int4/bfloat16)
_ORT_UNSUPPORTED = re.compile(r"NOT_IMPLEMENTED|Could not find an implementation|is not a registered function|"
                              r"not supported|Unsupported|opset .* is under development|"
                              r"can.t be converted to MLDataType|No corresponding Numpy type")

ENGINES = {"relayish": run_relayish, "onnxruntime": run_onnxruntime}


def _run(case, make_session, is_unsupported) -> CaseResult:
    """Build a session from each data set's feeds, run it, compare; any exception becomes a status."""
    from .cases import case_ops
    start = time.perf_counter()
    ops = tuple(sorted(case_ops(case)))

    def result(status, message=""):
        return CaseResult(case.name, status, message, time.perf_counter() - start, ops)

    for inputs, expected in case.data_sets:
        feeds = graph_feeds(case.model, inputs)
        try:
            run = make_session(feeds)
        except Exception as e:  # noqa: BLE001  (every refusal is a result: the suite goes on)
            return result("unsupported" if is_unsupported(e) else "other-error", f"{type(e).__name__}: {e}")
        try:
            actual = run(None, feeds)
        except Exception as e:  # noqa: BLE001
            return result("unsupported" if is_unsupported(e) else "other-error", f"run: {type(e).__name__}: {e}")
        problem = compare([as_value(v) for v in expected], list(actual), case.rtol, case.atol)
        if problem:
            return result("wrong", problem)
    return result("pass")
