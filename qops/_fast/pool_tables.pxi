# Included by pool.pyx (see its docstring): the requantize tables of average pools, built in
# Python once per geometry and kept: row classes with size*zp and f32(1/div) (_avg_tables),
# the AVX-512 kernels' integer tables checked against the float formula for every reachable
# window sum (_int_tables, _pow2_tables), their 3-tap form (_split_tables), and the cache
# (_pool_tables).

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
    cdef int32_t* c = <int32_t*>qops_ptr(cls, True)
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
    cdef int32_t* z = <int32_t*>qops_ptr(zt, True)
    cdef float* m = <float*>qops_ptr(mt, True)
    cdef int64_t* szv = <int64_t*>qops_ptr(sz, True)
    cdef int64_t* dvv = <int64_t*>qops_ptr(dvs, True)
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
                z[r * OW + ow] = <int32_t>(vs * ws[ow] * zp)
                m[r * OW + ow] = <float>(1.0 / <double>dv)          # f32(1.0 / div)
                szv[r * OW + ow] = vs * ws[ow]
                dvv[r * OW + ow] = dv
    free(cnt)
    return cls, zt, mt, sz, dvs


def _int_tables(sz, dvs, int64_t zp, bint sgn):
    """Integer requantize tables (qp_irq of qops_pool_common.h) equal to the float formula
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

def _pool_tables(x, kernel_size, stride, padding, out_size, count_include_pad,
                 divisor_override, zero_point):
    """avg_pool's tables, kept per geometry and zero point (models call the same pool often):
    (cls, zt, mt) of _avg_tables, the integer tables it (or None), their 3-tap form t3 (or
    None), and whether every window has one divisor (the flat 2x2 kernel needs one row)."""
    cdef bint sgn = x.dtype.kind == "i"
    key = (tuple(out_size), tuple(stride), tuple(padding), tuple(kernel_size), x.shape[2:],
           bool(count_include_pad), divisor_override, zero_point, sgn)
    tabs = _TABLES.get(key)
    if tabs is not None:
        return tabs
    kD, kH, kW = kernel_size
    cls, zt, mt, sz, dvs = _avg_tables(out_size, stride, padding, kernel_size, x.shape[2:],
                                       count_include_pad, divisor_override, zero_point)
    it = None
    if QP_SHORT and kD * kH * kW <= 256:
        # only the AVX-512 kernels use them (QP_SHORT: this build has those)
        it = _int_tables(sz, dvs, zero_point, sgn)
    t3 = None
    if it is not None and QP_AVG3 and kW == 3 and stride[2] == 1:
        t3 = _split_tables(it[0], zt.shape[0], out_size[2])
    tabs = cls, zt, mt, it, t3, bool((cls == cls[0]).all())
    if len(_TABLES) >= 64:
        _TABLES.clear()
    _TABLES[key] = tabs
    return tabs
