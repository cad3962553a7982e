"""Registers every op. `relayish.op.op_table()` prints them as a markdown table (name, class, fusion pattern,
inputs, attributes and their defaults, description): the contract between the frontend, the passes and the
compiler, generated from the registry so that it never falls behind it.

Conventions: activations NCHW, conv weights OIHW. Every float op works on float32 (other dtypes may be accepted
where noted). `padding` is always 4 ints (top, left, bottom, right). Broadcasting is numpy's.
"""
from . import (activation, blocked, elemwise, layout, math, matmul_pack, nn, norm, reduce, tensor,  # noqa: F401
               transform, transformer, winograd)
from . import elemwise_tail  # noqa: F401  (trigonometry, isnan / isinf, bitwise ops)
from . import movement  # noqa: F401  (pad, gather/scatter elements and nd, one_hot)
from . import resize  # noqa: F401  (resize: nearest, linear, cubic interpolation)
from . import convnd  # noqa: F401  (3-D conv and pooling, NCDHW)
from . import recurrent  # noqa: F401  (LSTM, GRU and RNN cells: one time step per kernel)
from . import channel_pad  # noqa: F401  (per-group channel padding of blocked layouts)
from . import qnn  # noqa: F401  (integer products of quantized models: raw int8 sums in int32)
from . import data_sized  # noqa: F401  (nonzero: an output sized by its input's values)
