"""The fast form of a recurrent layer (rnn.py decides when it applies): one kernel per time step for every
direction at once, from the cells of relayish/ops/recurrent.py (its docstring gives the shapes):

    xp   = dense(x [T*B, I], W padded) + biases        the input projection of all steps: one matmul
    s_t  = <cell>(xp, steps_t, s_{t-1}, R packed)      t = 1..T, each the same task (steps_t is data)
    Y    = nn.recurrent_output(concatenate(s_1..s_T))  the concatenation written in place by the cells
    Y_h  = s_T's h (and Y_c its c), cropped

Hidden units are padded to a multiple of PACK_BLOCK: the weights and biases with zeros, so the padded units of the
state stay 0 and no real unit reads them; every state then starts at a 64-byte boundary of the history, which is what
lets the memory plan write each step's state straight into it.
"""
from __future__ import annotations

import numpy as np

from relayish import Constant, Expr, call
from relayish.types import is_static_dim

from ..builders import binary, fold, reshape, shape_of, transpose

PACK_BLOCK = 16  # columns of a packed weight block: a float32 vector of AVX-512, two of AVX2


def padded_units(hidden: int) -> int:
    return -(-hidden // PACK_BLOCK) * PACK_BLOCK


def pad_units(t: Expr, axis: int, hidden: int) -> Expr:
    """t with its axis `axis` (of `hidden` units) padded with zeros to padded_units(hidden)."""
    extra = padded_units(hidden) - hidden
    if not extra:
        return t
    ndim = len(shape_of(t))
    pads = [0] * (2 * ndim)
    pads[ndim + axis] = extra
    return fold("pad", t, pads=tuple(pads), mode="constant", value=0.0)


def _by_gate(t: Expr, dirs: int, gates: int, hidden: int, rest: tuple) -> Expr:
    """[D, G*H, *rest] -> [D, G, Hp, *rest], zero-padded units."""
    return pad_units(reshape(t, (dirs, gates, hidden) + rest), 2, hidden)


def projection(spec, w: Expr, bias: Expr, gates: int) -> Expr:
    """xp [T*B, D*G*Hp]: every step's x @ W^T + bias, the gates of each direction padded to Hp units."""
    seq, batch, inputs = shape_of(spec.x)
    dirs, hidden = spec.dirs, spec.hidden
    units = dirs * gates * padded_units(hidden)
    weight = reshape(_by_gate(w, dirs, gates, hidden, (inputs,)), (units, inputs))
    proj = fold("nn.dense", reshape(spec.x, (seq * batch, inputs)), weight)
    return binary("add", proj, reshape(_by_gate(bias, dirs, gates, hidden, ()), (1, units)))


def packed_weight(spec, r: Expr, gates: int) -> Expr:
    """R [D, G*H, H] -> [D, Hp/nb, H, G, nb]: weight[d, jo, k, g, ji] = R[d, g*H + jo*nb + ji, k]."""
    dirs, hidden = spec.dirs, spec.hidden
    blocks = padded_units(hidden) // PACK_BLOCK
    by_gate = reshape(_by_gate(r, dirs, gates, hidden, (hidden,)), (dirs, gates, blocks, PACK_BLOCK, hidden))
    return transpose(by_gate, (0, 2, 4, 1, 3))


def initial_state(spec) -> Expr:
    """[1, D, S, B, Hp] from the initial states ([D, B, H] each, zeros when not given)."""
    slots = [reshape(pad_units(s, 2, spec.hidden), (1, spec.dirs, 1, spec.batch, padded_units(spec.hidden)))
             for s in spec.initial]
    return slots[0] if len(slots) == 1 else fold("concatenate", *slots, axis=2)


def run_layer(spec, op: str, xp: Expr, r_packed: Expr, reverse: tuple, extra=(), **attrs):
    """Y and the final states (Y_h[, Y_c]) in the node's layout, from one `op` call per step (a scan of them
    when the sequence length is known only at run time)."""
    seq, dirs, batch, hidden = spec.seq, spec.dirs, spec.batch, spec.hidden
    state = initial_state(spec)
    if is_static_dim(seq):
        states = []
        for s in range(seq):
            steps = Constant(np.array([s, seq - 1 - s], np.int32))
            state = call(op, xp, steps, state, r_packed, *extra, reverse=reverse, **attrs)
            states.append(state)
        history = states[0] if seq == 1 else call("concatenate", *states, axis=0)
    else:
        history = call("nn.recurrent_scan", xp, state, r_packed, *extra, cell=op, reverse=reverse, **attrs)
        state = fold("strided_slice", history, begin=(seq - 1,), end=(seq,), axes=(0,))  # the last step's
    y = call("nn.recurrent_output", history, reverse=reverse, hidden=hidden, batch_major=spec.layout)
    finals = []
    for slot in range(shape_of(state)[2]):
        part = fold("strided_slice", state, begin=(slot, 0), end=(slot + 1, hidden), axes=(2, 4))
        final = reshape(part, (dirs, batch, hidden))
        finals.append(transpose(final, (1, 0, 2)) if spec.layout else final)
    return (y, *finals)


def zero_constant(t: Expr | None) -> bool:
    """t is omitted or a constant of zeros (a peephole input that changes nothing)."""
    return t is None or (isinstance(t, Constant) and not t.data.any())


def default_activations(names, defaults: tuple, dirs: int) -> bool:
    """The activations attribute is omitted or names the defaults for every direction."""
    return names is None or [n.lower() for n in names] == [d.lower() for d in defaults] * dirs

