"""Which versions of each ONNX op's schema we have reviewed: a model is imported only through reviewed versions.

ONNX versions an op whenever its schema changes (`onnx.defs.get_schema(op, opset).since_version` is the version in
effect at an opset). Most new versions only add element types (bfloat16, float8, int4...), which the importer
refuses or folds anyway; some change meaning (new attributes, new inputs, new rules). REVIEWED lists, per supported
op, every schema version in effect at the opsets we import (MIN_OPSET..MAX_OPSET of frontends/onnx/importer.py)
that someone has read against its converter: the comment beside it says what changed and how the converter handles
it (a new attribute or input the converter does not take is refused by the importer with the node's name and the
attribute).

tests/test_frontend_versions.py fails when onnx's registry has a version of a supported op that is not listed (a
newer onnx, or a newly supported op): review it, then add it. The importer refuses a node whose op has an entry
here but whose version in effect at the model's opset is not listed (`unreviewed`).
"""
from __future__ import annotations

from onnx import defs

# op -> reviewed since_versions. "types" = the version only adds element types.
REVIEWED: dict[str, tuple[int, ...]] = {
    "Add": (7, 13, 14),  # 7: numpy broadcasting (no axis/broadcast attrs); 13, 14: types
    "Sub": (7, 13, 14),  # as Add
    "Mul": (7, 13, 14),  # as Add
    "Div": (7, 13, 14),  # as Add; integer division truncates toward zero (relayish divide)
    "AveragePool": (7, 10, 11, 19, 22),  # 7: count_include_pad; 10: ceil_mode; 11: doc (dilated output size,
    #   auto_pad with ceil); 19: dilations; 22: types + "windows starting in the right padding are dropped"
    #   (relayish.ops.nn.pool_out_size already does)
    "MaxPool": (1, 8, 10, 11, 12, 22),  # 8: storage_order + Indices output (handled, conf-convnd); 10: ceil_mode,
    #   dilations; 11: doc; 12: int8/uint8; 22: as AveragePool-22
    "GlobalAveragePool": (1, 22),  # 22: types
    "GlobalMaxPool": (1, 22),  # 22: types
    "BatchNormalization": (7, 9, 14, 15),  # 9: no spatial attr; 14: training_mode (batch statistics, running
    #   mean and var as outputs 1, 2: frontends/onnx/ops/training.py); 15: separate scale/mean types
    "Cast": (6, 9, 13, 19, 21, 23, 24, 25, 28),  # 19: saturate (float8 only); 24: round_mode (float8e8m0 only,
    #   refused: the converter does not take it); 9-28 otherwise types
    "CastLike": (15, 19, 21, 23, 24, 25),  # as Cast (19: saturate; others types); round_mode of 24+ refused
    "Clip": (6, 11, 12, 13),  # 11: min/max become inputs (clip_v11); 12, 13: types
    "Concat": (4, 11, 13),  # 11: negative axis (handled); 13: types
    "Constant": (1, 9, 11, 12, 13, 19, 21, 23, 24, 25),  # 11: sparse_value (refused); 12: value_float(s)/
    #   int(s)/string(s) (numeric handled, strings refused); others types
    "ConstantOfShape": (9, 20, 21, 23, 24, 25),  # types
    "Conv": (1, 11, 22),  # 11: doc only; 22: types
    "Dropout": (7, 10, 12, 13, 22),  # 7, 10: inference only (mask refused); 12: ratio/training_mode inputs, seed
    #   (training with a seed: the reference's mask, drawn at import; without a seed refused); 13, 22: types
    "Exp": (6, 13),  # types
    "Flatten": (1, 9, 11, 13, 21, 23, 24, 25),  # 11: negative axis (handled); others types
    "Gather": (1, 11, 13),  # 11: negative indices (np.take); 13: types
    "Gemm": (7, 9, 11, 13),  # 7: no broadcast attr; 11: C optional (handled); 9, 13: types
    "HardSigmoid": (6, 22),  # 22: types
    "Identity": (1, 13, 14, 16, 19, 21, 23, 24, 25),  # 14, 16: sequence/optional (refused as non-tensors);
    #   others types
    "LRN": (1, 13),  # 13: types
    "LeakyRelu": (6, 16),  # 16: types
    "MatMul": (1, 9, 13),  # types
    "Max": (6, 8, 12, 13),  # 8: broadcasting (handled); 12, 13: types
    "Min": (6, 8, 12, 13),  # as Max
    "Mean": (6, 8, 13),  # as Max
    "Sum": (6, 8, 13),  # as Max
    "Neg": (6, 13),  # types
    "Relu": (6, 13, 14),  # types
    "Reshape": (5, 13, 14, 19, 21, 23, 24, 25),  # 5: shape input; 14: allowzero (handled); others types
    "Shape": (1, 13, 15, 19, 21, 23, 24, 25),  # 15: start/end (handled, clamped as slicing); others types
    "Sigmoid": (6, 13),  # types
    "Size": (1, 13, 19, 21, 23, 24, 25),  # types (the count is static: folded)
    "Softmax": (1, 11, 13),  # 11: negative axis, same 2-D coercion (softmax_v1); 13: axis alone (softmax_v13)
    "Sqrt": (6, 13),  # types
    "Squeeze": (1, 11, 13, 21, 23, 24, 25),  # 11: negative axes; 13: axes input (squeeze_v13); others types
    "Unsqueeze": (1, 11, 13, 21, 23, 24, 25),  # as Squeeze
    "Tanh": (6, 13),  # types
    "Transpose": (1, 13, 21, 23, 24, 25),  # types
    # the long tail of activations and rounding (frontends/onnx/ops/elementwise.py)
    "Floor": (6, 13), "Ceil": (6, 13), "Sign": (9, 13),  # types
    "Round": (11, 22),  # types
    "Elu": (6, 22), "Selu": (6, 22), "ThresholdedRelu": (10, 22),  # types
    "Celu": (12, 28),  # 28: types (bfloat16, float16, double)
    "Softplus": (1, 22), "Softsign": (1, 22), "HardSwish": (14, 22), "Mish": (18, 22),  # types
    "Sinh": (9, 22), "Cosh": (9, 22), "Asinh": (9, 22), "Acosh": (9, 22), "Atanh": (9, 22),  # types
    "Shrink": (9,),
    "PRelu": (7, 9, 16),  # 7: slope broadcasts to X (unidirectional); 9, 16: types
    # ---- tensor, math, reduction and transformer ops (frontends/onnx/ops/elementwise.py, movement.py, reduce.py...)
    "Abs": (6, 13),  # types
    "Log": (6, 13),  # types
    "Reciprocal": (6, 13),  # types
    "Erf": (9, 13),  # types
    "Not": (1,),
    "And": (7,),  # 7: numpy broadcasting (no axis/broadcast attrs)
    "Or": (7,),  # as And
    "Xor": (7,),  # as And
    "Equal": (7, 11, 13, 19),  # 7: broadcasting; 11, 13: types; 19: string (refused as a non-numeric tensor)
    "Greater": (7, 9, 13),  # 7: broadcasting; 9, 13: types
    "Less": (7, 9, 13),  # as Greater
    "GreaterOrEqual": (12, 16),  # 16: types
    "LessOrEqual": (12, 16),  # 16: types
    "Where": (9, 16),  # 16: types
    "Expand": (8, 13),  # 13: types
    "Pow": (7, 12, 13, 15),  # 7: broadcasting; 12: the exponent's type separate (mixed dtypes handled); 13, 15: types
    "Mod": (10, 13, 28),  # 13: types; 28: fmod=0 defined for floats (numpy.mod: the divisor's sign; mod_v28),
    #   refused on floats before 28 (the schema then requires fmod=1)
    "Range": (11, 27),  # 27: stash_type for float16/bfloat16 only (not taken: such a node is refused)
    "Trilu": (14,),
    "Slice": (1, 10, 11, 13),  # 1: attrs (slice_v1); 10: starts/ends/axes/steps inputs; 11: negative axes; 13: types
    "Split": (2, 11, 13, 18),  # 2: split attr; 11: negative axis; 13: split input; 18: num_outputs (all handled)
    "ReduceSum": (1, 11, 13),  # 11: negative axes; 13: axes input + noop_with_empty_axes (handled)
    "ReduceMean": (1, 11, 13, 18),  # 11: negative axes; 13: types; 18: axes input + noop_with_empty_axes (handled)
    "ReduceMax": (1, 11, 12, 13, 18, 20),  # as ReduceMean; 12: int8/uint8; 20: bool (False < True, as ours)
    "ReduceMin": (1, 11, 12, 13, 18, 20),  # as ReduceMax
    "LayerNormalization": (17,),  # Mean/InvStdDev outputs handled; stash_type: computed in float32 anyway
    "Gelu": (20,),  # approximate "none" / "tanh"
    # ---- transformer ops of recent opsets (frontends/onnx/ops/attention.py, issue 12 attention group)
    "Attention": (23, 24, 25),  # 24: nonpad_kv_seqlen input (key padding, per-batch causal offset); 25:
    #   left/right_window_size (sliding window), q/kv_num_heads refused for 4-D inputs
    "RMSNormalization": (23,),  # stash_type: any float type (computed in it, cast back)
    "RotaryEmbedding": (23,),  # 3-D (num_heads) or 4-D, interleaved, rotary_embedding_dim, position_ids
    "Swish": (24,),
    "SwiGLU": (28,),  # A and B of one shape (no broadcasting)
    "DeformConv": (19, 22),  # frontends/onnx/ops/sampling.py: 2-D only; 22: types (float32 only)
    "TfIdfVectorizer": (9,),  # frontends/onnx/ops/ml.py: integer pools only (string tensors refused)
    "TensorScatter": (24,),  # frontends/onnx/ops/caches.py: a gather of the update per cache position
    "LinearAttention": (27,),  # frontends/onnx/ops/caches.py: unrolled over the steps; chunk_size ignored (a hint)
    "CausalConvWithState": (27,),  # depthwise causal conv1d (as conv2d of height 1), activation none/silu/swish
    # ---- elementwise long tail (conf-elemwise): frontends/onnx/ops/elementwise.py, relayish/ops/elemwise_tail.py
    "Sin": (7, 22), "Cos": (7, 22), "Tan": (7, 22),  # 22: types (bfloat16)
    "Asin": (7, 22), "Acos": (7, 22), "Atan": (7, 22),  # 22: types (bfloat16)
    "IsNaN": (9, 13, 20),  # 13: bfloat16, float16; 20: float8 types (refused by the importer)
    "IsInf": (10, 20),  # 20: bfloat16, float16, float8 types (float8 refused by the importer)
    "BitShift": (11, 28),  # 28: signed types; a shift by an amount outside [0, bits) defined (0, or the sign fill
    #   of an arithmetic right shift): relayish bit_shift implements 28's rules, which agree with 11 on unsigned
    "BitwiseAnd": (18,), "BitwiseOr": (18,), "BitwiseXor": (18,), "BitwiseNot": (18,),
    "BitCast": (26,),  # same-width types only (the op's shape rule); float8/int4/complex/string targets refused
    # ---- reductions and scans (conf-reduce)
    "ReduceProd": (1, 11, 13, 18),  # as ReduceMean (a "prod" combiner)
    "ReduceL1": (1, 11, 13, 18),  # as ReduceMean (abs, then sum)
    "ReduceL2": (1, 11, 13, 18),  # as ReduceMean (square, sum, sqrt; integers through float64, truncated back)
    "ReduceSumSquare": (1, 11, 13, 18),  # as ReduceMean (square, then sum)
    "ReduceLogSum": (1, 11, 13, 18, 28),  # as ReduceMean (sum, then log); 28: integer types removed (ours are
    #   refused at every opset: the reference raises on them)
    "ReduceLogSumExp": (1, 11, 13, 18, 28),  # as ReduceLogSum (max-shifted: no overflow)
    "ArgMax": (1, 11, 12, 13),  # 11: negative axis; 12: select_last_index; 13: types (bfloat16)
    "ArgMin": (1, 11, 12, 13),  # as ArgMax
    "CumSum": (11, 14),  # axis input (a constant); 14: types (float16, bfloat16)
    "CumProd": (26,),
    "LogSoftmax": (1, 11, 13),  # as Softmax: 1, 11 coerce to 2-D (over_flattened_tail); 13: one axis
    "Hardmax": (1, 11, 13),  # as LogSoftmax (argmax == position, first maximum)
    # ---- data movement (conf-tensor)
    "Pad": (2, 11, 13, 18, 19, 21, 23, 24, 25),  # 2: pads/value attributes; 11: pads and constant_value inputs
    #   (constants), negative pads crop; 13: types; 18: axes input (constant); 19: wrap mode; 21-25: types
    "GatherElements": (11, 13),  # 13: types
    "GatherND": (11, 12, 13),  # 12: batch_dims; 13: types
    "ScatterElements": (11, 13, 16, 18),  # 13: types; 16: reduction add/mul; 18: reduction max/min
    "Scatter": (9, 11),  # deprecated ScatterElements without reduction; 11: negative indices
    "ScatterND": (11, 13, 16, 18),  # 13: types; 16: reduction add/mul; 18: reduction max/min
    "OneHot": (9, 11, 28),  # 11: negative indices and axis; 28: out-of-range indices give all-off rows (spelled
    #   out; relayish one_hot always did)
    "EyeLike": (9, 22),  # 22: types
    "DepthToSpace": (1, 11, 13, 28),  # 11: mode DCR/CRD; 13, 28: types
    "SpaceToDepth": (1, 13, 28),  # 13: types; 28: mode DCR/CRD (before: DCR's layout)
    "Tile": (6, 13),  # 13: types
    # ---- quantization and losses (conf-quant)
    "QuantizeLinear": (10, 13, 19, 21, 23, 24, 25, 28),  # 13: axis (per-axis scale); 19: scale may be float16/
    #   bfloat16, saturate (float8 only: refused); 21: int16/uint16 outputs, block_size, output_dtype; 23:
    #   precision (the division's type), scale type apart from x's; 24, 25, 28: float8e8m0/int2/float6 types
    #   (refused by name)
    "DequantizeLinear": (10, 13, 19, 21, 23, 24, 25, 28),  # 13: axis; 19: float16/bfloat16 scales; 21: int16/
    #   uint16 inputs, block_size; 23: output_dtype; 24, 25, 28: float8e8m0/int2/float6 types (refused by name)
    "DynamicQuantizeLinear": (11,),  # uint8 only
    "NegativeLogLikelihoodLoss": (12, 13, 22),  # 13: types; 22: bfloat16 (refused)
    "SoftmaxCrossEntropyLoss": (12, 13),  # 13: bfloat16 (refused); the optional log_prob output
    # ---- misc (conf-misc): frontends/onnx/ops/selection.py, linalg.py, control.py, movement.py, quantization.py
    "TopK": (1, 10, 11, 24),  # 10: k an input; 11: largest, sorted, negative axis; 24: types (bfloat16...)
    "Einsum": (12, 28),  # 28: bfloat16
    # If / Loop: 11: outputs may differ in shape per branch; 13: sequence types; 16: optional types; 19, 21, 23,
    # 24, 25: new element types (float8, int4, float4...). Only tensor values of relayish dtypes are imported.
    "If": (1, 11, 13, 16, 19, 21, 23, 24, 25),
    "Loop": (1, 11, 13, 16, 19, 21, 23, 24, 25),
    "NonZero": (9, 13),  # 13: bfloat16
    "NonMaxSuppression": (10, 11),  # 11: the same inputs and attribute; the doc says a box whose IoU equals the
    #   threshold is kept (suppressed only above it, as the converter's kernel and onnx's reference)
    "Compress": (9, 11, 28),  # 11: negative axis; 28: bfloat16
    "Unique": (11, 28),  # 28: bfloat16
    "ReverseSequence": (10, 28),  # 28: bfloat16
    "CenterCropPad": (18,),
    "Det": (11, 22),  # 22: bfloat16 (refused)
    "MatMulInteger": (10,),
    "QLinearMatMul": (10, 21),  # 21: float16/bfloat16 scales, float8 operands (refused)
    "ConvInteger": (10,),
    "QLinearConv": (10,),  # frontends/onnx/ops/contrib_quant.py (requantized as onnxruntime's kernel)
    # ---- signal and sampling (conf-signal)
    "HannWindow": (17,),
    "HammingWindow": (17,),
    "BlackmanWindow": (17,),
    "MelWeightMatrix": (17,),
    "DFT": (17, 20),  # 20: axis becomes an optional input (default -2), irfft (inverse + onesided) defined
    "STFT": (17,),
    "AffineGrid": (20,),
    "GridSample": (16, 20, 22),  # 20: modes renamed linear/cubic, N-D (5-D) inputs; 22: bfloat16/float16 types
    #   (float32 only here)
    "Col2Im": (18,),
    "RoiAlign": (10, 16, 22),  # 16: coordinate_transformation_mode (half_pixel default; before: output_half_pixel);
    #   22: bfloat16 types (float32 only here)
    # ---- resize (conf-resize): frontends/onnx/ops/resize.py, relayish/ops/resize.py
    "Resize": (10, 11, 13, 18, 19),  # 10: X, scales, mode nearest/linear (asymmetric); 11: roi, sizes,
    #   coordinate_transformation_mode, nearest_mode, cubic, exclude_outside, extrapolation_value; 13: scales and
    #   roi optional, tf_half_pixel_for_nn dropped, bfloat16; 18: antialias, axes, keep_aspect_ratio_policy;
    #   19: coordinate mode half_pixel_symmetric
    "Upsample": (7, 9, 10),  # 7: scales attribute; 9: scales input; 10: deprecated (for Resize), same as 9
    # ---- recurrent ops (conf-rnn): frontends/onnx/ops/rnn.py
    "RNN": (7, 14, 22),  # 7: no is_test/output_sequence attrs, broadcasting unchanged; 14: layout attribute;
    # 22: bfloat16 types (refused: float32/float64 only)
    "GRU": (7, 14, 22),  # 7: as RNN-7; 14: layout attribute; 22: bfloat16 types (refused)
    "LSTM": (7, 14, 22),  # 7: as RNN-7; 14: layout attribute; 22: bfloat16 types (refused)
    "Scan": (8, 9, 11, 16, 19, 21, 23, 24, 25),  # 8: batch axis, sequence_lens (only the full length); 9: no
    # batch axis, scan axes and directions per input and output; 11:
    # negative axes; 16: bfloat16; 19, 21, 23, 24, 25: more element types (float8, int4, float4, ...) only
    # ---- convolution and pooling of every rank, normalizations (conf-convnd)
    "ConvTranspose": (1, 11, 22),  # 11: doc (output_shape/auto_pad rules, as onnxruntime's); 22: types
    "LpPool": (2, 11, 18, 22),  # 2: p an int; 11: auto_pad/pads doc; 18: ceil_mode, dilations; 22: types
    "GlobalLpPool": (2, 22),  # 2: p an int; 22: types
    "LpNormalization": (1, 22),  # 22: types (a zero norm gives 0, as onnx's test)
    "InstanceNormalization": (6, 22),  # 6: consumed_inputs gone; 22: types
    "GroupNormalization": (18, 21),  # 18: deprecated (onnx's checker refuses it: no converter); 21: scale/bias per
    #   channel, stash_type (only 1)
    "MeanVarianceNormalization": (9, 13),  # 13: bfloat16 (refused: float32 only)
    "MaxUnpool": (9, 11, 22),  # 11: output_shape input doc (only the default shape accepted); 22: types
}


def schema_version(op_type: str, opset: int) -> int | None:
    """The since_version of op_type's default-domain schema in effect at opset, None if it has none there."""
    try:
        return defs.get_schema(op_type, opset, "").since_version
    except defs.SchemaError:
        return None


def registry_versions(op_type: str, first_opset: int, last_opset: int) -> tuple[int, ...]:
    """Every schema version of op_type in effect at some opset in [first_opset, last_opset], ascending."""
    found = {schema_version(op_type, v) for v in range(first_opset, last_opset + 1)}
    return tuple(sorted(v for v in found if v is not None))


def unreviewed(op_type: str, opset: int) -> str | None:
    """Why op_type cannot be imported at this opset through a reviewed schema, or None if it can (or has no
    review entry: the test of this table makes that a failure)."""
    reviewed = REVIEWED.get(op_type)
    if reviewed is None:
        return None
    version = schema_version(op_type, opset)
    if version is None:
        return f"{op_type} does not exist in ai.onnx opset {opset}"
    if version not in reviewed:
        older = f"; a model of opset {opset} imports only ops whose schema there is also in effect at opset 7 or " \
                f"later" if opset < 7 else ""
        return (f"schema {op_type}-{version} has not been reviewed (reviewed: {', '.join(map(str, reviewed))})"
                + older)
    return None
