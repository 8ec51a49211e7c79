# Included by pool.pyx (see its docstring): max pools on (N, C, D, H, W). Routes rows (the
# taps along D and H max-folded into a padded row buffer, then the W window slid over it) and
# indices (a plain scan keeping the first maximum); the vector routes run through
# pool_common.pxi's _run_rows.

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


cdef int _max_rows(const qint_t* x, qint_t* out, Py_ssize_t planes, Py_ssize_t D, Py_ssize_t H,
                   Py_ssize_t W, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t kD,
                   Py_ssize_t kH, Py_ssize_t kW, Py_ssize_t sD, Py_ssize_t sH, Py_ssize_t sW,
                   Py_ssize_t pD, Py_ssize_t pH, Py_ssize_t pW, Py_ssize_t dD, Py_ssize_t dH,
                   Py_ssize_t dW, Py_ssize_t Wp, qint_t lowest, int nthreads) noexcept nogil:
    # Each thread's padded row buffer is a slot of one block allocated before the parallel
    # region; returns -1, nothing written, if it cannot be had.
    cdef Py_ssize_t rows = planes * OD * OH
    cdef Py_ssize_t r, i, w, kd, kh, idd, ih, od, oh, plane
    cdef int first
    cdef size_t slot
    cdef qint_t* vbuf = NULL
    cdef qint_t* vrow = NULL
    cdef char* block = <char*>_slots(nthreads, Wp * sizeof(qint_t), &slot)
    if block == NULL:
        return -1
    i = 0
    with parallel(num_threads=nthreads if nthreads > 1 else 1):
        vbuf = <qint_t*>(block + threadid() * slot)
        # padded slots stay at the dtype's lowest value, so they never win a max
        for i in range(Wp):
            vbuf[i] = lowest
        vrow = vbuf + pW
        for r in prange(rows, schedule="static"):
            oh = r % OH
            od = (r // OH) % OD
            plane = r // (OH * OD)
            first = 1
            for kd in range(kD):
                idd = od * sD - pD + kd * dD
                if idd < 0 or idd >= D:
                    continue
                for kh in range(kH):
                    ih = oh * sH - pH + kh * dH
                    if ih < 0 or ih >= H:
                        continue
                    _fold_max(vrow, x + ((plane * D + idd) * H + ih) * W, W, first)
                    first = 0
            if first:
                for w in range(W):
                    vrow[w] = lowest
            _hmax(vbuf, out + r * OW, OW, kW, sW, dW)
    free(block)
    return 0


cdef void _max_indices(const qint_t* x, qint_t* out, int64_t* index, Py_ssize_t planes,
                       Py_ssize_t D, Py_ssize_t H, Py_ssize_t W, Py_ssize_t OD, Py_ssize_t OH,
                       Py_ssize_t OW, Py_ssize_t kD, Py_ssize_t kH, Py_ssize_t kW, Py_ssize_t sD,
                       Py_ssize_t sH, Py_ssize_t sW, Py_ssize_t pD, Py_ssize_t pH, Py_ssize_t pW,
                       Py_ssize_t dD, Py_ssize_t dH, Py_ssize_t dW, qint_t lowest,
                       int nthreads) noexcept nogil:
    # With indices: a plain scan of each window in (d, h, w) order, keeping the first maximum.
    cdef Py_ssize_t rows = planes * OD * OH
    cdef Py_ssize_t r, ow, kd, kh, kw, idd, ih, iw, od, oh, best_i
    cdef const qint_t* xp
    cdef int found
    cdef qint_t best, v
    for r in prange(rows, schedule="static", num_threads=nthreads):
        oh = r % OH
        od = (r // OH) % OD
        xp = x + (r // (OH * OD)) * D * H * W
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
                        v = xp[(idd * H + ih) * W + iw]
                        if found == 0 or v > best:
                            best = v
                            best_i = (idd * H + ih) * W + iw
                            found = 1
            out[r * OW + ow] = best
            index[r * OW + ow] = best_i


def max_pool(x, kernel_size, stride, padding, dilation, out_size, with_indices):
    """Max of raw values over the valid (non-padded) taps of each dilated window."""
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    (kD, kH, kW), (sD, sH, sW) = kernel_size, stride
    (pD, pH, pW), (dD, dH, dW) = padding, dilation
    shape = x.shape[:2] + tuple(out_size)
    out = qops_empty(np, shape, x.dtype)
    route = _plan(OP_MAX, x, tuple(out_size), tuple(kernel_size), tuple(stride),
                  tuple(padding), tuple(dilation), with_indices, None, NULL)
    if route is R_EMPTY:
        return (out, np.zeros(shape, np.int64)) if with_indices else out
    cdef bint sgn = x.dtype.kind == "i"
    nt = qops_threads_for(out.size * kD * kH * max(kW, 1) if with_indices
                          else x.size + out.size * kW, GRAIN)
    cdef qp_geom g
    cdef _Rows a
    cdef int64_t* ip
    if route is R_MAX_SHORT or route is R_MAX_S2 or route is R_MAX_SIMD:
        g = _geom(x, out, kernel_size, stride, padding, dilation)
        a.g = &g
        a.sgn = sgn
        if route is R_MAX_SIMD:
            return _run_rows(K_MAX_ROWS, &a, x, out, nt)
        if route is R_MAX_S2:
            return _run_rows(K_MAX_S2, &a, x, out, nt)
        lim = np.empty(2 * (shape[2] + shape[3] + shape[4]), np.intp)
        a.lim = <const Py_ssize_t*>qops_ptr(lim, True)
        qp_short_lim(&g, <Py_ssize_t*>a.lim)
        a.recip = NULL
        a.avg = 0
        return _run_rows(K_SHORT, &a, x, out, nt)
    cdef Py_ssize_t planes = shape[0] * shape[1]
    cdef Py_ssize_t D = x.shape[2], H = x.shape[3], W = x.shape[4]
    cdef Py_ssize_t OD = shape[2], OH = shape[3], OW = shape[4]
    cdef const char* xp = qops_ptr(x)
    cdef char* op = qops_ptr(out, True)
    lo = -(1 << 31) if x.itemsize == 4 else (-128 if sgn else 0)
    if route is R_MAX_IDX:
        index = np.empty(shape, dtype=np.int64)
        ip = <int64_t*>qops_ptr(index, True)
        if x.dtype == np.uint8:
            _max_indices[uint8_t](<const uint8_t*>xp, <uint8_t*>op, ip, planes, D, H, W, OD, OH,
                                  OW, kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, lo, nt)
        elif x.dtype == np.int8:
            _max_indices[int8_t](<const int8_t*>xp, <int8_t*>op, ip, planes, D, H, W, OD, OH,
                                 OW, kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, lo, nt)
        else:
            _max_indices[int32_t](<const int32_t*>xp, <int32_t*>op, ip, planes, D, H, W, OD, OH,
                                  OW, kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, lo, nt)
        return out, index
    Wp = max(W + 2 * pW, (OW - 1) * sW + (kW - 1) * dW + 1)
    if x.dtype == np.uint8:
        err = _max_rows[uint8_t](<const uint8_t*>xp, <uint8_t*>op, planes, D, H, W, OD, OH, OW,
                                 kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, Wp, lo, nt)
    elif x.dtype == np.int8:
        err = _max_rows[int8_t](<const int8_t*>xp, <int8_t*>op, planes, D, H, W, OD, OH, OW,
                                kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, Wp, lo, nt)
    else:
        err = _max_rows[int32_t](<const int32_t*>xp, <int32_t*>op, planes, D, H, W, OD, OH, OW,
                                 kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, Wp, lo, nt)
    if err:
        raise MemoryError()
    return out
