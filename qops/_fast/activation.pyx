# Element-wise activations (mirror of qops/_ref/activation.py).
# Contract: uint8/int8 in, same dtype out. An 8-bit input has only 256 possible values, so each
# float-domain activation builds its 256-entry output table here, with its own float32
# arithmetic (D_vec -> f(x) -> Q_vec, the vector-body formula), then looks every element up.
import numpy as np
from cython.parallel cimport prange
from libc.math cimport expm1, exp, tanh as c_tanh
from qops._fast._common cimport *

cdef extern from "qops_lut.h" nogil:
    void qops_lut_apply_threads(const uint8_t *src, uint8_t *dst, Py_ssize_t n,
                                const uint8_t *table, int threads)
    int qops_lut_vectorized()

DEF GRAIN = 262144        # below this a second thread costs more than it saves (L2-resident data)

LUT_VECTORIZED = bool(qops_lut_vectorized())   # also initialises the CPU check outside prange

# Which formula a table holds.
DEF K_LEAKY = 0
DEF K_HARDSIGMOID = 1
DEF K_HARDSWISH = 2
DEF K_ELU = 3
DEF K_SIGMOID = 4
DEF K_TANH = 5


cdef inline float _f(int kind, float x, float xsc, float p) noexcept nogil:
    # x: D_vec value; xsc: D_sc value (sigmoid's dequantize); p: slope or alpha.
    # float-typed constants: a bare 3.0 would make C compute in double and round twice
    cdef float c, zero = 0.0, one = 1.0, three = 3.0, six = 6.0
    if kind == K_LEAKY:
        return x if x > zero else x * p
    if kind == K_HARDSIGMOID:
        c = x + three
        c = c if c > zero else zero
        c = c if c < six else six
        return c / six
    if kind == K_HARDSWISH:
        c = x + three
        c = c if c > zero else zero
        c = c if c < six else six
        c = x * c
        return c / six
    if kind == K_ELU:
        if x > zero:
            return x
        c = <float>expm1(<double>x)
        return c * p
    if kind == K_SIGMOID:
        c = <float>exp(-<double>xsc)
        c = one + c
        return one / c
    return <float>c_tanh(<double>x)


cdef void _build_table(uint8_t[::1] table, int kind, float scale, int32_t zp, float p,
                       float out_inv, int32_t out_zp, int qmin, int qmax) noexcept nogil:
    cdef int r
    cdef float s_negzp = scale * <float>(-zp)
    cdef float lo = <float>(qmin - out_zp), hi = <float>(qmax - out_zp)
    cdef float x, xsc, y
    for r in range(qmin, qmax + 1):
        x = qops_d_vec(r, scale, s_negzp)
        xsc = qops_d_sc(r, scale, zp)
        y = _f(kind, x, xsc, p)
        table[<uint8_t>r] = <uint8_t>qops_q_vec(y, out_inv, out_zp, lo, hi)




_TABLES = {}


def _map(q, int kind, float scale, int32_t zero_point, float p, float out_inv_scale,
         int32_t out_zero_point):
    shape = q.shape                       # ascontiguousarray makes 0-d arrays 1-d
    q = np.ascontiguousarray(q)
    qmin, qmax = qops_range8(q.dtype)
    # A model calls each activation with a few parameter sets: keep their tables (building
    # one runs the float formula 256 times, elu's with expm1).
    key = (kind, scale, zero_point, p, out_inv_scale, out_zero_point, qmin)
    table = _TABLES.get(key)
    if table is None:
        table = np.empty(256, dtype=np.uint8)
        _build_table(table, kind, scale, zero_point, p, out_inv_scale, out_zero_point, qmin, qmax)
        table.flags.writeable = False
        if len(_TABLES) >= 1024:
            _TABLES.clear()
        _TABLES[key] = table
    out = qops_empty(np, shape, q.dtype)
    cdef Py_ssize_t n = q.size
    if n:
        # int8 data is looked up through its two's-complement byte (the table is indexed so)
        qops_lut_apply_threads(<const uint8_t*>qops_ptr(q), <uint8_t*>qops_ptr(out, True), n,
                               <const uint8_t*>qops_ptr(table), qops_threads_for(n, GRAIN))
    return out


cdef extern from *:
    """
    /* min(max(x, lo), hi) of n bytes, GCC-vectorized. One thread runs it directly (a parallel
     * region alone costs as much as a small call); it is noinline because inlined into the
     * Python wrapper GCC reloaded both pointers from the stack around every 64-byte store. */
    #if defined(_OPENMP)
    #define QOPS_CLAMP_OMP_FOR _Pragma("omp parallel for schedule(static) num_threads(threads)")
    #else
    #define QOPS_CLAMP_OMP_FOR
    #endif
    #if defined(__AVX512BW__)
    #include <immintrin.h>
    /* min(max(x, lo), hi) of 64 bytes, unsigned or signed */
    static inline __m512i qops_clamp64(__m512i v, __m512i lo, __m512i hi, int uns) {
        return uns ? _mm512_min_epu8(_mm512_max_epu8(v, lo), hi)
                   : _mm512_min_epi8(_mm512_max_epi8(v, lo), hi);
    }
    /* The clamp of n >= 256 bytes whose source lies a multiple of 4 bytes off the output's
     * alignment: aligned loads of the source's lines, each vector taken from two of them by
     * one dword permute, aligned stores. numpy's arrays start 16 bytes into a cache line:
     * with plain unaligned loads every vector split two lines and relu of 64x112x112 took
     * 23.5 instead of 20.3 us. Returns 0 (nothing done) otherwise. */
    static int qops_clamp_shifted(const uint8_t *src, uint8_t *dst, ptrdiff_t n, uint8_t lo,
                                  uint8_t hi, int uns) {
        if (n < 256 || ((uintptr_t)src - (uintptr_t)dst) % 4 != 0) return 0;
        const __m512i L = _mm512_set1_epi8((char)lo), H = _mm512_set1_epi8((char)hi);
        ptrdiff_t i = (ptrdiff_t)((-(uintptr_t)dst) & 63);            /* to the output's line */
        const __mmask64 mh = i ? (((__mmask64)1 << i) - 1) : 0;
        _mm512_mask_storeu_epi8(dst, mh, qops_clamp64(_mm512_maskz_loadu_epi8(mh, src), L, H, uns));
        const int k = (int)(((uintptr_t)(src + i) & 63) / 4);
        if (k == 0) {            /* lined up: plain loads (the next line may be past the end) */
            for (; i + 64 <= n; i += 64)
                _mm512_store_si512((void *)(dst + i),
                                   qops_clamp64(_mm512_load_si512((const void *)(src + i)), L, H, uns));
        } else {
            const __m512i idx = _mm512_add_epi32(
                _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                _mm512_set1_epi32(k));
            const uint8_t *s = src + i - 4 * k;                          /* its line */
            __m512i cur = _mm512_load_si512((const void *)s);
            for (; i + 64 <= n; i += 64, s += 64) {
                const __m512i nx = _mm512_load_si512((const void *)(s + 64));
                _mm512_store_si512((void *)(dst + i),
                                   qops_clamp64(_mm512_permutex2var_epi32(cur, idx, nx), L, H, uns));
                cur = nx;
            }
        }
        const __mmask64 mt = n - i >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (n - i)) - 1);
        _mm512_mask_storeu_epi8(dst + i, mt, qops_clamp64(_mm512_maskz_loadu_epi8(mt, src + i), L, H, uns));
        return 1;
    }
    #else
    static int qops_clamp_shifted(const uint8_t *src, uint8_t *dst, ptrdiff_t n, uint8_t lo,
                                  uint8_t hi, int uns) {
        (void)src; (void)dst; (void)n; (void)lo; (void)hi; (void)uns;
        return 0;
    }
    #endif
    /* (no restrict: relu_ runs it with src == dst) */
    #define QOPS_CLAMP_KERNEL(name, T)                                                        \
    static __attribute__((noinline)) void name##_run(const T* src, T* dst,                   \
                                                     ptrdiff_t n, T lo, T hi) {               \
        if (qops_clamp_shifted((const uint8_t *)src, (uint8_t *)dst, n, (uint8_t)lo,         \
                               (uint8_t)hi, (T)-1 > 0))                                       \
            return;                                                                           \
        for (ptrdiff_t i = 0; i < n; i++) {                                                   \
            T v = src[i];                                                                     \
            v = v > lo ? v : lo;                                                              \
            dst[i] = v < hi ? v : hi;                                                         \
        }                                                                                     \
    }                                                                                         \
    static void name(const T* src, T* dst, ptrdiff_t n, T lo, T hi, int threads) {            \
        if (threads <= 1) { name##_run(src, dst, n, lo, hi); return; }                        \
        ptrdiff_t chunk = qops_chunk64(n, threads);                                           \
        QOPS_CLAMP_OMP_FOR                                                                    \
        for (int t = 0; t < threads; t++) {                                                   \
            ptrdiff_t start = (ptrdiff_t)t * chunk;                                           \
            if (start < n)                                                                    \
                name##_run(src + start, dst + start, n - start < chunk ? n - start : chunk,   \
                           lo, hi);                                                           \
        }                                                                                     \
    }
    QOPS_CLAMP_KERNEL(qops_clamp_u8, uint8_t)
    QOPS_CLAMP_KERNEL(qops_clamp_s8, int8_t)
    """
    void qops_clamp_u8(const uint8_t* src, uint8_t* dst, Py_ssize_t n, uint8_t lo, uint8_t hi,
                       int threads) nogil
    void qops_clamp_s8(const int8_t* src, int8_t* dst, Py_ssize_t n, int8_t lo, int8_t hi,
                       int threads) nogil


def clamp_raw(q, lo, hi, out=None):
    """min(max(q, lo), hi) on raw values (relu, relu6, hardtanh, clamp).

    out: None, or a C-contiguous array of q's shape and dtype to write into (may be q itself).
    """
    if out is None:
        out = qops_empty(np, q.shape, q.dtype)
    q = np.ascontiguousarray(q)           # (0-d becomes 1-d: out keeps the shape)
    cdef Py_ssize_t n = q.size
    if n == 0:
        return out
    if q.dtype.kind == "u":       # (cheaper than `== np.uint8`, which builds a dtype)
        qops_clamp_u8(<const uint8_t*>qops_ptr(q), <uint8_t*>qops_ptr(out, True), n, lo, hi,
                      qops_threads_for(n, GRAIN))
    else:
        qops_clamp_s8(<const int8_t*>qops_ptr(q), <int8_t*>qops_ptr(out, True), n, lo, hi,
                      qops_threads_for(n, GRAIN))
    return out


def leaky_relu(q, scale, zero_point, negative_slope, out_inv_scale, out_zero_point):
    """Quantized leaky_relu: D_vec, x > 0 ? x : x*slope, Q_vec."""
    return _map(q, K_LEAKY, scale, zero_point, negative_slope, out_inv_scale, out_zero_point)


def hardsigmoid(q, scale, zero_point, out_inv_scale, out_zero_point):
    """Quantized hardsigmoid: D_vec, clamp(x + 3, 0, 6) / 6, Q_vec (fixed output qparams)."""
    return _map(q, K_HARDSIGMOID, scale, zero_point, 0.0, out_inv_scale, out_zero_point)


def hardswish(q, scale, zero_point, out_inv_scale, out_zero_point):
    """Quantized hardswish: D_vec, x * clamp(x + 3, 0, 6) / 6, Q_vec."""
    return _map(q, K_HARDSWISH, scale, zero_point, 0.0, out_inv_scale, out_zero_point)


def elu(q, scale, zero_point, alpha, out_inv_scale, out_zero_point):
    """Quantized elu: D_vec, x > 0 ? x : alpha * expm1(x), Q_vec."""
    return _map(q, K_ELU, scale, zero_point, alpha, out_inv_scale, out_zero_point)


def sigmoid(q, scale, zero_point, out_inv_scale, out_zero_point):
    """Quantized sigmoid: D_sc, 1 / (1 + exp(-x)), Q_vec."""
    return _map(q, K_SIGMOID, scale, zero_point, 0.0, out_inv_scale, out_zero_point)


def tanh(q, scale, zero_point, out_inv_scale, out_zero_point):
    """Quantized tanh: D_vec, tanh(x), Q_vec."""
    return _map(q, K_TANH, scale, zero_point, 0.0, out_inv_scale, out_zero_point)
