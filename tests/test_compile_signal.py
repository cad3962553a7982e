"""Three-way numerics (compiled vs the numpy interpreter vs onnxruntime) of the signal and sampling ops:
GridSample (every mode, padding mode and align_corners, 4-D and 5-D), AffineGrid, the window functions,
MelWeightMatrix, DFT (opsets 17 and 20, real and complex, onesided, inverse, dft_length) and STFT; grids holding
NaN, inf and huge values read nothing out of bounds; bad nodes give clear errors.

A case: the arguments of harness.typed_model: (op type, graph inputs, attributes, opset, initializers).
"""
from __future__ import annotations

import numpy as np
import pytest

from compiler import compile_model
from frontends import OnnxImportError, from_onnx
from harness import case_id, f32, feeds_for, i64, run_ort, run_reference, three_way, typed_model
from relayish.interp import evaluate

F = "float32"

GRID_SAMPLES = [
    ("GridSample", {"x": ((2, 3, 4, 5), F), "g": ((2, 3, 6, 2), F)},
     {"mode": mode, "padding_mode": pad, "align_corners": ac}, 16, {})
    for mode in ("bilinear", "nearest", "bicubic") for pad in ("zeros", "border", "reflection") for ac in (0, 1)
] + [
    ("GridSample", {"x": ((1, 2, 3, 4), F), "g": ((1, 5, 1, 2), F)}, {"mode": "linear"}, 20, {}),
    ("GridSample", {"x": ((1, 2, 3, 4), F), "g": ((1, 2, 5, 2), F)}, {"mode": "cubic", "padding_mode": "border"}, 22,
     {}),
    ("GridSample", {"x": ((1, 2, 3, 4, 2), F), "g": ((1, 2, 3, 2, 3), F)},
     {"mode": "linear", "padding_mode": "reflection", "align_corners": 1}, 20, {}),
    ("GridSample", {"x": ((1, 2, 3, 4, 2), F), "g": ((1, 2, 3, 2, 3), F)}, {"mode": "nearest"}, 20, {}),
    ("GridSample", {"x": ((1, 1, 1, 4), F), "g": ((1, 2, 3, 2), F)},
     {"mode": "bilinear", "padding_mode": "reflection", "align_corners": 1}, 16, {}),
]

AFFINE = [
    ("AffineGrid", {"t": ((2, 2, 3), F)}, {"align_corners": ac}, 20, {"s": i64(2, 3, 4, 5)}) for ac in (0, 1)
] + [
    ("AffineGrid", {"t": ((1, 3, 4), F)}, {"align_corners": ac}, 20, {"s": i64(1, 2, 3, 4, 2)}) for ac in (0, 1)
]

DFTS = [
    ("DFT", {"x": ((2, 8, 3, 1), F)}, {}, 17, {}),
    ("DFT", {"x": ((2, 8, 3, 1), F)}, {"onesided": 1}, 17, {"n": i64(10)}),
    ("DFT", {"x": ((2, 7, 3, 2), F)}, {}, 17, {"n": i64(5)}),
    ("DFT", {"x": ((2, 8, 3, 1), F)}, {"onesided": 1}, 20, {"n": None, "a": i64(-3)}),
    ("DFT", {"x": ((2, 5, 2), F)}, {"inverse": 1, "onesided": 1}, 20, {"n": i64(8), "a": i64(1)}),
    ("STFT", {"x": ((2, 40, 1), F)}, {}, 17, {"step": i64(6), "w": np.hanning(10).astype(np.float32)}),
    ("STFT", {"x": ((1, 32, 2), F), "w": ((8,), F)}, {"onesided": 0, "_order": ["x", "step", "w"]}, 17,
     {"step": i64(4)}),
    ("STFT", {"x": ((1, 32, 1), F)}, {"_order": ["x", "step", "", "n"]}, 17, {"step": i64(5), "n": i64(9)}),
]

WINDOWS = [
    (op, {}, {"periodic": p}, 17, {"n": i64(s)}) for op in ("HannWindow", "HammingWindow", "BlackmanWindow")
    for p in (0, 1) for s in (3, 10)
] + [
    ("HannWindow", {}, {"output_datatype": 11}, 17, {"n": np.int32(7)}),
    ("MelWeightMatrix", {}, {}, 17, {"m": i64(8), "d": i64(64), "r": i64(8000), "lo": f32(0.0), "hi": f32(4000.0)}),
    ("MelWeightMatrix", {}, {}, 17, {"m": i64(5), "d": i64(16), "r": i64(16000), "lo": f32(100.0),
                                     "hi": f32(3000.0)}),
]

COL2IMS = [
    ("Col2Im", {"x": ((2, 3 * 4, 12), F)}, {}, 18, {"i": i64(4, 5), "b": i64(2, 2)}),
    ("Col2Im", {"x": ((1, 2 * 6, 6), F)}, {"strides": [2, 1], "pads": [1, 0, 0, 1], "dilations": [1, 2]}, 18,
     {"i": i64(5, 5), "b": i64(2, 3)}),
    ("Col2Im", {"x": ((1, 8, 12), F)}, {}, 18, {"i": i64(3, 3, 4), "b": i64(2, 2, 2)}),
]

ROIS = f32([0.0, 0.0, 5.0, 4.0], [1.5, 2.0, 9.0, 7.5], [-2.0, 3.0, 4.0, 12.0], [6.0, 6.0, 6.5, 6.2])
BATCHES = i64(0, 1, 1, 0)
ROI_ALIGNS = [
    ("RoiAlign", {"x": ((2, 3, 8, 9), F), "r": ROIS, "b": BATCHES},
     {"output_height": 3, "output_width": 2, "sampling_ratio": 2}, 10, {}),
    ("RoiAlign", {"x": ((2, 3, 8, 9), F), "r": ROIS, "b": BATCHES},
     {"output_height": 2, "output_width": 4, "sampling_ratio": 3, "spatial_scale": 0.5}, 16, {}),
    ("RoiAlign", {"x": ((2, 3, 8, 9), F), "r": ROIS, "b": BATCHES},
     {"coordinate_transformation_mode": "output_half_pixel", "output_height": 3, "output_width": 3,
      "sampling_ratio": 1}, 16, {}),
    ("RoiAlign", {"x": ((2, 3, 8, 9), F), "r": ROIS, "b": BATCHES},
     {"mode": "max", "output_height": 3, "output_width": 2, "sampling_ratio": 2}, 16, {}),
    ("RoiAlign", {"x": ((2, 3, 8, 9), F), "b": BATCHES}, {"output_height": 2, "output_width": 3,
                                                          "_order": ["x", "r", "b"]}, 16, {"r": ROIS}),
    ("RoiAlign", {"x": ((2, 3, 8, 9), F), "b": BATCHES}, {"output_height": 2, "output_width": 2, "mode": "max",
                                                          "_order": ["x", "r", "b"]}, 10, {"r": ROIS}),
]

CASES = GRID_SAMPLES + AFFINE + DFTS + WINDOWS + COL2IMS + ROI_ALIGNS


def _scalar_consts(case):
    """Window sizes and STFT steps are scalars in ONNX: 1-element 1-D initializers become 0-D."""
    op, inputs, attrs, opset, consts = case
    scalars = {"n", "step", "m", "d", "r", "lo", "hi", "a"} if op != "AffineGrid" else set()
    consts = {k: (np.asarray(v).reshape(()) if k in scalars and v is not None and np.asarray(v).size == 1 else v)
              for k, v in consts.items()}
    if op == "DFT" and "a" in consts and "n" not in consts:
        consts = {"n": None, **consts}
    return op, inputs, attrs, opset, consts


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_three_way(case):
    model = typed_model(*_scalar_consts(case))
    # onnxruntime's float32 FFTs err by ~1e-5 relative; its RoiAlign max mode differs from the ONNX reference
    # (whose RoiAlign always defaults to half_pixel, wrong at opset 10, where onnxruntime is right)
    onnx_reference = case[0] in ("MelWeightMatrix", "DFT", "STFT") or (case[2].get("mode") == "max" and case[3] >= 16)
    three_way(model, feeds_for(case[1], np.random.default_rng(0)),
              reference=run_reference if onnx_reference else run_ort)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_wild_grid_values_stay_in_bounds(mode, padding):
    model = typed_model("GridSample", {"x": ((1, 2, 3, 4), F), "g": ((1, 2, 4, 2), F)},
                       {"mode": mode, "padding_mode": padding}, 16, {})
    x = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    g = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 3e9, -7.5, 0.25] * 2, np.float32).reshape(1, 2, 4, 2)
    g[0, 1, 3] = (0.5, -0.5)  # one ordinary position
    ours, = compile_model(model).run(None, {"x": x, "g": g})
    interp, = evaluate(from_onnx(model), {"x": x, "g": g})
    assert ours.shape == (1, 2, 2, 4)
    np.testing.assert_allclose(ours[..., 1, 3], interp[..., 1, 3], rtol=1e-5)
    finite = np.isfinite(ours)
    assert np.all(np.abs(ours[finite]) <= 2 * x.max() + 1)  # bicubic may overshoot a little


def test_roi_align_wild_rois_and_batch_indices_stay_in_bounds():
    model = typed_model("RoiAlign", {"x": ((2, 1, 4, 5), F), "r": ((4, 4), F), "b": ((4,), "int64")},
                       {"output_height": 2, "output_width": 2, "sampling_ratio": 2}, 16, {})
    x = np.arange(40, dtype=np.float32).reshape(2, 1, 4, 5)
    rois = np.array([[np.nan, 0, 3, 3], [np.inf, -np.inf, 1e30, 1e30], [-1e30, 2, 3e9, 3], [0, 0, 3, 3]], np.float32)
    feeds = {"x": x, "r": rois, "b": np.array([0, 1, 1, 1], np.int64)}
    ours, = compile_model(model).run(None, feeds)
    interp, = evaluate(from_onnx(model), feeds)
    np.testing.assert_allclose(ours[3], interp[3], rtol=1e-5)
    assert np.all(np.abs(ours[np.isfinite(ours)]) <= x.max())


@pytest.mark.parametrize("op,inputs,attrs,opset,consts,message", [
    ("RoiAlign", {"x": ((1, 1, 4, 4), F), "r": ((2, 4), F), "b": ((2,), "int64")}, {}, 16, {},
     "sampling_ratio 0 .* is not supported with run-time rois"),
    ("GridSample", {"x": ((1, 1, 3, 4), F), "g": ((1, 2, 2, 2), F)}, {"mode": "linear"}, 16, {},
     "mode must be one of bilinear, nearest, bicubic"),
    ("GridSample", {"x": ((1, 1, 3, 4), F), "g": ((1, 2, 2, 2), F)}, {"mode": "bilinear"}, 20, {},
     "mode must be one of linear, nearest, cubic"),
    ("GridSample", {"x": ((1, 1, 3, 4, 2), F), "g": ((1, 2, 2, 2, 3), F)}, {"mode": "cubic"}, 20, {},
     "cubic mode is supported for 4-D inputs"),
    ("GridSample", {"x": ((1, 1, 3, 4), F), "g": ((1, 2, 2, 3), F)}, {}, 16, {}, "grid must have shape"),
    ("GridSample", {"x": ((1, 1, 3, 4), F), "g": ((1, 2, 2, 2), F)}, {"padding_mode": "wrap"}, 16, {},
     "padding_mode must be zeros, border or reflection"),
    ("DFT", {"x": ((2, 8, 1), F)}, {"axis": 2}, 17, {}, "trailing re/im dim"),
    ("DFT", {"x": ((2, 8, 2), F)}, {"inverse": 1}, 17, {}, "inverse DFT with a complex output"),
    ("DFT", {"x": ((2, 8, 3), F)}, {}, 17, {}, "trailing dim of 1 \\(real\\) or 2"),
    ("AffineGrid", {"t": ((2, 2, 3), F)}, {}, 20, {"s": i64(2, 3, 4, 5, 6)}, "theta must have shape"),
    ("Col2Im", {"x": ((1, 8, 11), F)}, {}, 18, {"i": i64(4, 5), "b": i64(2, 2)}, "input must be \\[N, C \\* 4, 12\\]"),
    ("STFT", {"x": ((1, 32, 1), F)}, {}, 17, {"step": np.int64(4), "w": np.ones(8, np.float32),
                                              "n": np.int64(6)}, "the window has 8 samples but frame_length is 6"),
])
def test_bad_nodes_are_refused(op, inputs, attrs, opset, consts, message):
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(typed_model(op, inputs, attrs, opset, consts))
