"""Winograd convolution F(m x m, 3 x 3) in the blocked layout: nn.winograd_weight_transform and
nn.conv2d_winograd_nchwc.

A 3x3 stride-1 convolution computes each m x m output tile from an alpha x alpha input tile (alpha = m + 2) as

    Y = A^T [ (G g G^T) . (B^T d B) ] A          (. elementwise; summed over input channels before A^T ... A)

so the work per tile and channel pair is alpha^2 multiplies instead of 9 m^2 (2.25x fewer for m = 2, 4x fewer for
m = 4), plus transforms of the input and output tiles that cost O(channels), not O(channels^2). The weight
transform U = G g G^T is done once at compile time (the weight is a constant). The matrices are Lavin & Gray's
(interpolation points 0, +-1 for m = 2 and 0, +-1, +-2 for m = 4, plus the point at infinity). m = 4 rounds a bit
more than the direct sum (its transforms have entries up to 8 and 1/24): expect ~1e-6 relative error in fp32.

Compute stages (all in the blocked layout, i/o the input/output channel blocks, P = N x tiles):
    pad         (N, C/i, tilesH*m + 2, tilesW*m + 2, i)
    data_pack   V[alpha, alpha, P, C/i, i]          = B^T d B per tile (an explicit sum, no reduction axes)
    batch_gemm  M[alpha, alpha, O/o, P, o]          = sum over C of V * U: alpha^2 independent matrix products
    inverse     I[O/o, P, m, m, o]                  = A^T M A per tile
    output      Y[N, O/o, OH, OW, o]                = I read back per output pixel (a gather, inlined)
The transforms are written as selects over the tile position whose branches are the nonzero terms of the
transform: the tile position axes index no tensor, and once a schedule unrolls them the selects fold away (as
TVM's "always unroll" axes of its Winograd compute). The tags "winograd_data" and "winograd_inverse" tell the
schedulers that the transforms are worth their own buffers (like the padding of a direct convolution).
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..types import TensorType, is_static_dim
from ..op import OpError, Pattern, register_op, stage_tag
from .common import expect_ndim, pad_stage

TILE_SIZES = (2, 4)

# (A^T, G, B^T) for F(m, 3), m x alpha, alpha x 3, alpha x alpha
_MATRICES = {
    2: ([[1, 1, 1, 0],
         [0, 1, -1, -1]],
        [[1, 0, 0],
         [1 / 2, 1 / 2, 1 / 2],
         [1 / 2, -1 / 2, 1 / 2],
         [0, 0, 1]],
        [[1, 0, -1, 0],
         [0, 1, 1, 0],
         [0, -1, 1, 0],
         [0, 1, 0, -1]]),
    4: ([[1, 1, 1, 1, 1, 0],
         [0, 1, -1, 2, -2, 0],
         [0, 1, 1, 4, 4, 0],
         [0, 1, -1, 8, -8, 1]],
        [[1 / 4, 0, 0],
         [-1 / 6, -1 / 6, -1 / 6],
         [-1 / 6, 1 / 6, -1 / 6],
         [1 / 24, 1 / 12, 1 / 6],
         [1 / 24, -1 / 12, 1 / 6],
         [0, 0, 1]],
        [[4, 0, -5, 0, 1, 0],
         [0, -4, -4, 1, 1, 0],
         [0, 4, -4, -1, 1, 0],
         [0, -2, -1, 2, 1, 0],
         [0, 2, -1, -2, 1, 0],
         [0, 4, 0, -5, 0, 1]]),
}


def winograd_matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A^T, G, B^T) of F(m, 3) as float64 arrays."""
    if m not in _MATRICES:
        raise OpError(f"winograd: tile size {m} is not supported (use one of {TILE_SIZES})")
    return tuple(np.array(x, dtype=np.float64) for x in _MATRICES[m])


def _tiles(size: int, m: int) -> int:
    return -(-size // m)


def _check_tile(op: str, m) -> int:
    if m not in TILE_SIZES:
        raise OpError(f"{op}: tile_size must be one of {TILE_SIZES}, got {m!r}")
    return m


def _bilinear(rows, cols, i, j, read):
    """The expression sum_{a,b} rows[i][a] * cols[j][b] * read(a, b) for loop variables i, j, as a select over
    (i, j) whose branches hold only the nonzero terms (coefficients +-1 as adds and subtracts)."""
    def branch(ri, cj):
        total = None
        for a, ca in enumerate(ri):
            for b, cb in enumerate(cj):
                c = float(ca * cb)
                if c == 0.0:
                    continue
                term = read(a, b)
                if total is None:
                    total = term if c == 1.0 else (-term if c == -1.0 else term * c)
                elif c in (1.0, -1.0):
                    total = total + term if c == 1.0 else total - term
                else:
                    total = total + term * c
        return total if total is not None else te.const(0.0)

    def chain(var, options):  # select(var == 0, options[0], select(var == 1, ...)); the last one unconditional
        out = options[-1]
        for k in range(len(options) - 2, -1, -1):
            out = te.select(te.eq(var, k), options[k], out)
        return out

    return chain(i, [chain(j, [branch(ri, cj) for cj in cols]) for ri in rows])


# ---------------------------------------------------------------------------------------------- weight transform

def _wt_infer(arg_types, attrs):
    w, = arg_types
    expect_ndim("nn.winograd_weight_transform", w, 6, "weight")
    m = _check_tile("nn.winograd_weight_transform", attrs.tile_size)
    ob_n, icb, kh, kw, ib, ob = w.shape
    if (kh, kw) != (3, 3):
        raise OpError(f"nn.winograd_weight_transform: kernel must be 3x3, weight has {kh}x{kw} (shape {w.shape})")
    alpha = m + 2
    return TensorType((alpha, alpha, ob_n, icb, ib, ob), w.dtype)


def _wt_ref(w, tile_size):
    _, g, _ = winograd_matrices(tile_size)
    # u[e,v] = sum_ab g[e,a] w[a,b] g[v,b] over the kernel window, as two BLAS products over (a, b) x rest
    # (einsum's path for this was 1.5 s of ResNet-18's compile)
    k, c, kh, kw, i, o = w.shape
    rest = np.moveaxis(w.astype(np.float64), (2, 3), (0, 1)).reshape(kh, kw, -1)  # (a, b, kcio)
    gw = np.tensordot(g, rest, axes=(1, 0))  # (e, b, kcio)
    u = np.tensordot(g, gw, axes=(1, 1))  # (v, e, kcio)
    return u.transpose(1, 0, 2).reshape(len(g), len(g), k, c, i, o).astype(w.dtype)


def _wt_compute(inputs, attrs, out_type):
    w, = inputs
    _, g, _ = winograd_matrices(attrs.tile_size)
    return te.compute(out_type.shape,
                      lambda e, v, k, c, i, o: _bilinear(g, g, e, v, lambda a, b: w[k, c, a, b, i, o]),
                      name="winograd_weight", tag="winograd_weight")


register_op("nn.winograd_weight_transform", inputs=1, pattern=Pattern.INJECTIVE, op_class="conv", infer=_wt_infer,
            ref=_wt_ref, compute=_wt_compute, attrs={"tile_size": 4}, flops=lambda a, attrs, o: 0.0,
            doc="OIHW{i}i{o}o 3x3 weights -> Winograd F(m x m, 3 x 3) weights G w G^T (folded at compile time)")


# ---------------------------------------------------------------------------------------------- convolution

def _cw_infer(arg_types, attrs):
    x, u = arg_types
    op = "nn.conv2d_winograd_nchwc"
    expect_ndim(op, x, 5, "data")
    expect_ndim(op, u, 6, "transformed weight")
    m = _check_tile(op, attrs.tile_size)
    n, cb, h, wd, ib = x.shape
    a1, a2, kb, ucb, uib, ob = u.shape
    if (a1, a2) != (m + 2, m + 2):
        raise OpError(f"{op}: transformed weight {u.shape} does not start with ({m + 2}, {m + 2}) for tile {m}")
    if (ucb, uib) != (cb, ib):
        raise OpError(f"{op}: weight blocks {u.shape} do not match data blocks {x.shape}")
    pt, pl, pb, pr = attrs.padding
    oh, ow = h + pt + pb - 2, wd + pl + pr - 2
    if any(is_static_dim(d) and d <= 0 for d in (oh, ow)):  # (run-time sizes: checked when they run)
        raise OpError(f"{op}: empty output ({oh}x{ow}) for input {x.shape} and padding {attrs.padding}")
    return TensorType((n, kb, oh, ow, ob), x.dtype)


def _cw_ref(x, u, tile_size, padding):
    """The same algorithm in float64 numpy (tiles, transforms, products), independent of the te compute."""
    m, alpha = tile_size, tile_size + 2
    at, _, bt = winograd_matrices(m)
    n, cb, h, wd, ib = x.shape
    pt, pl, pb, pr = padding
    oh, ow = h + pt + pb - 2, wd + pl + pr - 2
    th, tw = _tiles(oh, m), _tiles(ow, m)
    xp = np.zeros((n, cb, th * m + 2, tw * m + 2, ib))
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    d = np.empty((n, cb, th, tw, alpha, alpha, ib))
    for r in range(alpha):
        for s in range(alpha):
            d[:, :, :, :, r, s] = xp[:, :, r:r + th * m:m, s:s + tw * m:m]
    v = np.einsum("er,nctwrsi,vs->evntwci", bt, d, bt, optimize=True)
    prod = np.einsum("evntwci,evkcio->evntwko", v, u.astype(np.float64), optimize=True)
    y = np.einsum("ye,evntwko,xv->nktywxo", at, prod, at, optimize=True)
    y = y.reshape(n, u.shape[2], th * m, tw * m, u.shape[5])
    return np.ascontiguousarray(y[:, :, :oh, :ow]).astype(x.dtype)


# the input transform (a dozen adds per element) is read once per output channel block by the batched product; the
# inverse gathers a tile's products: both are worth their own buffer. Padding before the input transform is read
# by overlapping tiles.
DATA_TAG = stage_tag("winograd_data", keeps_buffer=True, buffered_padding=True)
INVERSE_TAG = stage_tag("winograd_inverse", keeps_buffer=True)


def _cw_compute(inputs, attrs, out_type):
    x, u = inputs
    m = attrs.tile_size
    alpha = m + 2
    at, _, bt = winograd_matrices(m)
    n, cb, _, _, ib = x.shape
    kb, ob = u.shape[2], u.shape[5]
    pt, pl, _, _ = attrs.padding
    _, _, oh, ow, _ = out_type.shape
    th, tw = _tiles(oh, m), _tiles(ow, m)
    hp, wp = th * m + 2, tw * m + 2
    pad = pad_stage(x, {2: pt, 3: pl}, (n, cb, hp, wp, ib), 0.0)
    tiles = n * th * tw

    def tile_origin(p):  # (batch, first padded row, first padded column) of tile p
        return p // (th * tw), (p // tw) % th * m, p % tw * m

    def data_pack(e, v, p, c, i):
        b, y0, x0 = tile_origin(p)
        return _bilinear(bt, bt, e, v, lambda r, s: pad[b, c, y0 + r, x0 + s, i])

    data = te.compute((alpha, alpha, tiles, cb, ib), data_pack, name="data_pack", tag=DATA_TAG)
    rc, ri = te.reduce_axis(cb, "rc"), te.reduce_axis(ib, "ri")
    gemm = te.compute((alpha, alpha, kb, tiles, ob),
                      lambda e, v, k, p, o: te.sum(data[e, v, p, rc, ri] * u[e, v, k, rc, ri, o], (rc, ri)),
                      name="batch_gemm", tag="winograd_gemm")

    inverse = te.compute((kb, tiles, m, m, ob),
                         lambda k, p, vy, vx, o: _bilinear(at, at, vy, vx, lambda e, v: gemm[e, v, k, p, o]),
                         name="inverse", tag=INVERSE_TAG)

    def output(b, k, y, xx, o):
        return inverse[k, (b * th + y // m) * tw + xx // m, y % m, xx % m, o]

    return te.compute(out_type.shape, output, name="conv2d_winograd", tag="winograd_output")


def _cw_flops(arg_types, attrs, out_type):
    """The multiply-adds actually done by the batched products (2 flops each); the transforms are not counted."""
    x, u = arg_types
    alpha, _, kb, cb, ib, ob = u.shape
    n, _, oh, ow, _ = out_type.shape
    m = attrs.tile_size
    tiles = n * _tiles(oh, m) * _tiles(ow, m)
    return 2.0 * alpha * alpha * tiles * kb * ob * cb * ib


register_op("nn.conv2d_winograd_nchwc", inputs=2, pattern=Pattern.OUT_ELEMWISE_FUSABLE, op_class="conv",
            infer=_cw_infer, ref=_cw_ref, compute=_cw_compute, flops=_cw_flops,
            attrs={"tile_size": 4, "padding": (1, 1, 1, 1)},
            doc="3x3 stride-1 conv2d_nchwc as Winograd F(m x m, 3 x 3) with transformed weights")
