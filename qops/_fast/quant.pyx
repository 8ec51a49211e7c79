# Quantize, dequantize and requantize kernels (mirror of qops/_ref/quant.py).
# Contract: float32 <-> uint8/int8/int32; IEEE float32 arithmetic, rint half to even; the
# primitives of qops_common.h (Q_fma, Q_leg, D_sc, D_pc) exactly as the reference states them.
import numpy as np
from cython.parallel cimport prange
from qops._fast._common cimport *

DEF BLOCK = 4096          # elements per parallel chunk: whole cache lines, enough work per thread
DEF GRAIN = 32768         # below this many elements a second thread costs more than it gives


# The loops over elements live in small functions taking raw pointers: inside a prange body,
# memoryview fields are shared state GCC must reload after every store, which blocks
# vectorization; function arguments are private and the loops vectorize.

cdef extern from *:
    """
    #if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    #include <immintrin.h>
    #endif
    /* Q_fma of n floats into bytes (uint8 or int8 by the bounds). The AVX-512 body clamps
     * before one round-to-nearest convert, which equals rounding then clamping (rint is
     * monotonic and the bounds are integers; min returns the bound for NaN, as the scalar
     * clamp does); GCC's own vectorization of the scalar loop spends twice the instructions. */
    static void qops_quantize_fma(const float *x, uint8_t *out, ptrdiff_t n, float inv, float zpf,
                                  float qmin, float qmax) {
        ptrdiff_t i = 0;
    #if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
        const __m512 vi = _mm512_set1_ps(inv), vz = _mm512_set1_ps(zpf);
        const __m512 lo = _mm512_set1_ps(qmin), hi = _mm512_set1_ps(qmax);
        /* 64 at a time, the lower clamp and the narrowing done by saturating packs (a
         * value below int32's range converts to INT32_MIN, which saturates to qmin too);
         * the packs interleave 128-bit lanes and one dword permute restores the order */
        const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        const int sgn = qmin < 0;
        for (; i + 64 <= n; i += 64) {
            __m512i r[4];
            for (int k = 0; k < 4; k++)
                r[k] = _mm512_cvt_roundps_epi32(
                    _mm512_min_ps(_mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16 * k), vi, vz), hi),
                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m512i w0 = _mm512_packs_epi32(r[0], r[1]), w1 = _mm512_packs_epi32(r[2], r[3]);
            _mm512_storeu_si512((void *)(out + i), _mm512_permutexvar_epi32(
                perm, sgn ? _mm512_packs_epi16(w0, w1) : _mm512_packus_epi16(w0, w1)));
        }
        for (; i < n; i += 16) {
            __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
            __m512 t = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), vi, vz);
            t = _mm512_max_ps(_mm512_min_ps(t, hi), lo);
            __m512i r = _mm512_cvt_roundps_epi32(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            _mm_mask_storeu_epi8(out + i, m, _mm512_cvtepi32_epi8(r));
        }
    #endif
        for (; i < n; i++) out[i] = (uint8_t)qops_q_fma(x[i], inv, zpf, qmin, qmax);
    }

    /* D_pc of n 8-bit values (int8 when sgn) with a double scale, for |zp| <= 2**23: then
     * f32(q) - f32(zp) is the exact integer q - zp, so the AVX-512 body subtracts in int32,
     * multiplies in double and rounds to float once, as the scalar formula does. GCC's own
     * vectorization of that formula ran 10% behind PyTorch's kernel. */
    static void qops_dequantize_pc8(const uint8_t *q, float *out, ptrdiff_t n, double s,
                                    int32_t zp, int sgn) {
        ptrdiff_t i = 0;
    #if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
        /* 8 values per step (one zmm of doubles): in a C harness 60 us for 64x112x112 where
         * 16 per step took 68 and GCC's loop 87; masked loads and stores only in the tail */
        const __m512d vs = _mm512_set1_pd(s);
        const __m256i vz = _mm256_set1_epi32(zp);
        for (; i + 8 <= n; i += 8) {
            __m128i b = _mm_loadl_epi64((const __m128i *)(q + i));
            __m256i v = _mm256_sub_epi32(sgn ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b), vz);
            _mm256_storeu_ps(out + i, _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtepi32_pd(v), vs)));
        }
    #endif
        for (; i < n; i++)
            out[i] = qops_d_pc(sgn ? (int32_t)(int8_t)q[i] : (int32_t)q[i], s, zp);
    }
    """
    void qops_quantize_fma(const float* x, uint8_t* out, Py_ssize_t n, float inv, float zpf,
                           float qmin, float qmax) nogil
    void qops_dequantize_pc8(const uint8_t* q, float* out, Py_ssize_t n, double s, int32_t zp,
                             int sgn) nogil


cdef inline void _q_fma_run(const float* x, q8_t* out, Py_ssize_t n, float inv, float zpf,
                            float qmin, float qmax) noexcept nogil:
    qops_quantize_fma(x, <uint8_t*>out, n, inv, zpf, qmin, qmax)


cdef inline void _q_leg32_run(const float* x, int32_t* out, Py_ssize_t n, float inv,
                              float zpf) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = qops_q_leg32(x[i], inv, zpf)


cdef inline void _q_leg_run(const float* x, qint_t* out, Py_ssize_t n, float inv, float zpf,
                            float qmin, float qmax) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if qint_t is int32_t:
            out[i] = qops_q_leg32(x[i], inv, zpf)
        else:
            out[i] = <qint_t>qops_q_leg8(x[i], inv, zpf, qmin, qmax)


cdef inline void _d_sc_run(const qint_t* q, float* out, Py_ssize_t n, float s,
                           int32_t zp) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = qops_d_sc(q[i], s, zp)


cdef inline void _d_pc_run(const qint_t* q, float* out, Py_ssize_t n, double s,
                           int32_t zp) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = qops_d_pc(q[i], s, zp)


cdef inline void _requant_run(const q8_t* q, q8_t* out, Py_ssize_t n, float s, int32_t zp,
                              float inv, float zpf, float qmin, float qmax) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = <q8_t>qops_q_fma(qops_d_sc(q[i], s, zp), inv, zpf, qmin, qmax)


cdef void _q_fma_flat(const float[::1] x, q8_t[::1] out, float inv, float zpf,
                      float qmin, float qmax) noexcept nogil:
    cdef Py_ssize_t n = x.shape[0], nb = (n + BLOCK - 1) // BLOCK, b
    cdef const float* xp = &x[0] if n else NULL
    cdef q8_t* op = &out[0] if n else NULL
    for b in prange(nb, schedule="static", num_threads=qops_threads_for(n, GRAIN)):
        _q_fma_run(xp + b * BLOCK, op + b * BLOCK, min(BLOCK, n - b * BLOCK), inv, zpf, qmin, qmax)


cdef void _q_leg32_flat(const float[::1] x, int32_t[::1] out, float inv, float zpf) noexcept nogil:
    cdef Py_ssize_t n = x.shape[0], nb = (n + BLOCK - 1) // BLOCK, b
    cdef const float* xp = &x[0] if n else NULL
    cdef int32_t* op = &out[0] if n else NULL
    for b in prange(nb, schedule="static", num_threads=qops_threads_for(n, GRAIN)):
        _q_leg32_run(xp + b * BLOCK, op + b * BLOCK, min(BLOCK, n - b * BLOCK), inv, zpf)


cdef void _q_leg_channels(const float[:, :, ::1] x, qint_t[:, :, ::1] out,
                          const float[::1] inv, const int32_t[::1] zp,
                          float qmin, float qmax) noexcept nogil:
    # (outer, C, inner) view: parallel over outer*C rows, each row one channel's qparams.
    cdef Py_ssize_t n0 = x.shape[0], nc = x.shape[1], n2 = x.shape[2], r
    if n0 * nc * n2 == 0:
        return
    cdef const float* xp = &x[0, 0, 0]
    cdef qint_t* op = &out[0, 0, 0]
    cdef const float* ip = &inv[0]
    cdef const int32_t* zpp = &zp[0]
    for r in prange(n0 * nc, schedule="static",
                    num_threads=qops_threads_for(n0 * nc * n2, GRAIN)):
        _q_leg_run(xp + r * n2, op + r * n2, n2, ip[r % nc], <float>zpp[r % nc], qmin, qmax)


cdef void _d_sc_flat(const qint_t[::1] q, float[::1] out, float s, int32_t zp) noexcept nogil:
    cdef Py_ssize_t n = q.shape[0], nb = (n + BLOCK - 1) // BLOCK, b
    cdef const qint_t* qp = &q[0] if n else NULL
    cdef float* op = &out[0] if n else NULL
    for b in prange(nb, schedule="static", num_threads=qops_threads_for(n, GRAIN)):
        _d_sc_run(qp + b * BLOCK, op + b * BLOCK, min(BLOCK, n - b * BLOCK), s, zp)


cdef void _d_pc_channels(const qint_t[:, :, ::1] q, float[:, :, ::1] out, const double[::1] scales,
                         const int32_t[::1] zp) noexcept nogil:
    cdef Py_ssize_t n0 = q.shape[0], nc = q.shape[1], n2 = q.shape[2], r, c
    if n0 * nc * n2 == 0:
        return
    cdef const qint_t* qp = &q[0, 0, 0]
    cdef float* op = &out[0, 0, 0]
    cdef const double* sp = &scales[0]
    cdef const int32_t* zpp = &zp[0]
    # D_pc in float32 when that gives the same bits: 8-bit q - zp is an integer of at most 24
    # bits, a scale that is a float32 has 24, so the double product is exact and both paths
    # round it to float once. The scales from observers are float32 (PyTorch's as ours).
    # Both 8-bit kernels need f32(q) - f32(zp) to be the integer q - zp: |zp| <= 2**23.
    cdef bint small_zp = qint_t is not int32_t, f32 = True
    for c in range(nc):
        small_zp = small_zp and -(1 << 23) <= zpp[c] <= (1 << 23)
        f32 = f32 and <double><float>sp[c] == sp[c]
    if small_zp and f32:
        for r in prange(n0 * nc, schedule="static",
                        num_threads=qops_threads_for(n0 * nc * n2, GRAIN)):
            _d_sc_run(qp + r * n2, op + r * n2, n2, <float>sp[r % nc], zpp[r % nc])
        return
    if small_zp:
        for r in prange(n0 * nc, schedule="static",
                        num_threads=qops_threads_for(n0 * nc * n2, GRAIN)):
            qops_dequantize_pc8(<const uint8_t*>(qp + r * n2), op + r * n2, n2, sp[r % nc],
                                zpp[r % nc], qint_t is int8_t)
        return
    for r in prange(n0 * nc, schedule="static",
                    num_threads=qops_threads_for(n0 * nc * n2, GRAIN)):
        _d_pc_run(qp + r * n2, op + r * n2, n2, sp[r % nc], zpp[r % nc])


cdef void _requant_flat(const q8_t[::1] q, q8_t[::1] out, float s, int32_t zp, float inv,
                        float zpf, float qmin, float qmax) noexcept nogil:
    cdef Py_ssize_t n = q.shape[0], nb = (n + BLOCK - 1) // BLOCK, b
    cdef const q8_t* qp = &q[0] if n else NULL
    cdef q8_t* op = &out[0] if n else NULL
    for b in prange(nb, schedule="static", num_threads=qops_threads_for(n, GRAIN)):
        _requant_run(qp + b * BLOCK, op + b * BLOCK, min(BLOCK, n - b * BLOCK), s, zp, inv,
                     zpf, qmin, qmax)


def _split(shape, axis):
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    return (outer, shape[axis], inner)


def quantize_per_tensor(x, inv_scale, zero_point, dtype):
    """Quantize float32 `x` with one scale: Q_fma for 8-bit types, Q_leg for int32."""
    x = np.require(x, np.float32, "C")
    out = qops_empty(np, x.shape, dtype)
    info = np.iinfo(out.dtype)
    flat_x, flat_out = x.reshape(-1), out.reshape(-1)
    if out.dtype == np.uint8:
        _q_fma_flat[uint8_t](flat_x, flat_out, inv_scale, zero_point, info.min, info.max)
    elif out.dtype == np.int8:
        _q_fma_flat[int8_t](flat_x, flat_out, inv_scale, zero_point, info.min, info.max)
    else:
        _q_leg32_flat(flat_x, flat_out, inv_scale, zero_point)
    return out


def quantize_per_channel(x, inv_scales, zero_points, axis, dtype):
    """Quantize float32 `x` with one scale per index of `axis` (Q_leg)."""
    x = np.require(x, np.float32, "C")
    out = qops_empty(np, x.shape, dtype)
    info = np.iinfo(out.dtype)
    shape3 = _split(x.shape, axis)
    inv = np.ascontiguousarray(inv_scales, dtype=np.float32)
    zp = np.ascontiguousarray(zero_points, dtype=np.int32)
    if out.dtype == np.uint8:
        _q_leg_channels[uint8_t](x.reshape(shape3), out.reshape(shape3), inv, zp, info.min, info.max)
    elif out.dtype == np.int8:
        _q_leg_channels[int8_t](x.reshape(shape3), out.reshape(shape3), inv, zp, info.min, info.max)
    else:
        _q_leg_channels[int32_t](x.reshape(shape3), out.reshape(shape3), inv, zp, info.min, info.max)
    return out


def dequantize_per_tensor(q, scale, zero_point):
    """Dequantize integer `q` with one float32 scale (D_sc); float32 result."""
    q = np.require(q, requirements="C")
    out = qops_empty(np, q.shape, np.float32)
    if q.dtype == np.uint8:
        _d_sc_flat[uint8_t](q.reshape(-1), out.reshape(-1), scale, zero_point)
    elif q.dtype == np.int8:
        _d_sc_flat[int8_t](q.reshape(-1), out.reshape(-1), scale, zero_point)
    else:
        _d_sc_flat[int32_t](q.reshape(-1), out.reshape(-1), scale, zero_point)
    return out


def dequantize_per_channel(q, scales, zero_points, axis):
    """Dequantize integer `q` per channel of `axis` with float64 scales (D_pc)."""
    q = np.require(q, requirements="C")
    out = qops_empty(np, q.shape, np.float32)
    shape3 = _split(q.shape, axis)
    sc = np.ascontiguousarray(scales, dtype=np.float64)
    zp = np.ascontiguousarray(zero_points, dtype=np.int32)
    if q.dtype == np.uint8:
        _d_pc_channels[uint8_t](q.reshape(shape3), out.reshape(shape3), sc, zp)
    elif q.dtype == np.int8:
        _d_pc_channels[int8_t](q.reshape(shape3), out.reshape(shape3), sc, zp)
    else:
        _d_pc_channels[int32_t](q.reshape(shape3), out.reshape(shape3), sc, zp)
    return out


def requantize_per_tensor(q, scale, zero_point, inv_out_scale, out_zero_point, dtype):
    """Re-express `q` with new qparams: D_sc, then quantize as quantize_per_tensor does."""
    q = np.require(q, requirements="C")
    if q.dtype != np.dtype(dtype) or q.dtype == np.int32:
        return quantize_per_tensor(dequantize_per_tensor(q, scale, zero_point),
                                   inv_out_scale, out_zero_point, dtype)
    out = qops_empty(np, q.shape, dtype)
    info = np.iinfo(out.dtype)
    if q.dtype == np.uint8:
        _requant_flat[uint8_t](q.reshape(-1), out.reshape(-1), scale, zero_point,
                               inv_out_scale, out_zero_point, info.min, info.max)
    else:
        _requant_flat[int8_t](q.reshape(-1), out.reshape(-1), scale, zero_point,
                              inv_out_scale, out_zero_point, info.min, info.max)
    return out


cdef extern from "<string.h>" nogil:
    void* memcpy(void* dst, const void* src, size_t n)


cdef void _copy_flat(const char* src, char* dst, Py_ssize_t n, int threads) noexcept nogil:
    # Each thread copies its own 64-byte-aligned share, so a clone is as parallel as the op
    # that follows it (a one-thread copy leaves the other core to read its half from afar).
    cdef Py_ssize_t chunk = qops_chunk64(n, threads), start
    cdef int t
    if threads == 1:        # no parallel region: it alone costs ~0.7 us
        memcpy(dst, src, n)
        return
    for t in prange(threads, schedule="static", num_threads=threads):
        start = t * chunk
        if start < n:
            memcpy(dst + start, src + start, min(chunk, n - start))


def copy_raw(q):
    """A C-contiguous copy of integer array `q` (QTensor.clone's data), 64-byte aligned."""
    if not q.flags.c_contiguous:
        return np.ascontiguousarray(q)          # already a fresh copy
    out = qops_empty(np, q.shape, q.dtype)
    cdef Py_ssize_t n = q.nbytes
    if n:
        _copy_flat(<const char*>qops_ptr(q), <char*>qops_ptr(out, True), n,
                   qops_threads_for(n, GRAIN))
    return out
