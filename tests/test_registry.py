"""Everything the compiler and the tuner know about an op comes from its registry entry (relayish/op.py)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from relayish import Constant, Function, TensorType, Var, call, get_op, list_ops
from relayish.op import OP_CLASSES, StageTag, op_table, register_op, stage_tag, stage_tag_traits
from relayish.ops import layout, nn, winograd
from relayish.ops.common import PAD_TAG


def test_op_table_lists_every_op_once():
    rows = op_table().splitlines()[2:]
    assert sorted(r.split(" | ")[0].lstrip("| ") for r in rows) == list_ops()


def test_op_table_row():
    row = next(r for r in op_table().splitlines() if r.startswith("| nn.max_pool2d |"))
    assert row.startswith("| nn.max_pool2d | pool | OUT_ELEMWISE_FUSABLE | 1 | pool_size (required), strides=(1, 1),")
    assert "layout='NCHW'" in row and "| yes |" in row


def test_ops_docstring_points_to_the_generated_table():
    import relayish.ops
    assert "op_table()" in relayish.ops.__doc__ and "| nn.relu" not in relayish.ops.__doc__


def test_every_op_declares_a_class():
    assert all(get_op(op).op_class in OP_CLASSES for op in list_ops())


def test_registration_checks_class_and_layout():
    with pytest.raises(ValueError, match="op_class 'fancy' is not one of"):
        register_op("test.bad_class", inputs=1, pattern=None, op_class="fancy", infer=None, ref=None)
    with pytest.raises(ValueError, match="blocked_layout needs a 'layout' attribute"):
        register_op("test.bad_layout", inputs=1, pattern=None, op_class="pool", infer=None, ref=None,
                    blocked_layout=True)
    assert "test.bad_class" not in list_ops() and "test.bad_layout" not in list_ops()


def test_blocked_layout_ops_are_the_pools_and_the_shuffle():
    assert {op for op in list_ops() if get_op(op).blocked_layout} == \
        {"nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.channel_shuffle"}


def test_stage_tags():
    assert stage_tag_traits(PAD_TAG).is_padding
    assert stage_tag_traits(nn.CONV2D_TAG).buffered_padding
    assert stage_tag_traits(layout.CONV2D_NCHWC_TAG).buffered_padding
    assert stage_tag_traits(winograd.DATA_TAG) == StageTag("winograd_data", keeps_buffer=True, buffered_padding=True)
    assert stage_tag_traits(winograd.INVERSE_TAG).keeps_buffer
    assert stage_tag_traits("pool") == StageTag("pool")  # undeclared: no traits
    assert stage_tag("pad", is_padding=True) == "pad"  # the same declaration again is harmless
    with pytest.raises(ValueError, match="declared twice with different traits"):
        stage_tag("pad", keeps_buffer=True)


@pytest.mark.parametrize("op,attrs,wants_buffer", [
    ("nn.conv2d", dict(padding=(1, 1, 1, 1)), True),  # padding read KH*KW*O times: its own buffer
    ("nn.max_pool2d", dict(pool_size=(3, 3), padding=(1, 1, 1, 1)), False),  # read a few times: inlined
])
def test_keeps_buffer_follows_the_tags(op, attrs, wants_buffer):
    from compiler.default_schedule import keeps_buffer
    from compiler.task import build_task
    x = Var("x", TensorType((1, 4, 6, 6)))
    args = [x, Constant(np.ones((4, 4, 3, 3), np.float32))] if op == "nn.conv2d" else [x]
    params = [Var(f"p{k}", a.type) for k, a in enumerate(args)]
    state = build_task(Function(params, call(op, *params, **attrs))).initial_state()
    pad = next(s for s in state.stages if s.op.tag == PAD_TAG)
    assert keeps_buffer(state, pad) == wants_buffer


def test_tuning_groups_tasks_by_their_first_op_that_is_not_elementwise():
    from tuning.tune import _group
    assert _group(SimpleNamespace(ops=["sigmoid", "nn.leaky_relu", "nn.conv2d_nchwc", "add"])) == "nn.conv2d_nchwc"
    assert _group(SimpleNamespace(ops=["tanh", "exp", "reshape"])) == "reshape"
    assert _group(SimpleNamespace(ops=["add", "exp"])) == "add"
