"""The onnxruntime contrib-op schemas (domain com.microsoft) reviewed against their converters, as
frontends/onnx/versions/default.py does for the default domain.

onnxruntime versions its contrib domain as a whole: every com.microsoft schema of onnxruntime 1.17 to 1.32 is
version 1, and a model imports com.microsoft version 1 (onnxruntime refuses others). An op's meaning still changes
between releases (new optional inputs, attributes, mask formats), so each entry says what its converter takes; an
input or attribute it does not take is refused by the importer with the node's name (the converter's signature).
tests/test_contrib_versions.py fails when onnxruntime's schema of a supported op has a version not listed here,
or an input or attribute the converter does not know about.

onnxruntime also defines a few ops in the ai.onnx domain itself (ORT_ONNX_DOMAIN_OPS): its transformer optimizer
writes LayerNormalization into opset-11..16 models (ONNX has it from 17) and SimplifiedLayerNormalization (an RMS
norm ONNX never had). Their converters are registered under the pseudo-domain ORT_ONNX_DOMAIN and used where the
default domain has no converter at the model's opset.
"""
from __future__ import annotations

CONTRIB = "com.microsoft"
CONTRIB_OPSETS = (1,)  # the com.microsoft versions a model may import
ORT_ONNX_DOMAIN = "ai.onnx (onnxruntime)"  # our table's name for onnxruntime's own ai.onnx ops
# op -> the ai.onnx opset from which ONNX defines it (None: never); below it, onnxruntime's definition applies
ORT_ONNX_DOMAIN_OPS = {"LayerNormalization": 17, "SimplifiedLayerNormalization": None}

# op -> reviewed com.microsoft versions; the comment says what the converter takes and refuses
REVIEWED: dict[str, tuple[int, ...]] = {
    # ---- float transformer ops (frontends/onnx/ops/contrib.py)
    "Gelu": (1,),  # exact erf GELU
    "BiasGelu": (1,),  # gelu(A + B), B 1-D over the last axis
    "FastGelu": (1,),  # tanh GELU, optional 1-D bias
    "QuickGelu": (1,),  # x * sigmoid(alpha x), alpha 1.702
    "BiasSplitGelu": (1,),  # (X + bias) halves: left * gelu(right)
    "BiasAdd": (1,),  # X + bias + skip
    "BiasSoftmax": (1,),  # softmax(data + bias) from `axis` on; is_inner_broadcast
    "FusedMatMul": (1,),  # alpha, transA/B, transBatchA/B
    "TransposeMatMul": (1,),  # FusedMatMul without transBatch
    "SkipLayerNormalization": (1,),  # outputs output, mean, inv_std_var, input_skip_bias_sum
    "SkipSimplifiedLayerNormalization": (1,),  # as SkipLayerNormalization, RMS
    "EmbedLayerNormalization": (1,),  # position_ids input, mask_index (count of 1s), embedding_sum output
    "FusedConv": (1,),  # Conv + Z (sum) + activation Relu/Tanh/Sigmoid/LeakyRelu/Clip/HardSigmoid
    "FusedGemm": (1,),  # Gemm + the same activations
    # ---- attention (frontends/onnx/ops/contrib_attention.py)
    "Attention": (1,),  # masks: 1-D (B) / (2B), 2-D, 3-D; past/present, attention_bias, unidirectional, scale,
    #   mask_filter_value, qkv_hidden_sizes; refused: do_rotary, past_present_share_buffer, 4-D and (3B+2) masks
    "MultiHeadAttention": (1,),  # separate or packed QKV/KV, bias, key_padding_mask (B) / (B, T) / (B, S, T),
    #   attention_bias, past_key/value + present outputs; refused: cache_indirection, past_sequence_length, qk
    # ---- quantized ops (frontends/onnx/ops/contrib_quant.py, contrib_qmatmul.py)
    "QuantizeLinear": (1,),  # ONNX QuantizeLinear-13 semantics (axis), int8/uint8/int16/uint16
    "DequantizeLinear": (1,),  # ONNX DequantizeLinear-13 semantics (axis)
    "QLinearAdd": (1,),  # dequantize, add, requantize (round half to even, saturate)
    "QLinearMul": (1,),  # as QLinearAdd
    "QLinearSigmoid": (1,),
    "QLinearLeakyRelu": (1,),  # alpha
    "QLinearSoftmax": (1,),  # opset attribute: 13 one axis, below: the flattened tail
    "QLinearGlobalAveragePool": (1,),  # channels_last
    "QLinearAveragePool": (1,),  # 2-D windows (channels_last too); count_include_pad, ceil_mode
    "QLinearConcat": (1,),  # (Y_scale, Y_zero_point, then (X, scale, zero point) triples)
    "NhwcMaxPool": (1,),  # MaxPool of int8/uint8 NHWC (the graph optimizer's layout of QDQ MaxPool)
    "QLinearWhere": (1,),
    "QLinearConv": (1,),  # as ai.onnx QLinearConv; channels_last
    "QGemm": (1,),  # int32 C, float (no y_scale) or quantized output
    "DynamicQuantizeMatMul": (1,),  # A quantized to uint8 per tensor as DynamicQuantizeLinear
    "MatMulIntegerToFloat": (1,),
    "MatMulInteger16": (1,),
    "MatMulNBits": (1,),  # bits 2..8, block_size, packed or float zero points, bias; accuracy_level 0..3 (float);
    #   refused: g_idx, weight_prepacked
    "DynamicQuantizeLSTM": (1,),  # the weights dequantized; input and hidden state in float (see its docstring)
    "QAttention": (1,),  # the input and weights dequantized, then Attention
}


def unreviewed_contrib(op_type: str, version: int | None) -> str | None:
    """Why a com.microsoft op cannot be imported at this domain version, or None if it can."""
    if version is None:
        return f"the model imports no {CONTRIB} opset"
    if version not in CONTRIB_OPSETS:
        return f"{CONTRIB} opset {version} is not supported (supported: {', '.join(map(str, CONTRIB_OPSETS))})"
    reviewed = REVIEWED.get(op_type)
    if reviewed is not None and version not in reviewed:
        return f"schema {op_type}-{version} ({CONTRIB}) has not been reviewed"
    return None


def ort_onnx_domain_op(op_type: str, opset: int) -> bool:
    """op_type is one onnxruntime defines in ai.onnx at this opset, where ONNX does not (yet)."""
    if op_type not in ORT_ONNX_DOMAIN_OPS:
        return False
    since = ORT_ONNX_DOMAIN_OPS[op_type]
    return since is None or opset < since
