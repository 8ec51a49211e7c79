# Interpolation kernels (mirror of qops/_ref/resize.py): raw uint8/int8/int32 (N, C, D, H, W)
# in, same dtype out. Nearest modes gather raw values; bilinear blends in float32 exactly as
# the reference writes it (no fused multiply-add: the build uses -ffp-contract=off) and
# quantizes with Q_leg, rint half to even.
#
# Source indices and weights per output coordinate are computed once per call (numpy, the
# reference's float32 formulas); the kernels then run per output row. prange goes over
# (n, c, od) planes, each thread keeping its own row buffers.
import numpy as np
from cython.parallel cimport prange, parallel
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy
from qops._fast._common cimport *

DEF GRAIN = 32768         # output elements per thread below which one thread is enough


def _nearest_index(out_len, in_len, ratio, exact):
    dst = np.arange(out_len).astype(np.float32)
    if exact:
        dst = dst + np.float32(0.5)
    src = np.floor(dst * np.float32(ratio)).astype(np.int64)
    return np.minimum(src, in_len - 1).astype(np.int32)


cdef void _nearest_rows(const qint_t[:, :, :, :, ::1] x, qint_t[:, :, :, :, ::1] out,
                        const int32_t[::1] di, const int32_t[::1] hi, const int32_t[::1] wi,
                        bint twice, int nthreads) noexcept nogil:
    cdef Py_ssize_t C = x.shape[1], W = x.shape[4]
    cdef Py_ssize_t OD = out.shape[2], OH = out.shape[3], OW = out.shape[4]
    cdef Py_ssize_t planes = out.shape[0] * C * OD
    cdef Py_ssize_t p, n, c, od, oh, ow
    cdef const qint_t* src
    cdef qint_t* o
    cdef qint_t v
    for p in prange(planes, schedule="static", num_threads=nthreads):
        od = p % OD
        c = (p // OD) % C
        n = p // (OD * C)
        for oh in range(OH):
            o = &out[n, c, od, oh, 0]
            if oh > 0 and hi[oh] == hi[oh - 1]:
                # same source row as the row above: copy it
                memcpy(o, o - OW, OW * sizeof(qint_t))
                continue
            src = &x[n, c, di[od], hi[oh], 0]
            if twice:
                # exact 2x along W: each source value written twice (vectorizes as interleave)
                for ow in range(W):
                    v = src[ow]
                    o[2 * ow] = v
                    o[2 * ow + 1] = v
            else:
                for ow in range(OW):
                    o[ow] = src[wi[ow]]


def upsample_nearest(x, out_size, ratios, exact):
    """Nearest-neighbour resize: a gather of raw values."""
    x = np.ascontiguousarray(x)
    shape = x.shape[:2] + tuple(out_size)
    out = qops_empty(np, shape, x.dtype)
    if out.size == 0:
        return out
    di, hi, wi = (_nearest_index(o, L, r, exact) for o, L, r in zip(out_size, x.shape[2:], ratios))
    W = x.shape[4]
    twice = shape[4] == 2 * W and np.array_equal(wi, np.arange(2 * W, dtype=np.int32) // 2)
    nt = qops_threads_for(out.size, GRAIN)
    if x.dtype == np.uint8:
        _nearest_rows[uint8_t](x, out, di, hi, wi, twice, nt)
    elif x.dtype == np.int8:
        _nearest_rows[int8_t](x, out, di, hi, wi, twice, nt)
    else:
        _nearest_rows[int32_t](x, out, di, hi, wi, twice, nt)
    return out


def _linear_source(out_len, in_len, ratio, align_corners):
    dst = np.arange(out_len).astype(np.float32)
    r = np.float32(ratio)
    if align_corners:
        src = r * dst
    else:
        src = np.maximum(r * (dst + np.float32(0.5)) - np.float32(0.5), np.float32(0))
    i0 = src.astype(np.int64)
    step = (i0 < in_len - 1).astype(np.int64)
    l1 = src - i0.astype(np.float32)
    l0 = np.float32(1) - l1
    return i0.astype(np.int32), (i0 + step).astype(np.int32), l1, l0


cdef inline void _hblend(const q8_t* src, float* f, float* dst, const int32_t* w0,
                         const int32_t* w1, const float* m0, const float* m1, Py_ssize_t W,
                         Py_ssize_t OW) noexcept nogil:
    # One input row blended along W: dst[ow] = m0*p[w0] + m1*p[w1] (float32, two roundings
    # for the products, one for the sum). The row goes to float first so the gathers are
    # float gathers, which AVX2/AVX-512 have.
    cdef Py_ssize_t w, ow
    for w in range(W):
        f[w] = <float>src[w]
    for ow in range(OW):
        dst[ow] = m0[ow] * f[w0[ow]] + m1[ow] * f[w1[ow]]


cdef void _bilinear_planes(const q8_t[:, :, ::1] x, q8_t[:, :, ::1] out,
                           const int32_t[::1] h0, const int32_t[::1] h1,
                           const float[::1] l1, const float[::1] l0,
                           const int32_t[::1] w0, const int32_t[::1] w1,
                           const float[::1] m1, const float[::1] m0,
                           float zpf, float qmin, float qmax, int nthreads) noexcept nogil:
    cdef Py_ssize_t P = x.shape[0], W = x.shape[2], OH = out.shape[1], OW = out.shape[2]
    cdef Py_ssize_t p, oh, ow, top, bot
    cdef float* frow = NULL
    cdef float* bufs = NULL
    cdef float* a
    cdef float* b
    cdef Py_ssize_t* tags = NULL
    cdef q8_t* o
    cdef float v, la, lb
    with parallel(num_threads=nthreads):
        frow = <float*>malloc(W * sizeof(float))
        bufs = <float*>malloc(2 * OW * sizeof(float))
        # which input rows the two blended-row buffers hold; behind a pointer because prange
        # resets its private scalars every iteration
        tags = <Py_ssize_t*>malloc(2 * sizeof(Py_ssize_t))
        for p in prange(P, schedule="static"):
            tags[0] = -1
            tags[1] = -1
            for oh in range(OH):
                top = h0[oh]
                bot = h1[oh]
                # each input row is blended along W once and reused by the output rows
                # that need it (two per input row when upsampling by 2)
                if tags[0] == top:
                    a = bufs
                elif tags[1] == top:
                    a = bufs + OW
                else:
                    if tags[0] != bot:
                        a = bufs
                        tags[0] = top
                    else:
                        a = bufs + OW
                        tags[1] = top
                    _hblend(&x[p, top, 0], frow, a, &w0[0], &w1[0], &m0[0], &m1[0], W, OW)
                if tags[0] == bot:
                    b = bufs
                elif tags[1] == bot:
                    b = bufs + OW
                else:
                    if a != bufs:
                        b = bufs
                        tags[0] = bot
                    else:
                        b = bufs + OW
                        tags[1] = bot
                    _hblend(&x[p, bot, 0], frow, b, &w0[0], &w1[0], &m0[0], &m1[0], W, OW)
                la = l0[oh]
                lb = l1[oh]
                o = &out[p, oh, 0]
                for ow in range(OW):
                    v = (la * a[ow] + lb * b[ow]) - zpf
                    # Q_leg with scale ratio 1: zero point added back before rounding
                    o[ow] = <q8_t><int32_t>qops_clampf(qops_rintf(v + zpf), qmin, qmax)
        free(frow)
        free(bufs)
        free(tags)


def upsample_bilinear(x, out_size, ratios, align_corners, zero_point):
    """Bilinear resize of (N, C, 1, H, W) as PyTorch's NCHW kernel, output qparams = input's."""
    x = np.ascontiguousarray(x)
    n, c, _, H, W = x.shape
    OH, OW = out_size[1], out_size[2]
    out = qops_empty(np, (n, c, 1, OH, OW), x.dtype)
    if out.size == 0:
        return out
    h0, h1, l1, l0 = _linear_source(OH, H, ratios[1], align_corners)
    w0, w1, m1, m0 = _linear_source(OW, W, ratios[2], align_corners)
    info = np.iinfo(x.dtype)
    nt = qops_threads_for(out.size, GRAIN)
    x3 = x.reshape(n * c, H, W)
    o3 = out.reshape(n * c, OH, OW)
    if x.dtype == np.uint8:
        _bilinear_planes[uint8_t](x3, o3, h0, h1, l1, l0, w0, w1, m1, m0, zero_point,
                                  info.min, info.max, nt)
    else:
        _bilinear_planes[int8_t](x3, o3, h0, h1, l1, l0, w0, w1, m1, m0, zero_point,
                                 info.min, info.max, nt)
    return out
