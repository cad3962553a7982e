"""Shared by the tests of onnxruntime's contrib ops (tests/test_contrib_*.py): one-node models in the com.microsoft
domain, onnxruntime's reference run, and the three-way comparison (compiled vs the numpy interpreter vs
onnxruntime)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import helper, numpy_helper

from compiler import compile_model
from frontends import from_onnx
from relayish.interp import evaluate

CONTRIB = "com.microsoft"
RTOL = 1e-4


def node_model(op, inputs, outputs=("y",), attrs=None, domain=CONTRIB, opset=17):
    """A one-node model. inputs: per node input, None (omitted), (name, numpy array) for an initializer, or
    (name, numpy dtype, shape) for a graph input; outputs: names of float32 outputs, (name, numpy dtype), or ''
    (omitted)."""
    outputs = [(o, np.float32) if isinstance(o, str) else o for o in outputs]
    graph_inputs, inits, names = [], [], []
    for spec in inputs:
        if spec is None:
            names.append("")
        elif len(spec) == 2:
            names.append(spec[0])
            inits.append(numpy_helper.from_array(np.asarray(spec[1]), spec[0]))
        else:
            name, dtype, shape = spec
            names.append(name)
            graph_inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                                              shape))
    node = helper.make_node(op, names, [o for o, _ in outputs], name=f"{op}_node", domain=domain, **(attrs or {}))
    graph = helper.make_graph([node], "t", graph_inputs,
                              [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(np.dtype(t)), None)
                               for o, t in outputs if o],
                              inits)
    for out in graph.output:  # the checker wants a shape, even an unknown one
        out.type.tensor_type.shape.SetInParent()
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid(CONTRIB, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def run_ort(model, feeds, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3  # no shape-merge warnings about the one-node models' unknown output shapes
    data = model if isinstance(model, (bytes, str)) else model.SerializeToString()
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def relative_error(ours, ref) -> float:
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    if not ref.size:
        return 0.0
    return float(np.max(np.abs(ours - ref))) / max(float(np.max(np.abs(ref))), 1e-30)


def steps_apart(ours, ref) -> int:
    """The largest difference of two quantized tensors, in quantization steps."""
    return int(np.max(np.abs(ours.astype(np.int64) - ref.astype(np.int64)))) if ref.size else 0


def three_way(model, feeds, rtol=RTOL, steps=0, compiled=True):
    """Every output: onnxruntime's dtype and shape; float outputs within rtol of onnxruntime's (relative to its
    largest magnitude), integer outputs within `steps` of it; the compiled outputs and the interpreter's agree
    the same way. Returns onnxruntime's outputs."""
    refs = run_ort(model, feeds)
    interp = evaluate(from_onnx(model), feeds)
    interp = list(interp) if isinstance(interp, (list, tuple)) else [interp]
    runs = [("interpreter", interp)]
    if compiled:
        runs.append(("compiled", compile_model(model).run(None, feeds)))
    for what, outs in runs:
        assert len(outs) == len(refs), f"{what}: {len(outs)} outputs, onnxruntime {len(refs)}"
        for k, (a, ref) in enumerate(zip(outs, refs)):
            a = np.asarray(a)
            assert a.shape == ref.shape and a.dtype == ref.dtype, \
                f"{what} output {k}: {a.shape} {a.dtype} vs onnxruntime's {ref.shape} {ref.dtype}"
            if ref.dtype.kind == "f":
                err = relative_error(a, ref)
                assert err <= rtol, f"{what} output {k}: relative error {err:.3g} > {rtol}"
            else:
                apart = steps_apart(a, ref)
                assert apart <= steps, f"{what} output {k}: {apart} steps from onnxruntime's (allowed {steps})"
    return refs
