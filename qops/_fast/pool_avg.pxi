# Included by pool.pyx (see its docstring): average pools on (N, C, D, H, W). Route planes
# (exact int32 window sums of a whole (n, c, od) output plane, then one requantize loop over
# it); the vector routes run through pool_common.pxi's _run_rows with pool_tables.pxi's
# tables.

cdef int _avg_planes(const q8_t* x, q8_t* out, Py_ssize_t planes, Py_ssize_t D, Py_ssize_t H,
                     Py_ssize_t W, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                     Py_ssize_t kD, Py_ssize_t kH, Py_ssize_t kW, Py_ssize_t sD, Py_ssize_t sH,
                     Py_ssize_t sW, Py_ssize_t pD, Py_ssize_t pH, Py_ssize_t pW, Py_ssize_t Wp,
                     const float* mult, const int32_t* szp, int32_t zp, float qmin, float qmax,
                     int nthreads) noexcept nogil:
    # One (n, c, od) output plane per iteration: window sums of every row go to a plane-sized
    # buffer, then one long requantize loop over the plane (rows alone are too short to fill
    # 512-bit vectors). mult[od, oh, ow] = f32(1/div) and szp = size*zp are prepared per call.
    # Each thread's row and plane buffers are slots of one block allocated before the parallel
    # region; returns -1, nothing written, if it cannot be had.
    cdef Py_ssize_t nplanes = planes * OD, area = OH * OW
    cdef Py_ssize_t p, i, j, w, ow, k, idd, ih, od, d0, d1, h0, h1, oh
    cdef int first
    cdef int32_t* vbuf = NULL
    cdef int32_t* vrow = NULL
    cdef int32_t* sums = NULL
    cdef int32_t* hs
    cdef const q8_t* src
    cdef const q8_t* base
    cdef const int32_t* vk
    cdef const float* m
    cdef const int32_t* z
    cdef q8_t* o
    cdef float zpf = <float>zp, t
    cdef Py_ssize_t wpr = (Wp + 15) & ~(<Py_ssize_t>15)
    cdef size_t slot
    cdef char* block = <char*>_slots(nthreads, (wpr + area) * sizeof(int32_t), &slot)
    if block == NULL:
        return -1
    i = 0
    with parallel(num_threads=nthreads if nthreads > 1 else 1):
        vbuf = <int32_t*>(block + threadid() * slot)
        sums = vbuf + wpr
        for i in range(Wp):
            vbuf[i] = 0          # padding adds nothing to a sum
        vrow = vbuf + pW
        for p in prange(nplanes, schedule="static"):
            od = p % OD
            base = x + (p // OD) * D * H * W
            d0 = max(od * sD - pD, 0)
            d1 = min(od * sD - pD + kD, D)
            for oh in range(OH):
                h0 = max(oh * sH - pH, 0)
                h1 = min(oh * sH - pH + kH, H)
                first = 1
                for idd in range(d0, d1):
                    for ih in range(h0, h1):
                        src = base + (idd * H + ih) * W
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
            o = out + p * area
            m = mult + od * area
            z = szp + od * area
            for j in range(area):
                # Q_leg with m = f32(1/div): zero point added before rounding
                t = <float>(sums[j] - z[j]) * m[j]
                o[j] = <q8_t><int32_t>qops_clampf(qops_rintf(t + zpf), qmin, qmax)
    free(block)
    return 0


def avg_pool(x, kernel_size, stride, padding, out_size, count_include_pad, divisor_override,
             zero_point):
    """Average pool: exact integer window sums, requantized as PyTorch's NCHW avg_pool2d."""
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    (kD, kH, kW), (sD, sH, sW), (pD, pH, pW) = kernel_size, stride, padding
    shape = x.shape[:2] + tuple(out_size)
    out = qops_empty(np, shape, x.dtype)
    tabs = None
    if out.size:
        tabs = _pool_tables(x, kernel_size, stride, padding, out_size, count_include_pad,
                            divisor_override, zero_point)
    route = _plan(OP_AVG, x, tuple(out_size), tuple(kernel_size), tuple(stride),
                  tuple(padding), _ONE, False, tabs, NULL)
    if route is R_EMPTY:
        return out
    cls, zt, mt, it, t3, uniform = tabs
    cdef bint sgn = x.dtype.kind == "i"
    cdef int32_t qmin = -128 if sgn else 0
    cdef int32_t qmax = 127 if sgn else 255
    nt = qops_threads_for(x.size * kD + out.size * kW, GRAIN)
    cdef qp_irq iq
    cdef qp_avgq aq
    cdef qp_geom g = _geom(x, out, kernel_size, stride, padding, (1, 1, 1))
    cdef _Rows a
    qp_irq_init(&iq, NULL, 0, 0, 0)
    if it is not None:
        qp_irq_init(&iq, <const int16_t*>qops_ptr(it[0]), it[0].shape[1], it[1], it[2])
    a.g = &g
    a.sgn = sgn
    a.iq = &iq
    if route is R_AVG_2X2:
        a.cz = <Py_ssize_t>cls[0] * out_size[2]
        return _run_rows(K_AVG2X2, &a, x, out, nt)
    if route is R_AVG_PAIRS:
        lim = np.empty(2 * (shape[2] + shape[3] + shape[4]), np.intp)
        a.lim = <const Py_ssize_t*>qops_ptr(lim, True)
        qp_short_lim(&g, <Py_ssize_t*>a.lim)
        qp_avgq_init(&aq, <const int32_t*>qops_ptr(cls), <const int32_t*>qops_ptr(zt),
                     <const float*>qops_ptr(mt), <float>zero_point, &iq)
        a.aq = &aq
        return _run_rows(K_SHORT_AVG, &a, x, out, nt)
    if route is R_AVG3:
        qp_irq_init(&iq, <const int16_t*>qops_ptr(t3[0]), t3[0].shape[1], it[1], it[2])
        a.cls = <const int32_t*>qops_ptr(cls)
        a.ow3 = t3[1]
        a.cmp = t3[2]
        return _run_rows(K_AVG3, &a, x, out, nt)
    if route is R_AVG_SIMD:
        a.cls = <const int32_t*>qops_ptr(cls)
        a.zt = <const int32_t*>qops_ptr(zt)
        a.mt = <const float*>qops_ptr(mt)
        a.zp = <float>zero_point
        a.qmin = qmin
        a.qmax = qmax
        return _run_rows(K_AVG_ROWS, &a, x, out, nt)
    Wp = max(x.shape[4] + 2 * pW, (shape[4] - 1) * sW + kW)
    mult = mt[cls]
    szp = zt[cls]
    cdef Py_ssize_t planes = shape[0] * shape[1]
    cdef Py_ssize_t D = x.shape[2], H = x.shape[3], W = x.shape[4]
    cdef Py_ssize_t OD = shape[2], OH = shape[3], OW = shape[4]
    cdef const float* mp = <const float*>qops_ptr(mult)
    cdef const int32_t* zp_ = <const int32_t*>qops_ptr(szp)
    if not sgn:
        err = _avg_planes[uint8_t](<const uint8_t*>qops_ptr(x), <uint8_t*>qops_ptr(out, True),
                                   planes, D, H, W, OD, OH, OW, kD, kH, kW, sD, sH, sW, pD, pH,
                                   pW, Wp, mp, zp_, zero_point, qmin, qmax, nt)
    else:
        err = _avg_planes[int8_t](<const int8_t*>qops_ptr(x), <int8_t*>qops_ptr(out, True),
                                  planes, D, H, W, OD, OH, OW, kD, kH, kW, sD, sH, sW, pD, pH,
                                  pW, Wp, mp, zp_, zero_point, qmin, qmax, nt)
    if err:
        raise MemoryError()
    return out
