"""Ops over every dtype and the long tail (continues test_ops.py, whose test_every_op_is_swept reads this file too):
typed ops over int64 and bool, the elementwise tail (trigonometry, isnan / isinf, bitwise ops), data movement
(pad, gathers, scatters, one_hot), resize, and convolution and pooling of every rank; each compute definition against
its numpy reference (and onnxruntime where the reference is ONNX's), bad inputs raising an OpError that names the
problem."""
from __future__ import annotations

import numpy as np
import pytest

from relayish import OpError, TensorType, Var, call, get_op, te
from relayish.interp import evaluate_one
from te_eval import evaluate_te
from test_ops import check_op

# ---------------------------------------------------------------------------------------------- typed ops
# Ops over int64 and bool tensors too: (op, [(shape, dtype)], attrs). Broadcasts and negative axes included.

def _typed_inputs(specs, seed):
    rng = np.random.default_rng(seed)
    arrays = []
    for shape, dtype in specs:
        if dtype == "float32":
            arrays.append(rng.standard_normal(shape).astype(np.float32))
        elif dtype == "bool":
            arrays.append(rng.integers(0, 2, shape).astype(bool))
        else:  # ints in [-3, 3] without 0 (divisors, indices of a table of >= 3 rows)
            arrays.append(np.where(rng.integers(0, 2, shape) == 1, 1, -1) * rng.integers(1, 4, shape).astype(dtype))
    return arrays


def check_typed(op, specs, attrs=None, seed=0, rtol=1e-5):
    """check_op for inputs of any dtype: reference (interpreter) vs compute (te evaluator) vs declared type."""
    params = [Var(f"x{k}", TensorType(s, d)) for k, (s, d) in enumerate(specs)]
    node = call(op, *params, **(attrs or {}))
    arrays = _typed_inputs(specs, seed)
    ref = evaluate_one(node, arrays)
    placeholders = [te.placeholder(s, d, name=f"x{k}") for k, (s, d) in enumerate(specs)]
    got, = evaluate_te(get_op(op).compute(placeholders, node.attrs, node.type), dict(zip(placeholders, arrays)))
    assert got.shape == ref.shape == node.type.shape
    assert got.dtype == ref.dtype == np.dtype(node.type.dtype)
    if ref.dtype.kind == "f":
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * max(1.0, float(np.abs(ref).max(initial=0))))
    else:
        np.testing.assert_array_equal(got, ref)


F, I, B = "float32", "int64", "bool"
TYPED = [
    ("take", [((4, 3), F), ((2, 5), I)], {"axis": 0}), ("take", [((2, 4), F), ((3,), I)], {"axis": -1}),
    ("strided_slice", [((6, 7), F)], {"begin": (-1, 1), "end": (-100, 6), "strides": (-2, 2), "axes": (0, -1)}),
    ("strided_slice", [((6, 7), I)], {"begin": (2,), "end": (5,)}),
    ("broadcast_to", [((3, 1), I)], {"shape": (2, 3, 4)}),
    ("where", [((3, 1), B), ((1, 4), F), ((4,), F)], {}), ("where", [((2, 3), B), ((2, 3), I), ((3,), I)], {}),
    ("cast", [((2, 3), F)], {"dtype": "int64"}), ("cast", [((2, 3), I)], {"dtype": "float32"}),
    ("cast", [((2, 3), F)], {"dtype": "bool"}), ("cast", [((2, 3), B)], {"dtype": "float32"}),
    ("arange", [((), I)], {"count": 7, "delta": 3}), ("arange", [((), F)], {"count": 5, "delta": 0.5}),
    ("trilu", [((2, 4, 5), F)], {"upper": 0, "k": 1}), ("trilu", [((4, 5), I)], {"upper": 1, "k": -1}),
    ("abs", [((2, 3), F)], {}), ("abs", [((2, 3), I)], {}), ("erf", [((2, 3), F)], {}),
    ("reciprocal", [((2, 3), F)], {}), ("power", [((2, 3), I), ((3,), I)], {}),
    ("mod", [((2, 3), I), ((3,), I)], {"fmod": 0}), ("mod", [((2, 3), I), ((2, 1), I)], {"fmod": 1}),
    ("mod", [((2, 3), F), ((3,), F)], {"fmod": 1}),
    ("equal", [((2, 3), I), ((3,), I)], {}), ("less", [((2, 3), F), ((2, 1), F)], {}),
    ("greater", [((2, 3), I), ((1,), I)], {}), ("less_equal", [((2, 3), I), ((3,), I)], {}),
    ("greater_equal", [((2, 3), F), ((3,), F)], {}), ("logical_not", [((2, 3), B)], {}),
    ("logical_and", [((2, 3), B), ((3,), B)], {}), ("logical_or", [((2, 3), B), ((2, 1), B)], {}),
    ("logical_xor", [((2, 3), B), ((3,), B)], {}),
    ("sum", [((2, 3, 4), F)], {"axes": (-1, 0), "keepdims": False}), ("sum", [((2, 3, 4), I)], {}),
    ("mean", [((2, 3, 4), F)], {"axes": (1,)}), ("max", [((2, 3, 4), F)], {"axes": (-2,), "keepdims": False}),
    ("max", [((2, 3), B)], {"axes": (1,)}), ("min", [((2, 3, 4), I)], {"axes": (0, 2)}),
    ("prod", [((2, 3, 4), F)], {"axes": (-1, 0), "keepdims": False}), ("prod", [((2, 3, 4), I)], {"axes": (1,)}),
    ("argmax", [((2, 3, 4), F)], {"axis": -1, "keepdims": False}),
    ("argmax", [((3, 5), I)], {"axis": 0, "select_last_index": True}),  # ints in [-3, 3]: ties
    ("argmin", [((3, 5), I)], {"axis": 1}),
    ("argmin", [((2, 3, 4), I)], {"axis": -2, "keepdims": False, "select_last_index": True}),
    ("cumsum", [((3, 5), F)], {"axis": 1}), ("cumsum", [((3, 5), I)], {"axis": 0, "exclusive": True, "reverse": True}),
    ("cumprod", [((3, 5), F)], {"axis": -1, "reverse": True}),
    ("cumprod", [((3, 5), I)], {"axis": 0, "exclusive": True}),
    ("cumsum", [((2, 70), F)], {"axis": 1, "exclusive": True, "reverse": True}),  # long axes: in blocks
    ("cumsum", [((100, 2), I)], {"axis": 0}), ("cumprod", [((65, 2), F)], {"axis": 0, "reverse": True}),
    ("nn.layer_norm", [((2, 3, 8), F), ((8,), F), ((8,), F)], {"axis": -1, "epsilon": 1e-5}),
    ("nn.layer_norm", [((2, 3, 8), F), ((3, 1), F), ((8,), F)], {"axis": 1, "epsilon": 1e-3}),
    ("nn.layer_norm", [((2, 3, 32), F), ((32,), F), ((32,), F)], {"axis": -1, "epsilon": 1e-5}),  # row form
    ("nn.gelu", [((3, 7), F)], {}), ("nn.gelu", [((3, 7), F)], {"approximate": "tanh"}),
]


@pytest.mark.parametrize("op,specs,attrs", TYPED, ids=lambda v: str(v))
def test_typed_op(op, specs, attrs):
    check_typed(op, specs, attrs)


# ---- elementwise long tail (conf-elemwise): trigonometry, isnan / isinf, bitwise ops of every integer width
ELEMWISE_TAIL_FLOAT = [1.0, -0.5, 0.0, 0.9999, -1.0, 1.5, 3.0, -100.0, 1e7, np.nan, np.inf, -np.inf]


@pytest.mark.parametrize("op,attrs", [("sin", {}), ("cos", {}), ("tan", {}), ("asin", {}), ("acos", {}),
                                      ("atan", {}), ("isnan", {}), ("isinf", {}), ("isinf", {"detect_negative": 0}),
                                      ("isinf", {"detect_positive": 0}),
                                      ("isinf", {"detect_negative": 0, "detect_positive": 0})])
def test_elemwise_tail_float(op, attrs):
    x = np.array(ELEMWISE_TAIL_FLOAT, np.float32)
    node = call(op, Var("x", TensorType(x.shape)), **attrs)
    ref = evaluate_one(node, [x])
    placeholder = te.placeholder(x.shape, name="x")
    with np.errstate(invalid="ignore"):
        got, = evaluate_te(get_op(op).compute([placeholder], node.attrs, node.type), {placeholder: x})
    assert got.dtype == ref.dtype == np.dtype(node.type.dtype)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("op,specs,attrs", [
    ("bitwise_not", [((2, 3), "int32")], {}), ("bitwise_not", [((2, 3), "uint16")], {}),
    ("bitwise_and", [((2, 3), "uint8"), ((3,), "uint8")], {}), ("bitwise_or", [((2, 3), "int16"), ((2, 1), "int16")], {}),
    ("bitwise_xor", [((2, 3), I), ((3,), I)], {}),
    ("bit_shift", [((2, 3), "uint32"), ((3,), "uint32")], {"direction": "LEFT"}),
    ("bit_shift", [((2, 3), "int8"), ((2, 3), "int8")], {"direction": "RIGHT"}),  # negative amounts: the sign fill
    ("bit_shift", [((2, 3), "int64"), ((2, 3), "int64")], {"direction": "LEFT"}),
    ("bitcast", [((2, 3), F)], {"dtype": "int32"}), ("bitcast", [((2, 3), I)], {"dtype": "float64"}),
    ("bitcast", [((2, 3), "int8")], {"dtype": "uint8"}), ("bitcast", [((2, 3), B)], {"dtype": "int8"}),
], ids=lambda v: str(v))
def test_elemwise_tail_bitwise(op, specs, attrs):
    check_typed(op, specs, attrs)


def test_elemwise_tail_refuses_wrong_dtypes():
    with pytest.raises(OpError, match="sin: input must be a float tensor, got int32"):
        call("sin", Var("x", TensorType((2,), "int32")))
    with pytest.raises(OpError, match="bitwise_and: inputs must be int8 or"):
        call("bitwise_and", Var("a", TensorType((2,))), Var("b", TensorType((2,))))
    with pytest.raises(OpError, match="bitwise_not: input must be an integer tensor"):
        call("bitwise_not", Var("a", TensorType((2,), "bool")))
    with pytest.raises(OpError, match="bitcast: float32 and float64 differ in width"):
        call("bitcast", Var("a", TensorType((2,), "float32")), dtype="float64")
    with pytest.raises(OpError, match="attribute 'direction' is required"):
        call("bit_shift", Var("a", TensorType((2,), "uint8")), Var("b", TensorType((2,), "uint8")))


def test_power_of_floats():
    check_op("power", [(2, 3), (3,)], positive=(0,))


def test_log():
    check_op("log", [(2, 3)], positive=(0,))


def test_take_reference_refuses_an_index_out_of_range():
    with pytest.raises(IndexError, match=r"index 4 out of range \[-4, 4\)"):
        evaluate_one(call("take", Var("t", TensorType((4, 2))), Var("i", TensorType((1,), "int64"))),
                     [np.zeros((4, 2), np.float32), np.array([4])])

# ---------------------------------------------------------------------------------------------- data movement
# pad in every mode with negative pads; gathers and scatters (every reduction, duplicate indices: the typed
# inputs' ints are in [-3, 3]); one_hot

MOVEMENT = [
    ("pad", [((3, 4), F)], {"pads": (1, -1, 2, 3), "value": 2.0}),
    ("pad", [((3, 4), I)], {"pads": (2, 1, -1, 5), "mode": "reflect"}),
    ("pad", [((3, 4), F)], {"pads": (2, 1, 3, 5), "mode": "edge"}),
    ("pad", [((3, 4), I)], {"pads": (-1, 7, 4, 1), "mode": "wrap"}),
    ("pad", [((1, 3), F)], {"pads": (2, 0, 1, 1), "mode": "edge"}),  # an axis of one element
    ("pad", [((4, 3), F)], {"pads": (-3, 1, 2, 0), "mode": "wrap"}), ("pad", [((4, 3), F)], {"pads": (-3, 1, 2, -1)}),
    ("gather_elements", [((4, 4), F), ((2, 4), I)], {"axis": 0}),
    ("gather_elements", [((3, 4), I), ((3, 5), I)], {"axis": -1}),
    ("gather_nd", [((4, 4, 5), F), ((2, 2), I)], {}),
    ("gather_nd", [((3, 4, 5), F), ((3, 2, 1), I)], {"batch_dims": 1}),
    ("scatter_elements", [((4, 4), F), ((3, 4), I), ((3, 4), F)], {"axis": 0}),
    ("scatter_elements", [((3, 4), F), ((2, 5), I), ((2, 5), F)], {"axis": -1, "reduction": "add"}),
    ("scatter_elements", [((4, 3), F), ((5, 2), I), ((5, 2), F)], {"axis": 0, "reduction": "mul"}),
    ("scatter_elements", [((4, 3), I), ((5, 3), I), ((5, 3), I)], {"axis": 0, "reduction": "max"}),
    ("scatter_elements", [((4, 3), F), ((5, 3), I), ((5, 3), F)], {"axis": 0, "reduction": "min"}),
    ("scatter_nd", [((4, 5), F), ((3, 1), I), ((3, 5), F)], {}),
    ("scatter_nd", [((4, 4, 2), F), ((2, 3, 2), I), ((2, 3, 2), F)], {"reduction": "add"}),
    ("scatter_nd", [((4, 4), F), ((5, 2), I), ((5,), F)], {"reduction": "mul"}),
    ("scatter_nd", [((4, 4), I), ((5, 2), I), ((5,), I)], {"reduction": "max"}),
    ("scatter_nd", [((4, 4), F), ((5, 2), I), ((5,), F)], {"reduction": "min"}),
    ("one_hot", [((2, 3), I), ((2,), F)], {"depth": 4, "axis": 1}),
    ("one_hot", [((2, 3), I), ((2,), I)], {"depth": 2, "axis": -1}),
]


@pytest.mark.parametrize("op,specs,attrs", MOVEMENT, ids=lambda v: str(v))
def test_movement_op(op, specs, attrs):
    check_typed(op, specs, attrs)


@pytest.mark.parametrize("op,specs,attrs,message", [
    ("pad", [((2, 3), F)], {"pads": (1, 2)}, r"pad: pads must have 2 values per axis"),
    ("pad", [((2, 3), F)], {"pads": (0, 0, 0, 0), "mode": "mirror"}, r"pad: mode must be one of"),
    ("gather_elements", [((2, 3), F), ((2, 3), F)], {}, r"gather_elements: indices must be int64 or int32"),
    ("gather_elements", [((2, 3), F), ((2, 4), I)], {}, r"indices \(2, 4\) exceed data \(2, 3\) in dim 1"),
    ("gather_nd", [((2, 3), F), ((2, 3), I)], {}, r"gather_nd: the last dim of indices \(2, 3\) must be in"),
    ("scatter_elements", [((2, 3), F), ((2, 3), I), ((2, 2), F)], {}, r"updates \(2, 2\) float32 must have"),
    ("scatter_nd", [((2, 3), F), ((2, 1), I), ((2, 3), F)], {"reduction": "sum"}, r"reduction must be one of"),
    ("one_hot", [((2,), I), ((3,), F)], {"depth": 2}, r"one_hot: values must be \[off_value, on_value\]"),
])
def test_movement_bad_input_raises_op_error(op, specs, attrs, message):
    with pytest.raises(OpError, match=message):
        call(op, *[Var(f"x{k}", TensorType(s, d)) for k, (s, d) in enumerate(specs)], **attrs)


def test_movement_references_refuse_indices_out_of_range():
    with pytest.raises(IndexError, match=r"gather_elements: index 3 out of range \[-3, 3\) of axis 0"):
        get_op("gather_elements").ref(np.zeros((3, 2)), np.array([[3, 0]]), axis=0)
    with pytest.raises(IndexError, match=r"scatter_nd: index -3 out of range \[-2, 2\) of dim 0"):
        get_op("scatter_nd").ref(np.zeros((2, 2)), np.array([[-3]]), np.zeros((1, 2)), reduction="none")

# ---------------------------------------------------------------------------------------------- resize (conf-resize)
# every mode and coordinate transformation, up and down, a subset of axes, int data in nearest mode

RESIZE = [
    ("resize", [((1, 2, 3, 4), F)], {"sizes": (1, 2, 6, 8), "scales": (1, 1, 2, 2)}),
    ("resize", [((1, 1, 5, 4), I)], {"sizes": (1, 1, 3, 7), "scales": (1, 1, 0.6, 1.75), "nearest_mode": "ceil",
                                     "coordinate_transformation_mode": "asymmetric"}),
    ("resize", [((2, 3, 4), F)], {"sizes": (2, 5, 7), "scales": (1, 5 / 3, 7 / 4), "mode": "linear",
                                  "coordinate_transformation_mode": "align_corners"}),
    ("resize", [((1, 1, 4, 4), F)], {"sizes": (1, 1, 3, 3), "scales": (1, 1, 0.75, 0.75), "mode": "cubic",
                                     "exclude_outside": 1, "cubic_coeff_a": -0.5}),
    ("resize", [((1, 1, 8, 8), F)], {"sizes": (1, 1, 3, 5), "scales": (1, 1, 0.375, 0.625), "mode": "linear",
                                     "antialias": 1, "coordinate_transformation_mode": "pytorch_half_pixel"}),
    ("resize", [((1, 1, 6, 6), F)], {"sizes": (1, 1, 4, 4), "scales": (1, 1, 0.7, 0.7), "mode": "cubic",
                                     "antialias": 1, "coordinate_transformation_mode": "half_pixel_symmetric"}),
    ("resize", [((1, 1, 4, 4), F)], {"sizes": (1, 1, 3, 3), "scales": (1, 1, 0.75, 0.75), "mode": "linear",
                                     "coordinate_transformation_mode": "tf_crop_and_resize",
                                     "roi": (0, 0, -0.2, 0.4, 1, 1, 0.6, 1.3), "extrapolation_value": 7.0}),
    ("resize", [((3, 5), I)], {"sizes": (3, 4), "scales": (1, 0.8), "coordinate_transformation_mode":
                               "tf_crop_and_resize", "roi": (0, 0.1, 1, 1.2), "extrapolation_value": -2.0}),
]


@pytest.mark.parametrize("op,specs,attrs", RESIZE, ids=lambda v: str(v))
def test_resize_op(op, specs, attrs):
    check_typed(op, specs, attrs)


@pytest.mark.parametrize("specs,attrs,message", [
    ([((2, 3), F)], {"sizes": (4, 6), "scales": (2.0,)}, r"resize: sizes .* one value per dim"),
    ([((2, 3), F)], {"sizes": (4, 6), "scales": (2, 2), "mode": "area"}, r"resize: mode must be one of"),
    ([((2, 3), I)], {"sizes": (4, 6), "scales": (2, 2), "mode": "linear"}, r"linear mode needs a float input"),
    ([((2, 100), F)], {"sizes": (2, 1), "scales": (1, 0.01), "mode": "cubic", "antialias": 1},
     r"resize: 400 taps per output element"),
])
def test_resize_bad_input_raises_op_error(specs, attrs, message):
    with pytest.raises(OpError, match=message):
        call("resize", *[Var(f"x{k}", TensorType(s, d)) for k, (s, d) in enumerate(specs)], **attrs)
# ---- convolution and pooling of every rank (conf-convnd): 3-D windows over NCDHW

CONVND = [
    ("nn.conv3d", [(1, 2, 5, 6, 4), (3, 2, 2, 3, 2)], {}),
    ("nn.conv3d", [(1, 4, 6, 5, 7), (6, 2, 3, 2, 2)], {"strides": (2, 1, 2), "padding": (1, 0, 2, 0, 1, 1),
                                                      "dilation": (1, 2, 1), "groups": 2}),
    ("nn.max_pool3d", [(1, 2, 7, 6, 8)], {"pool_size": (3, 2, 3), "strides": (2, 2, 3),
                                          "padding": (1, 0, 1, 1, 1, 2), "dilation": (1, 2, 1), "ceil_mode": True}),
    ("nn.avg_pool3d", [(1, 2, 6, 7, 8)], {"pool_size": (2, 3, 2), "strides": (2, 2, 2)}),
    ("nn.avg_pool3d", [(1, 2, 7, 6, 8)], {"pool_size": (3, 3, 2), "strides": (2, 1, 3), "padding": (1, 1, 0, 1, 2, 1),
                                          "dilation": (2, 1, 2), "ceil_mode": True, "count_include_pad": True}),
    ("nn.conv_transpose", [(1, 4, 3, 4), (4, 3, 3, 2)], {"strides": (2, 3), "dilation": (1, 2), "pad_begin": (1, 0),
                                                        "output_size": (7, 12), "groups": 2}),
    ("nn.conv_transpose", [(2, 2, 5), (2, 3, 3)], {"strides": (2,), "dilation": (1,), "pad_begin": (0,),
                                                  "output_size": (13,)}),
    ("nn.conv_transpose", [(1, 2, 3, 2, 3), (2, 2, 2, 2, 3)], {"strides": (1, 2, 2), "dilation": (2, 1, 1),
                                                              "pad_begin": (1, 0, 2), "output_size": (4, 4, 6)}),
]


@pytest.mark.parametrize("op,shapes,attrs", CONVND, ids=lambda v: str(v))
def test_convnd_op(op, shapes, attrs):
    check_op(op, shapes, attrs)


def test_integer_max_pool3d():
    check_typed("nn.max_pool3d", [((1, 2, 3, 5, 6), I)], {"pool_size": (1, 2, 3), "padding": (0, 1, 1, 0, 1, 2),
                                                          "strides": (1, 2, 2), "ceil_mode": True})


def test_max_pool3d_argmax():
    window = {"pool_size": (2, 2, 3), "padding": (1, 1, 1, 0, 1, 2), "strides": (1, 2, 2), "ceil_mode": True}
    check_op("nn.max_pool3d_argmax", [(2, 3, 3, 5, 6)], window)
    check_op("nn.max_pool3d_argmax", [(1, 2, 1, 5, 6)], {"pool_size": (1, 3, 3), "padding": (0, 1, 1, 0, 1, 1),
                                                         "storage_order": 1})
    check_typed("nn.max_pool3d_argmax", [((1, 2, 3, 5, 6), I)], window)  # ints in [-3, 3]: many ties

# ---------------------------------------------------------------------------------------------- recurrent cells
# relayish/ops/recurrent.py: xp [T*B, D*G*Hp], steps int32 [2] (here ints in [-3, 3]: taken modulo T), state
# [1, D, S, B, Hp], weight [D, Hp/nb, H, G, nb] (H < Hp: padded units); tests/test_compile_rnn.py checks the layers
# they make against onnxruntime.

def _cell(op, seq, dirs, batch, units, padded, nb, gates, slots, **attrs):
    specs = [((seq * batch, dirs * gates * padded), F), ((2,), "int32"), ((1, dirs, slots, batch, padded), F),
             ((dirs, padded // nb, units, gates, nb), F)]
    if op == "nn.gru_cell":
        specs.append(((dirs, padded), F))  # bias
    if attrs.get("quantize_state"):
        specs.append(((dirs, gates * padded), F))  # the recurrent weight's scales
    return op, specs, attrs


CELLS = [_cell("nn.lstm_cell", 5, 2, 3, 7, 16, 16, 4, 2, reverse=(0, 1)),
         _cell("nn.lstm_cell", 4, 1, 1, 20, 32, 16, 4, 2, reverse=(1,)),
         _cell("nn.lstm_cell", 3, 2, 2, 9, 16, 16, 4, 2, reverse=(0, 1), quantize_state=1),
         _cell("nn.gru_cell", 5, 2, 2, 7, 16, 8, 3, 1, reverse=(0, 1), linear_before_reset=1),
         _cell("nn.gru_cell", 3, 1, 2, 9, 16, 16, 3, 1, reverse=(1,), linear_before_reset=0),
         _cell("nn.rnn_cell", 6, 1, 2, 9, 16, 16, 1, 1, reverse=(0,)),
         ("nn.recurrent_output", [((4, 2, 2, 3, 16), F)], {"reverse": (0, 1), "hidden": 7}),
         ("nn.recurrent_output", [((5, 1, 1, 2, 16), F)], {"reverse": (1,), "hidden": 16, "batch_major": 1})]


@pytest.mark.parametrize("op,specs,attrs", CELLS, ids=lambda v: str(v))
def test_recurrent_cell(op, specs, attrs):
    check_typed(op, specs, attrs)


@pytest.mark.parametrize("op,specs,attrs", CELLS[:6], ids=lambda v: str(v))
def test_recurrent_scan_is_its_task_stepped(op, specs, attrs):
    """nn.recurrent_scan's reference against its kernel's compute (compiler/task.py scan_step: the cell) run once
    per step on the state before, as the generic module runs it, over a length that is a size variable."""
    from compiler.task import build_task, scan_step
    from relayish import Function
    xp, _, state, *rest = _typed_inputs(specs, 3)
    length = xp.shape[0] // state.shape[3]
    t = te.size_var("T")
    types = [TensorType((t * state.shape[3], xp.shape[1]), F)] + [TensorType(a.shape, F) for a in [state, *rest]]
    params = [Var(f"x{k}", ty) for k, ty in enumerate(types)]
    scan = call("nn.recurrent_scan", *params, cell=op, **attrs)
    assert scan.type.shape == (t,) + state.shape[1:]
    history = evaluate_one(call("nn.recurrent_scan", *[Var(f"x{k}", TensorType(a.shape, F)) for k, a in
                                                      enumerate([xp, state, *rest])], cell=op, **attrs),
                           [xp, state, *rest])
    task = build_task(scan_step(Function(params, scan, {"Primitive": 1})))
    static = te.bind_sizes(task.outputs + task.inputs, {t: length})
    inputs, (out,) = [static[id(p)] for p in task.inputs], [static[id(o)] for o in task.outputs]
    for s in range(length):
        times = np.array([s, length - 1 - s], np.int32)
        state, = evaluate_te(out, dict(zip(inputs, [xp, times, state, *rest])))
        np.testing.assert_allclose(history[s:s + 1], state, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,shapes,attrs,message", [
    ("nn.recurrent_scan", [(7, 64), (1, 1, 2, 2, 16), (1, 1, 5, 4, 16)], {"cell": "nn.lstm_cell"},
     r"xp must be \[steps \* 2, 64\]"),
    ("nn.recurrent_scan", [(8, 64), (1, 1, 2, 2, 16), (1, 1, 5, 4, 16)], {"cell": "nn.gru_cell"},
     r"nn.recurrent_scan of nn.gru_cell: expected xp, state, weight, bias, got 3 inputs"),
    ("nn.recurrent_scan", [(8, 64), (1, 1, 2, 2, 16), (1, 1, 5, 4, 16)], {"cell": "nn.dense"},
     r"cell must be one of \['nn.gru_cell', 'nn.lstm_cell', 'nn.rnn_cell'\], got 'nn.dense'"),
    ("nn.lstm_cell", [(8, 64), (2,), (1, 1, 1, 2, 16), (1, 1, 5, 4, 16)], {}, r"state must be \[1, directions, 2"),
    ("nn.lstm_cell", [(8, 64), (2,), (1, 1, 2, 2, 16), (1, 1, 5, 3, 16)], {}, r"weight must be \[1, hidden/nb"),
    ("nn.lstm_cell", [(7, 64), (2,), (1, 1, 2, 2, 16), (1, 1, 5, 4, 16)], {}, r"xp must be \[steps \* 2, 64\]"),
    ("nn.lstm_cell", [(8, 64), (2,), (1, 1, 2, 2, 16), (1, 1, 5, 4, 16)], {"quantize_state": 1},
     r"expected xp, steps, state, weight, scales \(quantize_state\), got 4 inputs"),
    ("nn.lstm_cell", [(8, 64), (2,), (1, 1, 2, 2, 16), (1, 1, 5, 4, 16), (1, 16)], {"quantize_state": 1},
     r"the recurrent weight's scales must be \[1, 64\], got \(1, 16\)"),
    ("nn.rnn_cell", [(8, 32), (2,), (1, 2, 1, 2, 16), (2, 1, 5, 1, 16)], {"reverse": (1, 0)},
     r"reverse must be \(0,\), \(1,\) or \(0, 1\)"),
    ("nn.recurrent_output", [(4, 1, 1, 2, 16)], {"hidden": 17}, r"hidden=17 must be in \[1, 16\]"),
])
def test_recurrent_cell_bad_inputs(op, shapes, attrs, message):
    types = [TensorType(s, "int32" if k == 1 and op not in ("nn.recurrent_output", "nn.recurrent_scan") else F)
             for k, s in enumerate(shapes)]
    with pytest.raises(OpError, match=message):
        call(op, *[Var(f"x{k}", t) for k, t in enumerate(types)], **attrs)

# ---------------------------------------------------------------------------------------------- integer products
# relayish/ops/qnn.py: raw 8-bit products in int32, operands over their whole range (the compiled kernels, VNNI and
# fallback: tests/test_qnn.py).

U8, S8, I32 = "uint8", "int8", "int32"


def _q8_inputs(specs, seed):
    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype in specs:
        info = np.iinfo(dtype)
        out.append(rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype))
    return out


def check_q8(op, specs, attrs, seed=0):
    """Reference vs compute (exact) vs declared type, on 8-bit operands over their whole range."""
    params = [Var(f"x{k}", TensorType(s, d)) for k, (s, d) in enumerate(specs)]
    node = call(op, *params, **attrs)
    arrays = _q8_inputs(specs, seed)
    ref = evaluate_one(node, arrays)
    placeholders = [te.placeholder(s, d, name=f"x{k}") for k, (s, d) in enumerate(specs)]
    got, = evaluate_te(get_op(op).compute(placeholders, node.attrs, node.type), dict(zip(placeholders, arrays)))
    assert got.shape == ref.shape == node.type.shape and got.dtype == ref.dtype == np.dtype(node.type.dtype)
    np.testing.assert_array_equal(got, ref)
    return ref, arrays


QNN = [
    ("qnn.conv2d", [((1, 5, 7, 6), U8), ((4, 5, 3, 3), S8), ((), U8)], {"padding": (1, 0, 2, 1), "strides": (2, 1)}),
    ("qnn.conv2d", [((2, 6, 5, 5), S8), ((6, 2, 2, 3), U8), ((), S8)], {"groups": 3, "dilation": (2, 1),
                                                                       "padding": (1, 1, 1, 1)}),
    ("qnn.matmul", [((2, 3, 9), U8), ((9, 5), S8)], {}), ("qnn.matmul", [((3, 7), S8), ((2, 7, 4), U8)], {}),
    ("qnn.conv2d_nchwc", [((1, 2, 5, 6, 4), U8), ((3, 2, 3, 2, 1, 8), I32), ((), U8)],
     {"padding": (1, 1, 0, 1), "strides": (1, 2)}),
    ("qnn.conv2d_nchwc", [((1, 4, 4, 5, 8), U8), ((4, 2, 1, 1, 2, 4), I32), ((), U8)], {"groups": 2}),
    ("qnn.conv2d_nchwc", [((1, 2, 5, 4, 4), S8), ((2, 2, 3, 3, 1, 4), I32), ((), S8)], {"padding": (1, 1, 1, 1)}),
    ("qnn.matmul_pack", [((4, 7), S8), ((1, 2, 8), I32)], {"units": 5}),
    ("qnn.matmul_pack", [((2, 3, 9), U8), ((3, 3, 8), I32)], {"units": 21}),
    ("qnn.matmul_pack", [((5, 8), U8), ((2, 2, 16), I32)], {}),
    ("qnn.conv2d_rows", [((1, 7, 35), U8), ((2, 1, 3, 1, 2, 8), I32)], {"strides": (2, 2), "channels": 3, "width": 4}),
    ("qnn.conv2d_rows", [((2, 6, 20), S8), ((1, 1, 2, 1, 1, 16), I32)], {"dilation": 2, "channels": 1, "width": 17}),
    ("qnn.depthwise_conv2d_nchwc", [((1, 2, 6, 5, 4), U8), ((2, 1, 3, 3, 4), S8), ((), U8)],
     {"padding": (1, 1, 2, 0), "strides": (1, 2)}),
    ("qnn.depthwise_conv2d_nchwc", [((2, 1, 7, 6, 8), S8), ((1, 1, 3, 2, 8), S8), ((), S8)],
     {"padding": (2, 1, 2, 1), "dilation": (2, 1)}),
    # the max pool of quantized data (a static model's QDQ MaxPool, frontends/onnx/qdq.py): padded taps the least
    ("nn.max_pool2d", [((1, 3, 7, 6), U8)], {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}),
    ("nn.max_pool2d", [((1, 2, 5, 5, 4), S8)], {"pool_size": (2, 3), "padding": (1, 0, 0, 1), "layout": "NCHW4c",
                                                "ceil_mode": True}),
]


@pytest.mark.parametrize("op,specs,attrs", QNN, ids=lambda v: str(v))
def test_integer_products(op, specs, attrs):
    check_q8(op, specs, attrs)


def test_packed_integer_products_are_the_generic_ones():
    """qnn.conv2d_nchwc / qnn.matmul_pack of packed weights (and blocked data) equal qnn.conv2d / qnn.matmul of
    the plain ones: the packing and the blocked references agree with the generic references."""
    from relayish.ops.qnn import pack_conv_weight, pack_matmul_weight
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (1, 8, 6, 7)).astype(np.uint8)
    w = rng.integers(-128, 128, (12, 4, 3, 3)).astype(np.int8)
    pad = np.uint8(77)
    attrs = {"padding": (1, 2, 0, 1), "strides": (1, 2), "groups": 2}
    plain = evaluate_one(call("qnn.conv2d", Var("x", TensorType(x.shape, U8)), Var("w", TensorType(w.shape, S8)),
                              Var("p", TensorType((), U8)), **attrs), [x, w, pad])
    xb = np.ascontiguousarray(x.reshape(1, 2, 4, 6, 7).transpose(0, 1, 3, 4, 2))
    words = pack_conv_weight(w, 4, 6)
    blocked = evaluate_one(call("qnn.conv2d_nchwc", Var("x", TensorType(xb.shape, U8)),
                                Var("w", TensorType(words.shape, I32)), Var("p", TensorType((), U8)), **attrs),
                           [xb, words, pad])
    np.testing.assert_array_equal(blocked.transpose(0, 1, 4, 2, 3).reshape(plain.shape), plain)
    a = rng.integers(0, 256, (2, 3, 10)).astype(np.uint8)
    b = rng.integers(-128, 128, (10, 13)).astype(np.int8)
    words = pack_matmul_weight(b, 8)
    assert words.shape == (2, 3, 8)
    packed = evaluate_one(call("qnn.matmul_pack", Var("a", TensorType(a.shape, U8)),
                               Var("w", TensorType(words.shape, I32)), units=13), [a, words])
    np.testing.assert_array_equal(packed, a.astype(np.int64) @ b.astype(np.int64))


def test_row_products_are_the_generic_convolution():
    """qnn.conv2d_rows over the NHWC rows (padded with the pad value, past the right edge as far as the last word
    reads) with the kernel rows' columns x channels packed as bytes equals qnn.conv2d of the plain weight."""
    from relayish.ops.qnn import pack_conv_weight
    rng = np.random.default_rng(6)
    x = rng.integers(0, 256, (1, 3, 9, 11)).astype(np.uint8)
    w = rng.integers(-128, 128, (8, 3, 3, 5)).astype(np.int8)
    pad, (pt, pl, pb, pr), (sh, sw) = np.uint8(77), (1, 2, 0, 1), (2, 2)
    plain = evaluate_one(call("qnn.conv2d", Var("x", TensorType(x.shape, U8)), Var("w", TensorType(w.shape, S8)),
                              Var("p", TensorType((), U8)), padding=(pt, pl, pb, pr), strides=(sh, sw)), [x, w, pad])
    ow, words = plain.shape[3], 4  # 5 columns x 3 channels = 15 bytes: 4 words
    right = pr + 2  # the last column's last word reads (ow - 1) * 2 * 3 + 16 bytes
    rows = np.pad(x.transpose(0, 2, 3, 1), ((0, 0), (pt, pb), (pl, right), (0, 0)), constant_values=77)
    rows = rows.reshape(1, rows.shape[1], -1)
    assert rows.shape[2] >= (ow - 1) * sw * 3 + 4 * words
    weight = np.pad(w.transpose(0, 3, 1, 2).reshape(8, 15, 3), ((0, 0), (0, 1), (0, 0)))[:, :, :, None]
    packed = pack_conv_weight(weight, 16, 8)
    got = evaluate_one(call("qnn.conv2d_rows", Var("x", TensorType(rows.shape, U8)),
                            Var("w", TensorType(packed.shape, I32)), strides=(sh, sw), channels=3, width=ow),
                       [rows, packed])
    np.testing.assert_array_equal(got.transpose(0, 1, 4, 2, 3).reshape(plain.shape), plain)


@pytest.mark.parametrize("op,specs,attrs,message", [
    ("qnn.conv2d_rows", [((1, 7, 20), U8), ((2, 1, 3, 1, 2, 8), I32)], {"strides": (2, 2), "channels": 3, "width": 4},
     r"rows of 20 bytes are too short for 4 columns of stride 2 x 3 channels and 2 words"),
    ("qnn.conv2d_rows", [((1, 7, 40), U8), ((2, 1, 3, 2, 2, 8), I32)], {"channels": 3, "width": 4},
     r"must be \[O/ob, 1, KH, 1, words, ob\]"),
    ("qnn.conv2d", [((1, 4, 5, 5), "float32"), ((2, 4, 1, 1), S8), ((), U8)], {}, r"data must be uint8 or int8"),
    ("qnn.conv2d", [((1, 4, 5, 5), U8), ((2, 4, 1, 1), S8), ((1,), U8)], {}, r"padding value must be a 0-d uint8"),
    ("qnn.conv2d_nchwc", [((1, 1, 5, 5, 6), U8), ((1, 1, 1, 1, 2, 8), I32), ((), U8)], {},
     r"data block must be 4 x the weight's words"),
    ("qnn.matmul_pack", [((3, 9), U8), ((1, 2, 8), I32)], {}, r"the weight needs 3 words per column, it has 2"),
    ("qnn.depthwise_conv2d_nchwc", [((1, 2, 5, 5, 4), U8), ((2, 1, 3, 3, 8), S8), ((), U8)], {},
     r"qnn.depthwise_conv2d_nchwc: weight \(2, 1, 3, 3, 8\) is not \[C/b, 1, KH, KW, b\]"),
    ("qnn.depthwise_conv2d_nchwc", [((1, 2, 5, 5, 4), U8), ((2, 1, 3, 3, 4), I32), ((), U8)], {},
     r"weight must be int8, got int32"),
    ("qnn.matmul_pack", [((3, 8), "float32"), ((1, 2, 8), I32)], {}, r"data must be uint8 or int8, got float32"),
])
def test_integer_products_bad_inputs(op, specs, attrs, message):
    with pytest.raises(OpError, match=message):
        call(op, *[Var(f"x{k}", TensorType(s, d)) for k, (s, d) in enumerate(specs)], **attrs)


# ---------------------------------------------------------------------------------------------- nonzero


@pytest.mark.parametrize("dtype,shape", [("float32", (3, 5)), ("int64", (7,)), ("bool", (2, 3, 4)), ("float32", ())])
def test_nonzero_hand_written_kernel_gives_its_reference(tmp_path, dtype, shape):
    """"nonzero"'s kernel (compiler/sequential.py: one pass in order, a counter) against its reference, with NaN
    counted nonzero, no nonzero element, and all: the columns past the count untouched."""
    from codegen_kernels import Lib
    from compiler.codegen import build_library
    from compiler.sequential import sequential_kernel
    from relayish.expr import Function
    n = te.size_var("n")
    x, count = Var("x", TensorType(shape, dtype)), Var("count", TensorType((), "int64"))
    func = sequential_kernel(Function((x, count), call("nonzero", x, count, count_dim=n)), "nonzero_k")
    lib = Lib(build_library([func], None, str(tmp_path / "nonzero.so")))
    rng = np.random.default_rng(5)
    cases = [rng.integers(-1, 2, shape), np.zeros(shape), np.ones(shape)]
    if dtype == "float32":
        cases.append(np.where(rng.random(shape) < 0.3, np.nan, 0.0))
    for value in cases:
        value = np.asarray(value).astype(dtype)
        want = get_op("nonzero").ref(value, np.int64(np.count_nonzero(value)), n)
        out = np.full((want.shape[0], want.shape[1] + 2), -7, np.int64)  # two sentinel columns past the count
        sizes = np.array([want.shape[1]], np.int32)
        got = lib.call("nonzero_k", value.reshape(shape or (1,)), np.int64(want.shape[1]), out, sizes)[2]
        np.testing.assert_array_equal(got.reshape(-1)[:want.size].reshape(want.shape), want)
        assert (got.reshape(-1)[want.size:] == -7).all()


def test_nonzero_types():
    n = te.size_var("n")
    y = call("nonzero", Var("x", TensorType((2, 3), "float32")), Var("c", TensorType((), "int64")), count_dim=n)
    assert y.type.shape == (2, n) and y.type.dtype == "int64"
    with pytest.raises(OpError, match="the count must be an int64 scalar"):
        call("nonzero", Var("x", TensorType((2, 3))), Var("c", TensorType((1,), "int64")), count_dim=n)
    with pytest.raises(OpError, match="count_dim must be a size variable"):
        call("nonzero", Var("x", TensorType((2, 3))), Var("c", TensorType((), "int64")), count_dim=4)


@pytest.mark.parametrize("shape,axis,count,start", [((3, 7, 2), 1, 4, 0), ((5,), 0, 0, 0), ((2, 6), 1, 6, 0),
                                                     ((4, 3), 0, 1, 0), ((3, 7, 2), 1, 3, 4), ((6,), 0, 0, 6)])
def test_slice_to_count_hand_written_kernel_gives_its_reference(tmp_path, shape, axis, count, start):
    from codegen_kernels import Lib
    from compiler.codegen import build_library
    from compiler.sequential import sequential_kernel
    from relayish.expr import Function
    k_dim = te.size_var("k")
    x, k = Var("x", TensorType(shape, "float32")), Var("k", TensorType((1,), "int64"))
    func = sequential_kernel(Function((x, k), call("slice_to_count", x, k, axis=axis, start=start,
                                                                  count_dim=k_dim)), "first_k")
    lib = Lib(build_library([func], None, str(tmp_path / "first_k.so")))
    value = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    want = get_op("slice_to_count").ref(value, np.array([count]), axis, k_dim, start)
    out = np.full(want.size + 3, np.nan, np.float32)  # three sentinels past the end
    got = lib.call("first_k", value, np.array([count], np.int64), out, np.array([count], np.int32))[2]
    np.testing.assert_array_equal(got[:want.size].reshape(want.shape), want)
    assert np.isnan(got[want.size:]).all()
    with pytest.raises(OpError, match="count_dim must be a size variable"):
        call("slice_to_count", x, k, axis=axis, count_dim=3)


# ---------------------------------------------------------------------------------------------- non-max suppression

def _nms_case(rng, batches, classes, n, center):
    """Boxes in clusters (so that many overlap), some with both corners swapped, scores with ties."""
    centers = rng.uniform(0, 10, (batches, 3, 2))[:, rng.integers(0, 3, n)]
    size = rng.uniform(0.5, 3, (batches, n, 2))
    if center:
        boxes = np.concatenate([centers, size], axis=2)
    else:
        lo, hi = centers - size / 2, centers + size / 2
        boxes = np.stack([lo[..., 1], lo[..., 0], hi[..., 1], hi[..., 0]], axis=2)
        swap = rng.random((batches, n)) < 0.3
        boxes[swap] = boxes[swap][:, [2, 3, 0, 1]]
    scores = rng.integers(0, 8, (batches, classes, n)) / 8  # ties
    return boxes.astype(np.float32), scores.astype(np.float32)


@pytest.mark.parametrize("center,max_output,iou,floor", [(0, 3, 0.5, float("-inf")), (1, 100, 0.3, 0.25),
                                                         (0, 0, 0.5, 0.0), (0, 100, 0.0, 0.5), (1, 2, 1.0, 0.1)])
def test_non_max_suppression_hand_written_kernel_gives_onnx_reference(tmp_path, center, max_output, iou, floor):
    """"non_max_suppression"'s kernel (compiler/sequential.py: a greedy selection over a scratch list) against
    its reference and onnx's reference implementation, both corner orders and the center form, score ties, no
    score threshold, max_output 0, an IoU threshold of 0 and 1: a row that counts the kept, then them in order."""
    from codegen_kernels import Lib
    from compiler.codegen import build_library
    from compiler.sequential import sequential_kernel
    from relayish.expr import Function
    batches, classes, n = 2, 3, 40
    boxes_v, scores_v = Var("boxes", TensorType((batches, n, 4))), Var("scores", TensorType((batches, classes, n)))
    attrs = dict(max_output=max_output, iou_threshold=iou, score_threshold=floor, center_point_box=center)
    func = sequential_kernel(Function((boxes_v, scores_v), call("non_max_suppression", boxes_v, scores_v, **attrs)),
                             "nms_k")
    lib = Lib(build_library([func], None, str(tmp_path / "nms.so")))
    boxes, scores = _nms_case(np.random.default_rng(center + max_output), batches, classes, n, center)
    want = get_op("non_max_suppression").ref(boxes, scores, **attrs)
    kept = int(want[0, 0])
    got = lib.call("nms_k", boxes, scores, np.full((1 + batches * classes * n, 3), -7, np.int64),
                   np.zeros(n, np.int32), np.zeros((n, 5), np.float32))[2]
    np.testing.assert_array_equal(got[:1 + kept], want[:1 + kept])
    assert (got[1 + kept:] == -7).all()  # rows past the kept ones are not written
    thresholds = [np.array([max_output], np.int64), np.array([iou], np.float32)] + \
        ([np.array([floor], np.float32)] if floor != float("-inf") else [])
    onnx_says = _run_onnx_reference("NonMaxSuppression", boxes, scores, *thresholds, center_point_box=center)
    np.testing.assert_array_equal(want[1:1 + kept], onnx_says)
    assert (kept > 0) == (max_output > 0)


def _run_onnx_reference(op_type: str, *inputs, **attrs):
    """op_type's (first) output on these inputs by onnx's reference evaluator."""
    return _run_onnx_reference_outputs(op_type, *inputs, **attrs)[0]


# ---------------------------------------------------------------------------------------------- unique

@pytest.mark.parametrize("sorted_", [1, 0])
@pytest.mark.parametrize("dtype,draw", [("float32", "repeats"), ("float32", "nan_and_zeros"), ("int64", "repeats"),
                                        ("int32", "distinct"), ("float32", "one")])
def test_unique_positions_hand_written_kernel_gives_onnx_reference(tmp_path, sorted_, dtype, draw):
    """"unique_positions"'s kernel (compiler/sequential.py) against its reference, and both against onnx's
    reference Unique: repeats, NaNs (one distinct value, last when sorted) with -0.0 and 0.0 (equal), all
    distinct, a single element."""
    from codegen_kernels import Lib
    from compiler.codegen import build_library
    from compiler.sequential import sequential_kernel
    from relayish.expr import Function
    rng = np.random.default_rng(len(draw) + sorted_)
    value = {"repeats": rng.integers(-4, 5, 40), "distinct": rng.permutation(30) - 7, "one": np.array([2.5]),
             "nan_and_zeros": rng.choice([np.nan, -0.0, 0.0, 1.5, -2.0], 25)}[draw].astype(dtype)
    n = value.size
    x = Var("x", TensorType((n,), dtype))
    func = sequential_kernel(Function((x,), call("unique_positions", x, sorted=sorted_)), "unique_k")
    lib = Lib(build_library([func], None, str(tmp_path / "unique.so")))
    want = get_op("unique_positions").ref(value, sorted_)
    u = int(want[0, 0])
    got = lib.call("unique_k", value, np.full((3, n + 1), -7, np.int64), np.zeros(n, dtype), np.zeros(n, np.int32),
                   np.zeros((2, n), np.int64))[1]
    for row, cols in ((0, slice(0, 1 + u)), (1, slice(0, n)), (2, slice(1, 1 + u))):
        np.testing.assert_array_equal(got[row, cols], want[row, cols], err_msg=f"row {row}")
    y, first, inverse, counts = _run_onnx_reference_outputs("Unique", value, n_out=4, sorted=sorted_)
    np.testing.assert_array_equal(want[0, 1:1 + u], first)
    np.testing.assert_array_equal(want[1, :n], inverse)
    np.testing.assert_array_equal(want[2, 1:1 + u], counts)
    np.testing.assert_array_equal(value[want[0, 1:1 + u]], y)  # (NaN where NaN)


def _run_onnx_reference_outputs(op_type: str, *inputs, n_out: int = 1, **attrs) -> list:
    """op_type's outputs on these inputs by onnx's reference evaluator."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    names, outs = [f"i{k}" for k in range(len(inputs))], [f"y{k}" for k in range(n_out)]
    graph = helper.make_graph([helper.make_node(op_type, names, outs, **attrs)], "g",
                              [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                               for n, v in zip(names, inputs)],
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs])
    return ReferenceEvaluator(helper.make_model(graph)).run(None, dict(zip(names, inputs)))
