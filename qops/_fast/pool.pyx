# Pooling kernels (mirror of qops/_ref/pool.py): raw uint8/int8 (int32 for max pools) in
# (N, C, D, H, W), same dtype out. Max pools compare raw values; average pools sum exactly in
# int32 and requantize in float32 (rint half to even) with the reference's formulas.
#
# Layout: 8-bit max and average pools with W stride 1 or 2 run the vector kernels of
# pool_simd.h over contiguous ranges of output rows, one per thread. The scalar paths (int32,
# other strides, indices, huge windows) fold the taps of a window along D and H into a row
# buffer covering the whole padded input width (stride-1 loops over W that GCC vectorizes),
# then slide the W window over that buffer; their average pools run prange over the N*C*OD
# output planes, so the requantize loop runs over a whole plane. Adaptive max pools without
# indices fold a window's rows the same way. Buffers are per thread. Channels-last inputs
# (N, D, H, W, C) have kernels of their own: max_pool_cl, and the average pools of pool_cl.h.
# AVX-512 only: adaptive pools (and max and average pools whose W windows tile rows of <= 64
# bytes) run the short-row kernel of pool_simd.h; average pools with odd or power-of-two
# divisors requantize with integer tables (_int_tables) checked against the float formula for
# every reachable sum, and those with 3-tap stride-1 W windows run the 3-tap kernel.
import numpy as np
from cython.parallel cimport prange, parallel, threadid
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from qops._fast._common cimport *

DEF GRAIN = 32768         # input elements read per thread below which one thread is enough

cdef extern from "pool_simd.h" nogil:
    ctypedef struct qp_geom:
        Py_ssize_t D, H, W, OD, OH, OW
        Py_ssize_t kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW
    ctypedef struct qp_irq:
        const int16_t* t
        Py_ssize_t stride
        int sh
        int kind
    int QP_MAX_ROWS
    int qp_simd_ok(const qp_geom* g)
    int QP_ERR_NOMEM
    int qp_max_rows(const uint8_t* x, uint8_t* out, const qp_geom* g, Py_ssize_t g0,
                    Py_ssize_t g1, int sgn)
    int qp_avg_rows(const uint8_t* x, uint8_t* out, const qp_geom* g, Py_ssize_t g0,
                    Py_ssize_t g1, const int32_t* cls, const int32_t* zt, const float* mt,
                    float zp, int32_t qmin, int32_t qmax, int sgn, const qp_irq* iq)
    ctypedef struct qp_avgq:
        const int32_t* cls
        const int32_t* zt
        const float* mt
        float zp
        const qp_irq* iq
    int QP_AVG3
    void qp_avg3_rows(const uint8_t* x, uint8_t* out, const qp_geom* g, Py_ssize_t g0,
                      Py_ssize_t g1, const int32_t* cls, const qp_irq* iq, Py_ssize_t ow3,
                      int cmp, int sgn)
    int QP_SHORT
    void qp_fold_max128(const uint8_t* x, Py_ssize_t W, Py_ssize_t rows, uint8_t* buf, int first,
                        int sgn)
    int qp_cpu_vbmi()
    void qp_max_s2_rows(const uint8_t* x, uint8_t* out, const qp_geom* g, Py_ssize_t g0,
                        Py_ssize_t g1, int sgn)
    void qp_avg2x2_rows(const uint8_t* x, uint8_t* out, Py_ssize_t W, Py_ssize_t OW,
                        Py_ssize_t g0, Py_ssize_t g1, int sgn, const qp_irq* iq, Py_ssize_t cz)
    void qp_short_avg_rows(const uint8_t* x, uint8_t* out, Py_ssize_t D, Py_ssize_t H,
                           Py_ssize_t W, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                           const Py_ssize_t* lim, Py_ssize_t g0, Py_ssize_t g1, int sgn,
                           const qp_avgq* aq)
    void qp_short_rows(const uint8_t* x, uint8_t* out, Py_ssize_t D, Py_ssize_t H, Py_ssize_t W,
                       Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW, const Py_ssize_t* lim,
                       const float* recip, Py_ssize_t g0, Py_ssize_t g1, int avg, int sgn)


# the CPU has AVX-512 VBMI (byte permutes) and this build the AVX-512 kernels
cdef bint _VBMI = QP_SHORT and qp_cpu_vbmi()


def _use_vbmi(on=None):
    """Whether max pools use their VBMI kernel; `on` switches it (it stays off where the CPU
    lacks VBMI), for the tests to run both kernels. Returns the previous setting."""
    global _VBMI
    was = _VBMI
    if on is not None:
        _VBMI = bool(on) and QP_SHORT and qp_cpu_vbmi()
    return was


cdef void _s2_split(const uint8_t* x, uint8_t* out, const qp_geom* g, Py_ssize_t rows, int sgn,
                    int nt) noexcept nogil:
    cdef Py_ssize_t t
    if nt <= 1:
        qp_max_s2_rows(x, out, g, 0, rows, sgn)
        return
    for t in prange(nt, schedule="static", num_threads=nt):
        qp_max_s2_rows(x, out, g, rows * t // nt, rows * (t + 1) // nt, sgn)


cdef qp_geom _geom(x, out, kernel_size, stride, padding, dilation):
    cdef qp_geom g
    g.D, g.H, g.W = x.shape[2], x.shape[3], x.shape[4]
    g.OD, g.OH, g.OW = out.shape[2], out.shape[3], out.shape[4]
    g.kD, g.kH, g.kW = kernel_size
    g.sD, g.sH, g.sW = stride
    g.pD, g.pH, g.pW = padding
    g.dD, g.dH, g.dW = dilation
    return g


cdef int _simd_split(const uint8_t* x, uint8_t* out, const qp_geom* g, Py_ssize_t rows,
                     const int32_t* cls, const int32_t* zt, const float* mt, float zp,
                     int32_t qmin, int32_t qmax, int sgn, bint avg, int nt,
                     const qp_irq* iq=NULL) noexcept nogil:
    # one contiguous range of output rows per thread: the kernels' per-call cost stays tiny.
    # Returns 0, or the kernels' QP_ERR_* flags (or-ed) when some rows were not written.
    cdef Py_ssize_t t
    cdef int err = 0
    if nt <= 1:
        if avg:
            return qp_avg_rows(x, out, g, 0, rows, cls, zt, mt, zp, qmin, qmax, sgn, iq)
        return qp_max_rows(x, out, g, 0, rows, sgn)
    for t in prange(nt, schedule="static", num_threads=nt):
        if avg:
            err |= qp_avg_rows(x, out, g, rows * t // nt, rows * (t + 1) // nt, cls, zt, mt,
                               zp, qmin, qmax, sgn, iq)
        else:
            err |= qp_max_rows(x, out, g, rows * t // nt, rows * (t + 1) // nt, sgn)
    return err


cdef _raise_simd(int err):
    # a failed _simd_split: MemoryError when a mask table could not be allocated
    if err & QP_ERR_NOMEM:
        raise MemoryError()
    raise RuntimeError(f"pool: the vector kernel refused this geometry (status {err})")


cdef void _short_split(const uint8_t* x, uint8_t* out, Py_ssize_t D, Py_ssize_t H,
                       Py_ssize_t W, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                       const Py_ssize_t* lim, const float* recip, Py_ssize_t rows, int avg,
                       int sgn, int nt) noexcept nogil:
    # the short-row adaptive kernel over one contiguous range of output rows per thread
    cdef Py_ssize_t t
    if nt <= 1:
        qp_short_rows(x, out, D, H, W, OD, OH, OW, lim, recip, 0, rows, avg, sgn)
        return
    for t in prange(nt, schedule="static", num_threads=nt):
        qp_short_rows(x, out, D, H, W, OD, OH, OW, lim, recip, rows * t // nt,
                      rows * (t + 1) // nt, avg, sgn)


cdef bint _short_ok(const Py_ssize_t* lim, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                    Py_ssize_t W, bint avg) noexcept nogil:
    # the short-row kernel's limits: rows of one vector, 16-bit window sums of <= 256 taps
    cdef Py_ssize_t i, kd = 0, kh = 0, kw = 0
    if not QP_SHORT or W > 64 or OW > 32:
        return False
    for i in range(OD):
        kd = max(kd, lim[OD + i] - lim[i])
    for i in range(OH):
        kh = max(kh, lim[2 * OD + OH + i] - lim[2 * OD + i])
    for i in range(OW):
        kw = max(kw, lim[2 * OD + 2 * OH + OW + i] - lim[2 * OD + 2 * OH + i])
    return not avg or kd * kh * kw <= 256


cdef void _axis_counts(Py_ssize_t O, Py_ssize_t s, Py_ssize_t p, Py_ssize_t k, Py_ssize_t L,
                       int64_t* size, int64_t* pool) noexcept nogil:
    # as _avg_window of qops/_ref/pool.py: window start o*s - p, end min(start + k, L + p),
    # pool = end - start, size = end - start clipped to [0, L)
    cdef Py_ssize_t o, a, b
    for o in range(O):
        a = o * s - p
        b = min(a + k, L + p)
        pool[o] = b - a
        size[o] = min(b, L) - max(a, 0)


def _avg_tables(out_size, stride, padding, kernel_size, in_size, bint cip, int64_t div_o,
                int64_t zp):
    """Row classes of an average pool: cls[od*OH + oh] indexes rows of zt = size*zp and
    mt = f32(1.0 / div) over ow; consecutive output rows with the same D*H window counts share
    a class (only edge rows differ), so the tables stay small and cost O(classes * OW)."""
    cdef Py_ssize_t OD = out_size[0], OH = out_size[1], OW = out_size[2]
    cdef Py_ssize_t od, oh, ow, n = 0, r
    cdef int64_t vs, vp, ls = -1, lp = -1, dv
    cdef int64_t* cnt = <int64_t*>malloc(2 * (OD + OH + OW) * sizeof(int64_t))
    if cnt == NULL:
        raise MemoryError()
    cdef int64_t* ds = cnt
    cdef int64_t* dp = cnt + OD
    cdef int64_t* hs = cnt + 2 * OD
    cdef int64_t* hp = hs + OH
    cdef int64_t* ws = hs + 2 * OH
    cdef int64_t* wp = ws + OW
    _axis_counts(OD, stride[0], padding[0], kernel_size[0], in_size[0], ds, dp)
    _axis_counts(OH, stride[1], padding[1], kernel_size[1], in_size[1], hs, hp)
    _axis_counts(OW, stride[2], padding[2], kernel_size[2], in_size[2], ws, wp)
    cls = np.empty(OD * OH, np.int32)
    cdef int32_t[::1] c = cls
    for od in range(OD):
        for oh in range(OH):
            vs = ds[od] * hs[oh]
            vp = dp[od] * hp[oh]
            if vs != ls or vp != lp:
                n += 1
                ls, lp = vs, vp
            c[od * OH + oh] = <int32_t>(n - 1)
    # 32 spare entries past the end: the vector requantize loads whole 16-lane rows
    zt = np.zeros(n * OW + 32, np.int32)[:n * OW].reshape(n, OW)
    mt = np.zeros(n * OW + 32, np.float32)[:n * OW].reshape(n, OW)
    sz = np.empty((n, OW), np.int64)
    dvs = np.empty((n, OW), np.int64)
    cdef int32_t[:, ::1] z = zt
    cdef float[:, ::1] m = mt
    cdef int64_t[:, ::1] szv = sz
    cdef int64_t[:, ::1] dvv = dvs
    r = -1
    ls = lp = -1
    for od in range(OD):
        for oh in range(OH):
            vs = ds[od] * hs[oh]
            vp = dp[od] * hp[oh]
            if vs == ls and vp == lp:
                continue
            ls, lp = vs, vp
            r += 1
            for ow in range(OW):
                dv = div_o if div_o else (vp * wp[ow] if cip else vs * ws[ow])
                z[r, ow] = <int32_t>(vs * ws[ow] * zp)
                m[r, ow] = <float>(1.0 / <double>dv)          # f32(1.0 / div)
                szv[r, ow] = vs * ws[ow]
                dvv[r, ow] = dv
    free(cnt)
    return cls, zt, mt, sz, dvs


def _int_tables(sz, dvs, int64_t zp, bint sgn):
    """Integer requantize tables (qp_irq of pool_simd.h) equal to the float formula
    clampQ(rint(f32(f32(s - size*zp) * f32(1/div)) + f32(zp))) for every reachable window sum
    s, checked here sum by sum: (int16 table (3, entries + 64), shift, kind), or None (the
    float path runs).

    kind 0, odd divisors: the exact quotient never ends in .5, so rounding to nearest is
    floor((s - size*zp + (div-1)/2) / div), and floor(x / div) is
    mulhi(x, ceil(2**(16+sh) / div)) >> sh for the x that occur.
    kind 1, divisors 2**k: f32(1/div) is exact and so is the float sum, so the formula is
    t / 2**k rounded half to even with t = s - size*zp + div*zp, in shifts (see qp_irq).
    Other even divisors have ties the float products round either way: None."""
    cdef int64_t qmin = -128 if sgn else 0, qmax = 127 if sgn else 255
    pairs = sorted(set(zip(sz.ravel().tolist(), dvs.ravel().tolist())))
    if any(d <= 0 for _, d in pairs):
        return None
    if all((d & (d - 1)) == 0 for _, d in pairs):
        return _pow2_tables(sz, dvs, pairs, zp, qmin, qmax)
    if any(d % 2 == 0 for _, d in pairs):
        return None
    for sh in range(8):
        params = {}
        for size, d in pairs:
            lo, hi, z = qmin * size, qmax * size, size * zp
            a = lo - z + (d - 1) // 2
            b = a % d
            M = -(-(1 << (16 + sh)) // d)
            e = zp - (b - a) // d
            if M > 0xFFFF or hi - lo + b > 0xFFFF or not -32768 <= e <= 32767:
                break
            c = (b - lo) & 0xFFFF
            s = np.arange(lo, hi + 1, dtype=np.int64)
            ref = _float_ref(s, size, d, zp, qmin, qmax)
            v = ((((s & 0xFFFF) + c) & 0xFFFF) * M >> (16 + sh)) + e
            v = ((v + 32768) & 0xFFFF) - 32768                      # int16 lanes
            if not np.array_equal(np.clip(v, qmin, qmax), ref):
                break
            params[size, d] = (c, M, e & 0xFFFF)
        else:
            return _table(sz, dvs, params), sh, 0
    return None


def _float_ref(s, int64_t size, int64_t d, int64_t zp, int64_t qmin, int64_t qmax):
    # the reference's formula for window sums s (int64 array)
    ref = np.rint((s - size * zp).astype(np.float32) * np.float32(1.0 / d) + np.float32(zp))
    return np.clip(ref, qmin, qmax)


def _table(sz, dvs, params):
    # (3, entries + 64) int16: per output the three values of its (size, div) pair
    tab = np.zeros((3, sz.size + 64), np.uint16)
    for i, (size, d) in enumerate(zip(sz.ravel().tolist(), dvs.ravel().tolist())):
        tab[:, i] = params[size, d]
    return tab.view(np.int16)


def _pow2_tables(sz, dvs, pairs, int64_t zp, int64_t qmin, int64_t qmax):
    """kind 1 tables (c, k, h): x = s + c, q = (x + h + ((x >> k) & min(k, 1))) >> k in int16
    lanes (arithmetic shifts), c = (div - size)*zp, h = 2**(k-1) - 1 (0 for k = 0): round
    half to even of x / 2**k; checked for every reachable sum, None if any differs."""
    params = {}
    for size, d in pairs:
        k = d.bit_length() - 1
        c = (d - size) * zp
        h = (1 << k >> 1) - 1 if k else 0
        s = np.arange(qmin * size, qmax * size + 1, dtype=np.int64)
        x = s + c
        # every intermediate must be the true value in int16 lanes (sums wrap modulo 2**16)
        if x.min() < -32768 or x.max() + h + 1 > 32767:
            return None
        v = (x + h + ((x >> k) & min(k, 1))) >> k
        if not np.array_equal(np.clip(v, qmin, qmax), _float_ref(s, size, d, zp, qmin, qmax)):
            return None
        params[size, d] = (c & 0xFFFF, k, h)
    return _table(sz, dvs, params), 0, 1


# -- max pool -----------------------------------------------------------------------------

cdef inline void _hmax(const qint_t* v, qint_t* o, Py_ssize_t OW, Py_ssize_t kW, Py_ssize_t sW,
                       Py_ssize_t dW) noexcept nogil:
    # Sliding max along W; strides 1 and 2 get loops with constant strides GCC vectorizes.
    cdef Py_ssize_t ow, k
    cdef const qint_t* vk
    cdef qint_t a, b
    if sW == 1:
        for ow in range(OW):
            o[ow] = v[ow]
        for k in range(1, kW):
            vk = v + k * dW
            for ow in range(OW):
                a = o[ow]
                b = vk[ow]
                o[ow] = a if a > b else b
    elif sW == 2:
        for ow in range(OW):
            o[ow] = v[2 * ow]
        for k in range(1, kW):
            vk = v + k * dW
            for ow in range(OW):
                a = o[ow]
                b = vk[2 * ow]
                o[ow] = a if a > b else b
    else:
        for ow in range(OW):
            o[ow] = v[sW * ow]
        for k in range(1, kW):
            vk = v + k * dW
            for ow in range(OW):
                a = o[ow]
                b = vk[sW * ow]
                o[ow] = a if a > b else b


cdef inline void _fold_max(qint_t* buf, const qint_t* src, Py_ssize_t W, bint first) noexcept nogil:
    # buf = src (the window's first row) or max(buf, src): the vertical half of a max window.
    cdef Py_ssize_t w
    cdef qint_t a, b
    if first:
        memcpy(buf, src, W * sizeof(qint_t))
        return
    for w in range(W):
        a = buf[w]
        b = src[w]
        buf[w] = a if a > b else b


cdef void _max_rows(const qint_t[:, :, :, :, ::1] x, qint_t[:, :, :, :, ::1] out,
                    Py_ssize_t kD, Py_ssize_t kH, Py_ssize_t kW, Py_ssize_t sD, Py_ssize_t sH,
                    Py_ssize_t sW, Py_ssize_t pD, Py_ssize_t pH, Py_ssize_t pW, Py_ssize_t dD,
                    Py_ssize_t dH, Py_ssize_t dW, Py_ssize_t Wp, qint_t lowest,
                    int nthreads) noexcept nogil:
    cdef Py_ssize_t C = x.shape[1], D = x.shape[2], H = x.shape[3], W = x.shape[4]
    cdef Py_ssize_t OD = out.shape[2], OH = out.shape[3], OW = out.shape[4]
    cdef Py_ssize_t rows = out.shape[0] * C * OD * OH
    cdef Py_ssize_t r, i, w, kd, kh, idd, ih, n, c, od, oh, plane
    cdef int first
    cdef qint_t* vbuf = NULL
    cdef qint_t* vrow = NULL
    i = 0
    with parallel(num_threads=nthreads):
        # padded slots stay at the dtype's lowest value, so they never win a max
        vbuf = <qint_t*>malloc(Wp * sizeof(qint_t))
        for i in range(Wp):
            vbuf[i] = lowest
        vrow = vbuf + pW
        for r in prange(rows, schedule="static"):
            oh = r % OH
            od = (r // OH) % OD
            plane = r // (OH * OD)
            n = plane // C
            c = plane % C
            first = 1
            for kd in range(kD):
                idd = od * sD - pD + kd * dD
                if idd < 0 or idd >= D:
                    continue
                for kh in range(kH):
                    ih = oh * sH - pH + kh * dH
                    if ih < 0 or ih >= H:
                        continue
                    _fold_max(vrow, &x[n, c, idd, ih, 0], W, first)
                    first = 0
            if first:
                for w in range(W):
                    vrow[w] = lowest
            _hmax(vbuf, &out[n, c, od, oh, 0], OW, kW, sW, dW)
        free(vbuf)


cdef void _max_indices(const qint_t[:, :, :, :, ::1] x, qint_t[:, :, :, :, ::1] out,
                       int64_t[:, :, :, :, ::1] index, Py_ssize_t kD, Py_ssize_t kH,
                       Py_ssize_t kW, Py_ssize_t sD, Py_ssize_t sH, Py_ssize_t sW, Py_ssize_t pD,
                       Py_ssize_t pH, Py_ssize_t pW, Py_ssize_t dD, Py_ssize_t dH, Py_ssize_t dW,
                       qint_t lowest, int nthreads) noexcept nogil:
    # With indices: a plain scan of each window in (d, h, w) order, keeping the first maximum.
    cdef Py_ssize_t C = x.shape[1], D = x.shape[2], H = x.shape[3], W = x.shape[4]
    cdef Py_ssize_t OD = out.shape[2], OH = out.shape[3], OW = out.shape[4]
    cdef Py_ssize_t rows = out.shape[0] * C * OD * OH
    cdef Py_ssize_t r, ow, kd, kh, kw, idd, ih, iw, n, c, od, oh, plane, best_i
    cdef int found
    cdef qint_t best, v
    for r in prange(rows, schedule="static", num_threads=nthreads):
        oh = r % OH
        od = (r // OH) % OD
        plane = r // (OH * OD)
        n = plane // C
        c = plane % C
        for ow in range(OW):
            best = lowest
            best_i = 0
            found = 0
            for kd in range(kD):
                idd = od * sD - pD + kd * dD
                if idd < 0 or idd >= D:
                    continue
                for kh in range(kH):
                    ih = oh * sH - pH + kh * dH
                    if ih < 0 or ih >= H:
                        continue
                    for kw in range(kW):
                        iw = ow * sW - pW + kw * dW
                        if iw < 0 or iw >= W:
                            continue
                        v = x[n, c, idd, ih, iw]
                        if found == 0 or v > best:
                            best = v
                            best_i = (idd * H + ih) * W + iw
                            found = 1
            out[n, c, od, oh, ow] = best
            index[n, c, od, oh, ow] = best_i


cdef Py_ssize_t* _short_lim(const qp_geom* gp) noexcept nogil:
    # clipped D and H windows and uniform W windows in the lim layout of the adaptive pools
    cdef qp_geom g = gp[0]
    cdef Py_ssize_t n = 2 * (g.OD + g.OH + g.OW), i, a
    cdef Py_ssize_t* lim = <Py_ssize_t*>malloc(n * sizeof(Py_ssize_t))
    if lim == NULL:
        return NULL
    for i in range(g.OD):
        a = i * g.sD - g.pD
        lim[i] = max(a, 0)
        lim[g.OD + i] = min(a + g.kD, g.D)
    for i in range(g.OH):
        a = i * g.sH - g.pH
        lim[2 * g.OD + i] = max(a, 0)
        lim[2 * g.OD + g.OH + i] = min(a + g.kH, g.H)
    for i in range(g.OW):
        lim[2 * (g.OD + g.OH) + i] = i * g.kW
        lim[2 * (g.OD + g.OH) + g.OW + i] = (i + 1) * g.kW
    return lim


cdef object _max_short(x, out, qp_geom g, bint sgn, int nt):
    cdef Py_ssize_t* lim = _short_lim(&g)
    if lim == NULL:
        raise MemoryError()
    cdef const uint8_t* xp = <const uint8_t*>qops_ptr(x)
    cdef uint8_t* op = <uint8_t*>qops_ptr(out, True)
    cdef Py_ssize_t rows = out.size // g.OW
    with nogil:
        _short_split(xp, op, g.D, g.H, g.W, g.OD, g.OH, g.OW, lim, NULL, rows, False, sgn, nt)
    free(lim)
    return out


cdef extern from "pool_cl.h" nogil:
    ctypedef struct qpc_mrow:
        Py_ssize_t W, C, OW, sW, pW, kW, dW, nrows
    void qpc_max_row_u8(const uint8_t* const* rows, uint8_t* out, const qpc_mrow* g)
    void qpc_max_row_s8(const int8_t* const* rows, int8_t* out, const qpc_mrow* g)
    void qpc_max_row_s32(const int32_t* const* rows, int32_t* out, const qpc_mrow* g)


cdef inline void _max_cl_row(const qint_t* const* rows, qint_t* out, Py_ssize_t W,
                             Py_ssize_t C, Py_ssize_t OW, int sW, int pW, int kW, int dW,
                             Py_ssize_t nr) noexcept nogil:
    # the row's arguments in a struct on this call's stack: one per thread (a struct filled
    # inside a prange body is shared by the threads: issue 19 #3)
    cdef qpc_mrow g
    g.W = W
    g.C = C
    g.OW = OW
    g.sW = sW
    g.pW = pW
    g.kW = kW
    g.dW = dW
    g.nrows = nr
    if qint_t is uint8_t:
        qpc_max_row_u8(<const uint8_t* const*>rows, out, &g)
    elif qint_t is int8_t:
        qpc_max_row_s8(<const int8_t* const*>rows, out, &g)
    else:
        qpc_max_row_s32(<const int32_t* const*>rows, out, &g)


cdef void _max_cl(const qint_t* x, qint_t* out, Py_ssize_t N, Py_ssize_t D, Py_ssize_t H,
                  Py_ssize_t W, Py_ssize_t C, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                  int kD, int kH, int kW, int sD, int sH, int sW, int pD, int pH, int pW,
                  int dD, int dH, int dW, int nt) noexcept nogil:
    # One output row (n, od, oh) per work item: the window's valid input rows (D and H taps)
    # are listed, then pool_cl.h takes each pixel's max over them in 64-byte registers
    # (8x64x56x56, 3x3/2, 1 thread: 134 -> 89 us, against 130 us when each tap's max went
    # through an output row in memory).
    cdef Py_ssize_t r, n, od, oh, i, j, id_, ih, nr
    cdef const qint_t** rows = NULL
    with parallel(num_threads=nt):
        rows = <const qint_t**>malloc(kD * kH * sizeof(qint_t*))
        for r in prange(N * OD * OH, schedule="static"):
            n = r // (OD * OH)
            od = r // OH - n * OD
            oh = r - (n * OD + od) * OH
            nr = 0
            for i in range(kD):
                id_ = od * sD - pD + i * dD
                if id_ < 0 or id_ >= D:
                    continue
                for j in range(kH):
                    ih = oh * sH - pH + j * dH
                    if 0 <= ih < H:
                        rows[nr] = x + ((n * D + id_) * H + ih) * W * C
                        nr = nr + 1
            _max_cl_row(rows, out + r * OW * C, W, C, OW, sW, pW, kW, dW, nr)
        free(rows)


def max_pool_cl(x, kernel_size, stride, padding, dilation, out_size):
    """max_pool (without indices) of channels-last data: x (N, D, H, W, C) -> (N, OD, OH, OW, C)."""
    x = np.ascontiguousarray(x)
    (kD, kH, kW), (sD, sH, sW) = kernel_size, stride
    (pD, pH, pW), (dD, dH, dW) = padding, dilation
    N, D, H, W, C = x.shape
    OD, OH, OW = out_size
    out = qops_empty(np, (N, OD, OH, OW, C), x.dtype)
    if out.size == 0:
        return out
    nt = qops_threads_for(x.size + out.size * kW, GRAIN)
    cdef const uint8_t* xp = <const uint8_t*>qops_ptr(x)
    cdef uint8_t* op = <uint8_t*>qops_ptr(out, True)
    if x.dtype == np.uint8:
        _max_cl[uint8_t](xp, op, N, D, H, W, C, OD, OH, OW, kD, kH, kW, sD, sH, sW, pD, pH, pW,
                         dD, dH, dW, nt)
    elif x.dtype == np.int8:
        _max_cl[int8_t](<const int8_t*>xp, <int8_t*>op, N, D, H, W, C, OD, OH, OW, kD, kH, kW,
                        sD, sH, sW, pD, pH, pW, dD, dH, dW, nt)
    else:
        _max_cl[int32_t](<const int32_t*>xp, <int32_t*>op, N, D, H, W, C, OD, OH, OW, kD, kH,
                         kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, nt)
    return out


def max_pool(x, kernel_size, stride, padding, dilation, out_size, with_indices):
    """Max of raw values over the valid (non-padded) taps of each dilated window."""
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    (kD, kH, kW), (sD, sH, sW) = kernel_size, stride
    (pD, pH, pW), (dD, dH, dW) = padding, dilation
    shape = x.shape[:2] + tuple(out_size)
    out = qops_empty(np, shape, x.dtype)
    cdef int isz = x.itemsize
    cdef bint sgn = x.dtype.kind == "i"
    OW = shape[4]
    nt = qops_threads_for(out.size * kD * kH * max(kW, 1) if with_indices
                          else x.size + out.size * kW, GRAIN)
    if out.size == 0:
        return (out, np.zeros(shape, np.int64)) if with_indices else out
    cdef qp_geom g = _geom(x, out, kernel_size, stride, padding, dilation)
    if (not with_indices and isz == 1 and QP_SHORT and dD == dH == dW == 1 and pW == 0
            and sW == kW and kW in (2, 4, 8) and OW * kW == x.shape[4] <= 64):
        # windows tiling short rows (3-d 2x2x2 pools on 56-wide planes): the short-row
        # kernel reduces each row in place, with no column walk over several planes
        return _max_short(x, out, g, sgn, nt)
    if (not with_indices and isz == 1 and _VBMI and sW == 2 and kW <= 3 and dH == dW == 1
            and kD == sD == 1 and pD == 0 and x.shape[4] <= 128 and OW <= 64):
        # stride-2 columns of rows up to two vectors (3x3/2 and 2x2/2 on 112-wide planes)
        _s2_split(<const uint8_t*>qops_ptr(x), <uint8_t*>qops_ptr(out, True), &g,
                  out.size // OW, sgn, nt)
        return out
    if (not with_indices and isz == 1 and qp_simd_ok(&g)
            and kD * kH <= QP_MAX_ROWS and kW <= QP_MAX_ROWS):
        err = _simd_split(<const uint8_t*>qops_ptr(x), <uint8_t*>qops_ptr(out, True), &g,
                          out.size // OW, NULL, NULL, NULL, 0, 0, 0, sgn, False, nt)
        if err:
            _raise_simd(err)
        return out
    lo = -(1 << 31) if isz == 4 else (-128 if sgn else 0)
    Wp = max(x.shape[4] + 2 * pW, (OW - 1) * sW + (kW - 1) * dW + 1)
    if with_indices:
        index = np.empty(shape, dtype=np.int64)
        if x.dtype == np.uint8:
            _max_indices[uint8_t](x, out, index, kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, lo, nt)
        elif x.dtype == np.int8:
            _max_indices[int8_t](x, out, index, kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, lo, nt)
        else:
            _max_indices[int32_t](x, out, index, kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, lo, nt)
        return out, index
    if x.dtype == np.uint8:
        _max_rows[uint8_t](x, out, kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, Wp, lo, nt)
    elif x.dtype == np.int8:
        _max_rows[int8_t](x, out, kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, Wp, lo, nt)
    else:
        _max_rows[int32_t](x, out, kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, Wp, lo, nt)
    return out


# -- average pool -------------------------------------------------------------------------

cdef int _avg_planes(const q8_t[:, :, :, :, ::1] x, q8_t[:, :, :, :, ::1] out,
                     Py_ssize_t kD, Py_ssize_t kH, Py_ssize_t kW, Py_ssize_t sD, Py_ssize_t sH,
                     Py_ssize_t sW, Py_ssize_t pD, Py_ssize_t pH, Py_ssize_t pW, Py_ssize_t Wp,
                     const float[:, :, ::1] mult, const int32_t[:, :, ::1] szp, int32_t zp,
                     float qmin, float qmax, int nthreads) noexcept nogil:
    # One (n, c, od) output plane per iteration: window sums of every row go to a plane-sized
    # buffer, then one long requantize loop over the plane (rows alone are too short to fill
    # 512-bit vectors). mult[od, oh, ow] = f32(1/div) and szp = size*zp are prepared per call.
    # Each thread's row and plane buffers are slots of one block allocated before the parallel
    # region (slots rounded to 64 bytes); returns -1, nothing written, if it cannot be had.
    cdef Py_ssize_t C = x.shape[1], D = x.shape[2], H = x.shape[3], W = x.shape[4]
    cdef Py_ssize_t OD = out.shape[2], OH = out.shape[3], OW = out.shape[4]
    cdef Py_ssize_t planes = out.shape[0] * C * OD, area = OH * OW
    cdef Py_ssize_t p, i, j, w, ow, k, idd, ih, n, c, od, oh, d0, d1, h0, h1
    cdef int first
    cdef int32_t* vbuf = NULL
    cdef int32_t* vrow = NULL
    cdef int32_t* sums = NULL
    cdef int32_t* hs
    cdef const q8_t* src
    cdef const int32_t* vk
    cdef const float* m
    cdef const int32_t* z
    cdef q8_t* o
    cdef float zpf = <float>zp, t
    cdef Py_ssize_t wpr = (Wp + 15) & ~(<Py_ssize_t>15)
    cdef Py_ssize_t slot = wpr + ((area + 15) & ~(<Py_ssize_t>15))
    cdef int nslots = nthreads if nthreads > 1 else 1
    cdef int tid
    cdef int32_t* block = <int32_t*>malloc(nslots * slot * sizeof(int32_t))
    if block == NULL:
        return -1
    i = 0
    with parallel(num_threads=nslots):
        tid = threadid()
        vbuf = block + tid * slot
        sums = vbuf + wpr
        for i in range(Wp):
            vbuf[i] = 0          # padding adds nothing to a sum
        vrow = vbuf + pW
        for p in prange(planes, schedule="static"):
            od = p % OD
            c = (p // OD) % C
            n = p // (OD * C)
            d0 = max(od * sD - pD, 0)
            d1 = min(od * sD - pD + kD, D)
            for oh in range(OH):
                h0 = max(oh * sH - pH, 0)
                h1 = min(oh * sH - pH + kH, H)
                first = 1
                for idd in range(d0, d1):
                    for ih in range(h0, h1):
                        src = &x[n, c, idd, ih, 0]
                        if first:
                            for w in range(W):
                                vrow[w] = src[w]
                            first = 0
                        else:
                            for w in range(W):
                                vrow[w] = vrow[w] + src[w]
                hs = sums + oh * OW
                for ow in range(OW):
                    hs[ow] = vbuf[sW * ow]
                for k in range(1, kW):
                    vk = vbuf + k
                    if sW == 1:
                        for ow in range(OW):
                            hs[ow] = hs[ow] + vk[ow]
                    elif sW == 2:
                        for ow in range(OW):
                            hs[ow] = hs[ow] + vk[2 * ow]
                    else:
                        for ow in range(OW):
                            hs[ow] = hs[ow] + vk[sW * ow]
            o = &out[n, c, od, 0, 0]
            m = &mult[od, 0, 0]
            z = &szp[od, 0, 0]
            for j in range(area):
                # Q_leg with m = f32(1/div): zero point added before rounding
                t = <float>(sums[j] - z[j]) * m[j]
                o[j] = <q8_t><int32_t>qops_clampf(qops_rintf(t + zpf), qmin, qmax)
    free(block)
    return 0


cdef void _short_avg_split(const uint8_t* x, uint8_t* out, const qp_geom* g,
                           const Py_ssize_t* lim, Py_ssize_t rows, int sgn, const qp_avgq* aq,
                           int nt) noexcept nogil:
    # the short-row kernel of pair-tiling average pools, one range of output rows per thread
    cdef Py_ssize_t t
    if nt <= 1:
        qp_short_avg_rows(x, out, g.D, g.H, g.W, g.OD, g.OH, g.OW, lim, 0, rows, sgn, aq)
        return
    for t in prange(nt, schedule="static", num_threads=nt):
        qp_short_avg_rows(x, out, g.D, g.H, g.W, g.OD, g.OH, g.OW, lim, rows * t // nt,
                          rows * (t + 1) // nt, sgn, aq)


cdef void _avg2x2_split(const uint8_t* x, uint8_t* out, Py_ssize_t W, Py_ssize_t OW,
                        Py_ssize_t rows, int sgn, const qp_irq* iq, Py_ssize_t cz,
                        int nt) noexcept nogil:
    # the flat 2x2 kernel, one contiguous range of output rows per thread
    cdef Py_ssize_t t
    if nt <= 1:
        qp_avg2x2_rows(x, out, W, OW, 0, rows, sgn, iq, cz)
        return
    for t in prange(nt, schedule="static", num_threads=nt):
        qp_avg2x2_rows(x, out, W, OW, rows * t // nt, rows * (t + 1) // nt, sgn, iq, cz)


cdef void _avg3_split(const uint8_t* x, uint8_t* out, const qp_geom* g, Py_ssize_t rows,
                      const int32_t* cls, const qp_irq* iq, Py_ssize_t ow3, int cmp, int sgn,
                      int nt) noexcept nogil:
    # the 3-tap stride-1 kernel, one contiguous range of output rows per thread
    cdef Py_ssize_t t
    if nt <= 1:
        qp_avg3_rows(x, out, g, 0, rows, cls, iq, ow3, cmp, sgn)
        return
    for t in prange(nt, schedule="static", num_threads=nt):
        qp_avg3_rows(x, out, g, rows * t // nt, rows * (t + 1) // nt, cls, iq, ow3, cmp, sgn)


def _split_tables(tab, Py_ssize_t classes, Py_ssize_t OW):
    """The integer tables de-interleaved for the 3-tap kernel: each class row padded to whole
    64-output chunks, each chunk's 32 even outputs first, then its 32 odd ones. Returns the
    table, a class row's length and 1 if the rows keep only their first, one inner and last
    chunk (more than three chunks whose inner ones are all equal: long 1-d rows), else 0."""
    cdef Py_ssize_t nc = (OW + 63) // 64
    t = np.zeros((3, classes, nc * 64), np.int16)
    t[:, :, :OW] = tab[:, :classes * OW].reshape(3, classes, OW)
    t = t.reshape(3, classes, nc, 32, 2).transpose(0, 1, 2, 4, 3)
    t = t.reshape(3, classes, nc, 64)
    cmp = nc > 3 and bool((t[:, :, 1:nc - 1] == t[:, :, 1:2]).all())
    if cmp:
        t = t[:, :, [0, 1, nc - 1]]
    n = t.shape[1] * t.shape[2] * 64
    out = np.zeros((3, n + 64), np.int16)
    out[:, :n] = t.reshape(3, n)
    return out, t.shape[2] * 64, int(cmp)


_TABLES = {}


def avg_pool(x, kernel_size, stride, padding, out_size, count_include_pad, divisor_override,
             zero_point):
    """Average pool: exact integer window sums, requantized as PyTorch's NCHW avg_pool2d."""
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    (kD, kH, kW), (sD, sH, sW), (pD, pH, pW) = kernel_size, stride, padding
    shape = x.shape[:2] + tuple(out_size)
    out = qops_empty(np, shape, x.dtype)
    if out.size == 0:
        return out
    cdef bint sgn = x.dtype.kind == "i"
    cdef int32_t qmin = -128 if sgn else 0
    cdef int32_t qmax = 127 if sgn else 255
    OW = shape[4]
    # the tables depend on the geometry and zero point only: models call the same pool often
    key = (tuple(out_size), tuple(stride), tuple(padding), tuple(kernel_size), x.shape[2:],
           bool(count_include_pad), divisor_override, zero_point, sgn)
    tabs = _TABLES.get(key)
    if tabs is None:
        cls, zt, mt, sz, dvs = _avg_tables(out_size, stride, padding, kernel_size, x.shape[2:],
                                           count_include_pad, divisor_override, zero_point)
        it = None
        if QP_SHORT and kD * kH * kW <= 256:
            # only the AVX-512 kernels use them (QP_SHORT: this build has those)
            it = _int_tables(sz, dvs, zero_point, sgn)
        t3 = None
        if it is not None and QP_AVG3 and kW == 3 and sW == 1:
            t3 = _split_tables(it[0], zt.shape[0], OW)
        # one divisor for every window (the flat 2x2 kernel needs one table row)
        uniform = bool((cls == cls[0]).all())
        tabs = cls, zt, mt, it, t3, uniform
        if len(_TABLES) >= 64:
            _TABLES.clear()
        _TABLES[key] = tabs
    cls, zt, mt, it, t3, uniform = tabs
    cdef qp_irq iq
    iq.t = NULL
    if it is not None:
        iq.t = <const int16_t*>qops_ptr(it[0])
        iq.stride = it[0].shape[1]
        iq.sh = it[1]
        iq.kind = it[2]
    nt = qops_threads_for(x.size * kD + out.size * kW, GRAIN)
    cdef qp_geom g = _geom(x, out, kernel_size, stride, padding, (1, 1, 1))
    cdef qp_avgq aq
    cdef Py_ssize_t* lim
    cdef const uint8_t* xp
    cdef uint8_t* op
    cdef Py_ssize_t rows
    cdef int ntc
    cdef Py_ssize_t ow3
    cdef int cmp
    cdef const int32_t* cp
    cdef Py_ssize_t cz, w_in, w_out
    if (QP_SHORT and it is not None and kD == sD == 1 and kH == sH == kW == sW == 2
            and pH == pW == 0 and OW * 2 == x.shape[4] <= 64 and shape[3] * 2 == x.shape[3]
            and x.shape[2] == 1 and uniform):
        # 2-d 2x2 stride-2 pools on short rows, every window full: a flat stream of row pairs
        xp = <const uint8_t*>qops_ptr(x)
        op = <uint8_t*>qops_ptr(out, True)
        rows = out.size // OW
        ntc = nt
        cz = <Py_ssize_t>cls[0] * OW
        w_in = x.shape[4]
        w_out = OW
        with nogil:
            _avg2x2_split(xp, op, w_in, w_out, rows, sgn, &iq, cz, ntc)
        return out
    if (QP_SHORT and kW == sW == 2 and pW == 0 and OW * 2 == x.shape[4] <= 64
            and kD * kH <= 128):
        # W windows of pairs tiling short rows (2x2 stride-2 pools on 56-wide planes, 3-d
        # 2x2x2): each input row is reduced in place by the short-row kernel
        lim = _short_lim(&g)
        if lim == NULL:
            raise MemoryError()
        aq.cls = <const int32_t*>qops_ptr(cls)
        aq.zt = <const int32_t*>qops_ptr(zt)
        aq.mt = <const float*>qops_ptr(mt)
        aq.zp = <float>zero_point
        aq.iq = &iq
        xp = <const uint8_t*>qops_ptr(x)
        op = <uint8_t*>qops_ptr(out, True)
        rows = out.size // OW
        ntc = nt
        with nogil:
            _short_avg_split(xp, op, &g, lim, rows, sgn, &aq, ntc)
        free(lim)
        return out
    if (t3 is not None and kD * kH <= QP_MAX_ROWS and kH <= 64 and kD * kH * 3 <= 256):
        # 3-tap stride-1 windows (3x3 stride-1 pools, 1-d 3-tap pools): 64 outputs per
        # chunk from three loads (see pool_simd.h)
        iq.t = <const int16_t*>qops_ptr(t3[0])
        iq.stride = t3[0].shape[1]
        xp = <const uint8_t*>qops_ptr(x)
        op = <uint8_t*>qops_ptr(out, True)
        rows = out.size // OW
        ntc = nt
        ow3 = t3[1]
        cmp = t3[2]
        cp = <const int32_t*>qops_ptr(cls)
        with nogil:
            _avg3_split(xp, op, &g, rows, cp, &iq, ow3, cmp, sgn, ntc)
        return out
    if qp_simd_ok(&g) and kD * kH <= QP_MAX_ROWS and kW <= QP_MAX_ROWS and kD * kH * kW <= 256:
        # 16-bit window sums are exact up to 256 taps (see pool_simd.h)
        err = _simd_split(<const uint8_t*>qops_ptr(x), <uint8_t*>qops_ptr(out, True), &g,
                          out.size // OW, <const int32_t*>qops_ptr(cls),
                          <const int32_t*>qops_ptr(zt), <const float*>qops_ptr(mt),
                          <float>zero_point, qmin, qmax, sgn, True, nt, &iq)
        if err:
            _raise_simd(err)
        return out
    Wp = max(x.shape[4] + 2 * pW, (OW - 1) * sW + kW)
    mult = mt[cls].reshape(shape[2:])
    szp = zt[cls].reshape(shape[2:])
    if not sgn:
        err = _avg_planes[uint8_t](x, out, kD, kH, kW, sD, sH, sW, pD, pH, pW, Wp, mult, szp,
                                   zero_point, qmin, qmax, nt)
    else:
        err = _avg_planes[int8_t](x, out, kD, kH, kW, sD, sH, sW, pD, pH, pW, Wp, mult, szp,
                                  zero_point, qmin, qmax, nt)
    if err:
        raise MemoryError()
    return out


# -- adaptive pools -----------------------------------------------------------------------

cdef extern from *:
    """
    #include <stdint.h>
    #include <stddef.h>
    #include <math.h>
    #if defined(__AVX2__) || defined(__AVX512BW__)
    #include <immintrin.h>
    #endif
    #include "reduce_sum.h"
    /* acc[w] (=|+=) row[w] over a row of n raw values (restrict: no aliasing check). */
    /* 8 values at a time (AVX2 widening loads) so short rows (W = 28) vectorize too: GCC's
     * own vectorization of a widening loop needs a whole vector of bytes (64 with AVX-512). */
    #if defined(__AVX2__)
    #define QP_CVT_u8(p) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p)))
    #define QP_CVT_s8(p) _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p)))
    #define QP_ROW_VEC(CVT) \
        if (first) for (; i + 8 <= n; i += 8) _mm256_storeu_si256((__m256i *)(a + i), CVT(s + i)); \
        else for (; i + 8 <= n; i += 8) _mm256_storeu_si256((__m256i *)(a + i), \
            _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(a + i)), CVT(s + i)));
    #else
    #define QP_ROW_VEC(CVT)
    #endif
    #define QP_ROW(NAME, T, CVT) \
    static inline void NAME(int32_t *restrict a, const T *restrict s, ptrdiff_t n, int first) { \
        ptrdiff_t i = 0; \
        QP_ROW_VEC(CVT) \
        if (first) for (; i < n; i++) a[i] = s[i]; \
        else for (; i < n; i++) a[i] += s[i]; \
    }
    QP_ROW(qp_row_u8, uint8_t, QP_CVT_u8)
    QP_ROW(qp_row_s8, int8_t, QP_CVT_s8)
    """
    void qops_run_means(const uint8_t* x, uint8_t* out, Py_ssize_t r0, Py_ssize_t r1,
                        Py_ssize_t n, int is_signed, float mul, float div) noexcept nogil
    void qp_row_u8(int32_t* a, const uint8_t* s, Py_ssize_t n, int first) noexcept nogil
    void qp_row_s8(int32_t* a, const int8_t* s, Py_ssize_t n, int first) noexcept nogil
    float floorf(float) noexcept nogil
    float ceilf(float) noexcept nogil

DEF GLOBAL_GRAIN = 131072    # bytes summed per thread below which one thread is enough


cdef void _adaptive_avg_planes(const uint8_t* x, uint8_t* out, Py_ssize_t planes,
                               Py_ssize_t D, Py_ssize_t H, Py_ssize_t W,
                               Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                               const Py_ssize_t* lim, const float* recip, int sgn,
                               int nthreads) noexcept nogil:
    # One (n, c, od) output plane per iteration: the rows of each (od, oh) window are added
    # into a W-long row buffer, the W windows summed from it into a plane buffer, then one
    # rounding loop over the plane. lim = d0[OD], d1[OD], h0[OH], h1[OH], w0[OW], w1[OW].
    cdef Py_ssize_t area = OH * OW, HW = H * W
    cdef Py_ssize_t p, i, w, ow, idd, ih, od, oh
    cdef int first
    cdef int32_t* vrow = NULL
    cdef int32_t* sums = NULL
    cdef int32_t s
    cdef const uint8_t* base
    cdef const uint8_t* src
    cdef const float* rc
    cdef uint8_t* o
    cdef const Py_ssize_t* d0 = lim
    cdef const Py_ssize_t* d1 = lim + OD
    cdef const Py_ssize_t* h0 = lim + 2 * OD
    cdef const Py_ssize_t* h1 = lim + 2 * OD + OH
    cdef const Py_ssize_t* w0 = lim + 2 * OD + 2 * OH
    cdef const Py_ssize_t* w1 = lim + 2 * OD + 2 * OH + OW
    with parallel(num_threads=nthreads):
        vrow = <int32_t*>malloc(W * sizeof(int32_t))
        sums = <int32_t*>malloc(area * sizeof(int32_t))
        for p in prange(planes, schedule="static"):
            od = p % OD
            base = x + (p // OD) * D * HW
            for oh in range(OH):
                first = 1
                for idd in range(d0[od], d1[od]):
                    for ih in range(h0[oh], h1[oh]):
                        src = base + idd * HW + ih * W
                        if sgn:
                            qp_row_s8(vrow, <const int8_t*>src, W, first)
                        else:
                            qp_row_u8(vrow, src, W, first)
                        first = 0
                for ow in range(OW):
                    s = 0
                    for w in range(w0[ow], w1[ow]):
                        s = s + vrow[w]
                    sums[oh * OW + ow] = s
            o = out + p * area
            rc = recip + od * area
            if sgn:
                for i in range(area):
                    # raw values, no zero point, no clamp: an average is always in range
                    (<int8_t*>o)[i] = <int8_t><int32_t>qops_rintf(<float>sums[i] * rc[i])
            else:
                for i in range(area):
                    o[i] = <uint8_t><int32_t>qops_rintf(<float>sums[i] * rc[i])
        free(vrow)
        free(sums)


cdef void _plane_mean(const uint8_t* x, uint8_t* out, Py_ssize_t P, Py_ssize_t L, float recip,
                      int sgn, int nthreads) noexcept nogil:
    # Output 1x1(x1): one contiguous exact sum per (n, c) plane, rint(f32(f32(sum) * recip))
    # (the "/ 1" of reduce_sum.h's formula is exact); each thread a range of planes (whole
    # groups of 8, as qops_run_means takes them).
    cdef Py_ssize_t t, a, b
    if nthreads <= 1:
        qops_run_means(x, out, 0, P, L, sgn, recip, 1.0)
        return
    for t in prange(nthreads, schedule="static", num_threads=nthreads):
        a = (P * t // nthreads) // 8 * 8
        b = P if t == nthreads - 1 else (P * (t + 1) // nthreads) // 8 * 8
        qops_run_means(x, out, a, b, L, sgn, recip, 1.0)


def adaptive_avg_pool(x, out_size):
    """Adaptive average pool on raw values: out = rint(f32(f32(sum q) * r)), no zero point."""
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    cdef Py_ssize_t n, c, D, H, W, OD, OH, OW, i, j, k, a, b, O, L, P, off
    cdef float r
    cdef int sgn, nt
    n, c, D, H, W = x.shape
    OD, OH, OW = out_size
    out = qops_empty(np, (n, c, OD, OH, OW), x.dtype)
    if n * c * OD * OH * OW == 0:
        return out
    sgn = x.dtype.kind == "i"
    # both arrays are C-contiguous: their data pointers through the buffer protocol (x and
    # out stay referenced, so the pointers outlive the released views)
    cdef Py_buffer xb, ob
    PyObject_GetBuffer(x, &xb, PyBUF_SIMPLE)
    cdef const uint8_t* xp = <const uint8_t*>xb.buf
    PyBuffer_Release(&xb)
    PyObject_GetBuffer(out, &ob, PyBUF_SIMPLE | PyBUF_WRITABLE)
    cdef uint8_t* op = <uint8_t*>ob.buf
    PyBuffer_Release(&ob)
    P = n * c
    if OD == 1 and OH == 1 and OW == 1:
        # r = f32(f32(f32(1.0 / D) / H) / W), float32 arithmetic as the reference
        r = <float>1.0 / <float>D
        r = r / <float>H
        r = r / <float>W
        L = D * H * W
        nt = qops_threads_for(P * L, GLOBAL_GRAIN)
        with nogil:
            _plane_mean(xp, op, P, L, r, sgn, nt)
        return out
    lim_a, recip_a = _adaptive_tables(out_size, (D, H, W))
    cdef const Py_ssize_t* lim = <const Py_ssize_t*>qops_ptr(lim_a)
    cdef const float* recip = <const float*>qops_ptr(recip_a)
    nt = qops_threads_for(n * c * D * H * W, GRAIN)
    with nogil:
        if _short_ok(lim, OD, OH, OW, W, True):
            _short_split(xp, op, D, H, W, OD, OH, OW, lim, recip, P * OD * OH, True, sgn, nt)
        else:
            _adaptive_avg_planes(xp, op, P * OD, D, H, W, OD, OH, OW, lim, recip, sgn, nt)
    return out


def _adaptive_tables(out_size, in_size):
    """An adaptive average pool's windows and multipliers: lim = d0[OD], d1[OD], h0[OH],
    h1[OH], w0[OW], w1[OW] with start = floor(f32(o*L) / f32(O)), end = ceil(f32((o+1)*L) /
    f32(O)), and recip[od, oh, ow] = f32(f32(f32(1.0 / kD) / kH) / kW) of the window lengths.
    Kept per geometry (models repeat a pool)."""
    key = (tuple(out_size), tuple(in_size))
    tabs = _ADAPTIVE_TABLES.get(key)
    if tabs is not None:
        return tabs
    cdef Py_ssize_t OD = out_size[0], OH = out_size[1], OW = out_size[2]
    cdef Py_ssize_t O, L, i, j, k, off = 0
    lim_a = np.empty(2 * (OD + OH + OW), np.intp)
    recip_a = np.empty(OD * OH * OW, np.float32)
    cdef Py_ssize_t[::1] lim = lim_a
    cdef float[::1] recip = recip_a
    cdef float r
    for O, L in zip(out_size, in_size):
        for i in range(O):
            lim[off + i] = <Py_ssize_t>floorf(<float>(i * L) / <float>O)
            lim[off + O + i] = <Py_ssize_t>ceilf(<float>((i + 1) * L) / <float>O)
        off += 2 * O
    cdef Py_ssize_t bh = 2 * OD, bw = 2 * OD + 2 * OH
    for i in range(OD):
        for j in range(OH):
            for k in range(OW):
                r = <float>1.0 / <float>(lim[OD + i] - lim[i])
                r = r / <float>(lim[bh + OH + j] - lim[bh + j])
                r = r / <float>(lim[bw + OW + k] - lim[bw + k])
                recip[(i * OH + j) * OW + k] = r
    if len(_ADAPTIVE_TABLES) >= 64:
        _ADAPTIVE_TABLES.clear()
    _ADAPTIVE_TABLES[key] = lim_a, recip_a
    return lim_a, recip_a


_ADAPTIVE_TABLES = {}


cdef void _adaptive_max_rows(const qint_t[:, :, :, :, ::1] x, qint_t[:, :, :, :, ::1] out,
                             int64_t[:, :, :, :, ::1] index,
                             const int64_t[::1] d0s, const int64_t[::1] d1s,
                             const int64_t[::1] h0s, const int64_t[::1] h1s,
                             const int64_t[::1] w0s, const int64_t[::1] w1s,
                             int nthreads) noexcept nogil:
    # A plain scan of each window in (d, h, w) order keeping the first maximum.
    cdef Py_ssize_t C = x.shape[1], H = x.shape[3], W = x.shape[4]
    cdef Py_ssize_t OD = out.shape[2], OH = out.shape[3], OW = out.shape[4]
    cdef Py_ssize_t rows = out.shape[0] * C * OD * OH
    cdef Py_ssize_t r, ow, idd, ih, iw, n, c, od, oh, plane, best_i
    cdef qint_t best, v
    for r in prange(rows, schedule="static", num_threads=nthreads):
        oh = r % OH
        od = (r // OH) % OD
        plane = r // (OH * OD)
        n = plane // C
        c = plane % C
        for ow in range(OW):
            best = x[n, c, d0s[od], h0s[oh], w0s[ow]]
            best_i = (d0s[od] * H + h0s[oh]) * W + w0s[ow]
            for idd in range(d0s[od], d1s[od]):
                for ih in range(h0s[oh], h1s[oh]):
                    for iw in range(w0s[ow], w1s[ow]):
                        v = x[n, c, idd, ih, iw]
                        if v > best:
                            best = v
                            best_i = (idd * H + ih) * W + iw
            out[n, c, od, oh, ow] = best
            index[n, c, od, oh, ow] = best_i


cdef inline void _amax_plane(const qint_t* xp, qint_t* o, qint_t* buf, Py_ssize_t H,
                             Py_ssize_t W, Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t d0,
                             Py_ssize_t d1, const Py_ssize_t* lim) noexcept nogil:
    # One (n, c, od) output plane: the window's rows max-folded into buf (stride-1 loops GCC
    # vectorizes), then the short W windows over buf. lim = h0[OH], h1[OH], w0[OW], w1[OW].
    cdef Py_ssize_t oh, ow, idd, ih, w
    cdef const Py_ssize_t* h0 = lim
    cdef const Py_ssize_t* h1 = lim + OH
    cdef const Py_ssize_t* w0 = lim + 2 * OH
    cdef const Py_ssize_t* w1 = lim + 2 * OH + OW
    cdef qint_t a, b
    cdef int first
    for oh in range(OH):
        first = 1
        for idd in range(d0, d1):
            if qint_t is not int32_t and QP_SHORT and W <= 128:
                qp_fold_max128(<const uint8_t*>(xp + (idd * H + h0[oh]) * W), W, h1[oh] - h0[oh],
                               <uint8_t*>buf, first, qint_t is int8_t)
                first = 0
                continue
            for ih in range(h0[oh], h1[oh]):
                _fold_max(buf, xp + (idd * H + ih) * W, W, first)
                first = 0
        for ow in range(OW):
            a = buf[w0[ow]]
            for w in range(w0[ow] + 1, w1[ow]):
                b = buf[w]
                a = a if a > b else b
            o[oh * OW + ow] = a


cdef void _amax_planes(const qint_t* x, qint_t* out, Py_ssize_t planes, Py_ssize_t D,
                       Py_ssize_t H, Py_ssize_t W, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                       const Py_ssize_t* lim, int nthreads) noexcept nogil:
    # lim = d0[OD], d1[OD], then _amax_plane's h0, h1, w0, w1; one W-long buffer per thread
    cdef Py_ssize_t p, od
    cdef qint_t* buf = NULL
    with parallel(num_threads=nthreads):
        buf = <qint_t*>malloc(W * sizeof(qint_t))
        for p in prange(planes, schedule="static"):
            od = p % OD
            _amax_plane(x + (p // OD) * D * H * W, out + p * OH * OW, buf, H, W, OH, OW,
                        lim[od], lim[OD + od], lim + 2 * OD)
        free(buf)


def adaptive_max_pool(x, out_size, with_indices):
    """Adaptive max pool on raw values; windows as PyTorch's float adaptive max pool."""
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    cdef Py_ssize_t n, c, D, H, W
    n, c, D, H, W = x.shape
    cdef Py_ssize_t OD = out_size[0], OH = out_size[1], OW = out_size[2]
    cdef Py_ssize_t i, O, L, off
    shape = (n, c, OD, OH, OW)
    out = qops_empty(np, shape, x.dtype)
    if with_indices or out.size == 0:
        return _adaptive_max_indices(x, out, out_size, with_indices)
    # windows [floor(o*L/O), ceil((o+1)*L/O)) in exact integers
    cdef Py_ssize_t* lim = <Py_ssize_t*>malloc(2 * (OD + OH + OW) * sizeof(Py_ssize_t))
    if lim == NULL:
        raise MemoryError()
    off = 0
    for O, L in ((OD, D), (OH, H), (OW, W)):
        for i in range(O):
            lim[off + i] = (i * L) // O
            lim[off + O + i] = ((i + 1) * L + O - 1) // O
        off += 2 * O
    cdef int nt = qops_threads_for(x.size + out.size, GRAIN)
    cdef Py_ssize_t planes = n * c * OD
    cdef char* xp = qops_ptr(x)
    cdef char* op = qops_ptr(out, True)
    cdef int kind = 2 if x.itemsize == 4 else (1 if x.dtype.kind == "i" else 0)
    with nogil:
        if kind < 2 and _short_ok(lim, OD, OH, OW, W, False):
            _short_split(<const uint8_t*>xp, <uint8_t*>op, D, H, W, OD, OH, OW, lim, NULL,
                         planes * OH, False, kind, nt)
        elif kind == 0:
            _amax_planes[uint8_t](<const uint8_t*>xp, <uint8_t*>op, planes, D, H, W, OD, OH,
                                  OW, lim, nt)
        elif kind == 1:
            _amax_planes[int8_t](<const int8_t*>xp, <int8_t*>op, planes, D, H, W, OD, OH, OW,
                                 lim, nt)
        else:
            _amax_planes[int32_t](<const int32_t*>xp, <int32_t*>op, planes, D, H, W, OD, OH,
                                  OW, lim, nt)
    free(lim)
    return out


def _adaptive_max_indices(x, out, out_size, with_indices):
    # the scalar scan that also reports the first maximum's index
    n, c, D, H, W = x.shape
    shape = out.shape
    index = np.empty(shape, dtype=np.int64)
    if out.size == 0:
        return (out, index) if with_indices else out
    lims = []
    for O, L in zip(out_size, (D, H, W)):
        o = np.arange(O, dtype=np.int64)
        lims += [(o * L) // O, -((-(o + 1) * L) // O)]
    nt = qops_threads_for(x.size + out.size, GRAIN)
    if x.dtype == np.uint8:
        _adaptive_max_rows[uint8_t](x, out, index, *lims, nt)
    elif x.dtype == np.int8:
        _adaptive_max_rows[int8_t](x, out, index, *lims, nt)
    else:
        _adaptive_max_rows[int32_t](x, out, index, *lims, nt)
    return (out, index) if with_indices else out


# -- channels-last average pools ----------------------------------------------------------

cdef extern from "pool_cl.h" nogil:
    ctypedef struct qpc_row:
        Py_ssize_t H, W, C, OW, d0, d1, h0, h1
        const Py_ssize_t* w0
        const Py_ssize_t* w1
        const int32_t* sub
        const float* mul
        float add, post, qmin, qmax
    void qpc_avg_row_u8(const uint8_t* x, uint8_t* out, const qpc_row* g)
    void qpc_avg_row_s8(const int8_t* x, int8_t* out, const qpc_row* g)


cdef inline void _avg_cl_row(const q8_t* x, q8_t* out, Py_ssize_t H, Py_ssize_t W,
                             Py_ssize_t C, Py_ssize_t OW, Py_ssize_t d0, Py_ssize_t d1,
                             Py_ssize_t h0, Py_ssize_t h1, const Py_ssize_t* w0,
                             const Py_ssize_t* w1, const int32_t* sub, const float* mul,
                             float add, float post, float qmin, float qmax) noexcept nogil:
    # the row's arguments in a struct on this call's stack: one per thread (a struct filled
    # inside a prange body is shared by the threads: issue 19 #3)
    cdef qpc_row g
    g.H = H
    g.W = W
    g.C = C
    g.OW = OW
    g.d0 = d0
    g.d1 = d1
    g.h0 = h0
    g.h1 = h1
    g.w0 = w0
    g.w1 = w1
    g.sub = sub
    g.mul = mul
    g.add = add
    g.post = post
    g.qmin = qmin
    g.qmax = qmax
    if q8_t is uint8_t:
        qpc_avg_row_u8(x, out, &g)
    else:
        qpc_avg_row_s8(x, out, &g)


cdef void _avg_cl(const q8_t* x, q8_t* out, Py_ssize_t N, Py_ssize_t D, Py_ssize_t H,
                  Py_ssize_t W, Py_ssize_t C, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                  const Py_ssize_t* lim, const int32_t* sub, const float* mul, float add,
                  float post, float qmin, float qmax, int nt) noexcept nogil:
    # One output row (n, od, oh) per work item (pool_cl.h sums each pixel's window in
    # registers). lim = d0[OD], d1[OD], h0[OH], h1[OH], w0[OW], w1[OW], clipped to the input.
    cdef Py_ssize_t r, n, od, oh
    for r in prange(N * OD * OH, schedule="static", num_threads=nt):
        n = r // (OD * OH)
        od = r // OH - n * OD
        oh = r - (n * OD + od) * OH
        _avg_cl_row(x + n * D * H * W * C, out + r * OW * C, H, W, C, OW, lim[od],
                    lim[OD + od], lim[2 * OD + oh], lim[2 * OD + OH + oh],
                    lim + 2 * OD + 2 * OH, lim + 2 * OD + 2 * OH + OW,
                    sub + (od * OH + oh) * OW, mul + (od * OH + oh) * OW, add, post, qmin,
                    qmax)


_CL_TABLES = {}


cdef object _avg_cl_run(x, out_size, tables):
    """Run _avg_cl on x (N, D, H, W, C) with tables = (lim, sub, mul, add, post): the
    clipped windows per axis (d0, d1, h0, h1, w0, w1) and sub and mul per output (OD, OH,
    OW)."""
    cdef Py_ssize_t N, D, H, W, C, OD, OH, OW
    N, D, H, W, C = x.shape
    OD, OH, OW = out_size
    out = qops_empty(np, (N, OD, OH, OW, C), x.dtype)
    if out.size == 0:
        return out
    lim_a, sub_a, mul_a, add_o, post_o = tables
    cdef float add = add_o, post = post_o
    cdef const Py_ssize_t* lim = <const Py_ssize_t*>qops_ptr(lim_a)
    cdef const int32_t* sp = <const int32_t*>qops_ptr(sub_a)
    cdef const float* mp = <const float*>qops_ptr(mul_a)
    cdef int nt = qops_threads_for(x.size + out.size, GRAIN)
    cdef const uint8_t* xp = <const uint8_t*>qops_ptr(x)
    cdef uint8_t* op = <uint8_t*>qops_ptr(out, True)
    if x.dtype == np.uint8:
        with nogil:
            _avg_cl[uint8_t](xp, op, N, D, H, W, C, OD, OH, OW, lim, sp, mp, add, post, 0.0,
                             255.0, nt)
    else:
        with nogil:
            _avg_cl[int8_t](<const int8_t*>xp, <int8_t*>op, N, D, H, W, C, OD, OH, OW, lim, sp,
                            mp, add, post, -128.0, 127.0, nt)
    return out


def _cl_tables(key, lim, sub, mul, add, post):
    """The kernel's tables as contiguous arrays, kept per geometry (models repeat a pool)."""
    tables = (np.ascontiguousarray(lim, dtype=np.intp), np.ascontiguousarray(sub, dtype=np.int32),
              np.ascontiguousarray(mul, dtype=np.float32), add, post)
    if len(_CL_TABLES) >= 64:
        _CL_TABLES.clear()
    _CL_TABLES[key] = tables
    return tables


def avg_pool_cl(x, kernel_size, stride, padding, out_size, count_include_pad, divisor_override,
                zero_point):
    """avg_pool of channels-last data: x (N, D, H, W, C) -> (N, OD, OH, OW, C), PyTorch's
    channels-last formula clampQ(rint(f32(f32(acc) * f32(1/div))) + zp)."""
    x = np.ascontiguousarray(x)
    key = ("avg", tuple(out_size), tuple(stride), tuple(padding), tuple(kernel_size),
           x.shape[1:4], bool(count_include_pad), divisor_override, zero_point)
    tables = _CL_TABLES.get(key)
    if tables is not None:
        return _avg_cl_run(x, out_size, tables)
    # windows clipped to the input: start = max(o*s - p, 0), end = min(o*s - p + k, L)
    lims = []
    for o, s, p, k, L in zip(out_size, stride, padding, kernel_size, x.shape[1:4]):
        start = np.arange(o, dtype=np.intp) * s - p
        lims += [np.maximum(start, 0), np.minimum(start + k, L)]
    # size*zp and f32(1/div) per output, as the C-order kernels' tables (rows by class); the
    # zero point added after rounding (post)
    cls, zt, mt, _, _ = _avg_tables(out_size, stride, padding, kernel_size, x.shape[1:4],
                                    count_include_pad, divisor_override, zero_point)
    return _avg_cl_run(x, out_size, _cl_tables(key, np.concatenate(lims), zt[cls], mt[cls],
                                               0.0, float(zero_point)))


def adaptive_avg_pool_cl(x, out_size, zero_point):
    """adaptive_avg_pool of channels-last data: x (N, D, H, W, C) -> (N, OD, OH, OW, C),
    PyTorch's channels-last formula clampQ(rint(f32(f32((sum - size*zp) * inv) + zp)))."""
    x = np.ascontiguousarray(x)
    key = ("adaptive", tuple(out_size), x.shape[1:4], zero_point)
    tables = _CL_TABLES.get(key)
    if tables is None:
        lim, _ = _adaptive_tables(out_size, x.shape[1:4])
        off = 0
        lens = []
        for O in out_size:
            lens.append(lim[off + O:off + 2 * O] - lim[off:off + O])
            off += 2 * O
        size = (lens[0][:, None, None] * lens[1][None, :, None] * lens[2][None, None, :]).ravel()
        # m = f32(1/size); inv = f32(1/f32(1/m)), the inverse of the scale PyTorch hands
        # its quantizer
        m = np.float32(1) / size.astype(np.float32)
        inv = np.float32(1) / (np.float32(1) / m)
        tables = _cl_tables(key, lim, size * zero_point, inv, float(zero_point), 0.0)
    return _avg_cl_run(x, out_size, tables)
