# Included by pool.pyx (see its docstring): what the routes share. The row-range runner of
# the vector kernels (_Rows, _rows, _split_rows, _run_rows: one contiguous range of output
# rows per thread), per-thread scratch slots allocated before a parallel region (_slots), the
# kernels' geometry (_geom) and the short-row kernels' limits (_short_ok).

cdef enum _Kern:
    K_MAX_ROWS
    K_AVG_ROWS
    K_AVG3
    K_MAX_S2
    K_AVG2X2
    K_SHORT_AVG
    K_SHORT


cdef struct _Rows:
    # the arguments of one row-range kernel call (the fields a kernel does not take unused)
    const uint8_t* x
    uint8_t* out
    const qp_geom* g
    const int32_t* cls
    const int32_t* zt
    const float* mt
    float zp
    int32_t qmin
    int32_t qmax
    int sgn
    int avg
    const qp_irq* iq
    const qp_avgq* aq
    const Py_ssize_t* lim
    const float* recip
    Py_ssize_t cz
    Py_ssize_t ow3
    int cmp


cdef int _rows(_Kern kern, const _Rows* a, Py_ssize_t g0, Py_ssize_t g1) noexcept nogil:
    # output rows [g0, g1) by kernel kern; 0, or the kernel's QP_ERR_* flags
    if kern == K_MAX_ROWS:
        return qp_max_rows(a.x, a.out, a.g, g0, g1, a.sgn)
    if kern == K_AVG_ROWS:
        return qp_avg_rows(a.x, a.out, a.g, g0, g1, a.cls, a.zt, a.mt, a.zp, a.qmin, a.qmax,
                           a.sgn, a.iq)
    if kern == K_AVG3:
        qp_avg3_rows(a.x, a.out, a.g, g0, g1, a.cls, a.iq, a.ow3, a.cmp, a.sgn)
    elif kern == K_MAX_S2:
        qp_max_s2_rows(a.x, a.out, a.g, g0, g1, a.sgn)
    elif kern == K_AVG2X2:
        qp_avg2x2_rows_g(a.x, a.out, a.g, g0, g1, a.sgn, a.iq, a.cz)
    elif kern == K_SHORT_AVG:
        return qp_short_avg_rows_g(a.x, a.out, a.g, a.lim, g0, g1, a.sgn, a.aq)
    elif kern == K_SHORT:
        return qp_short_rows_g(a.x, a.out, a.g, a.lim, a.recip, g0, g1, a.avg, a.sgn)
    return 0


cdef int _split_rows(_Kern kern, const _Rows* a, Py_ssize_t rows, int nt) noexcept nogil:
    # one contiguous range of output rows per thread: the kernels' per-call cost stays tiny.
    # Returns 0, or the kernels' QP_ERR_* flags (or-ed) when some rows were not written.
    cdef Py_ssize_t t
    cdef int err = 0
    if nt <= 1:
        return _rows(kern, a, 0, rows)
    for t in prange(nt, schedule="static", num_threads=nt):
        err |= _rows(kern, a, rows * t // nt, rows * (t + 1) // nt)
    return err


cdef object _run_rows(_Kern kern, _Rows* a, x, out, int nt):
    # _split_rows over every output row of out (rows of OW outputs) from x's buffer
    a.x = <const uint8_t*>qops_ptr(x)
    a.out = <uint8_t*>qops_ptr(out, True)
    cdef Py_ssize_t rows = out.size // out.shape[4]
    cdef int err
    with nogil:
        err = _split_rows(kern, a, rows, nt)
    if err & QP_ERR_NOMEM:
        raise MemoryError()
    if err:
        raise RuntimeError(f"pool: the vector kernel refused this geometry (status {err})")
    return out


cdef void* _slots(int nt, size_t nbytes, size_t* slot) noexcept nogil:
    # one block of per-thread scratch slots (rounded to 64 bytes), allocated before a parallel
    # region; slot t starts at block + t * slot[0]. NULL when it cannot be had.
    slot[0] = (nbytes + 63) & ~(<size_t>63)
    return malloc((nt if nt > 1 else 1) * slot[0] if slot[0] else 64)


cdef qp_geom _geom(x, out, k, s, p, d):
    cdef qp_geom g
    cdef Py_ssize_t kk[3]
    cdef Py_ssize_t ss[3]
    cdef Py_ssize_t pp[3]
    cdef Py_ssize_t dd[3]
    kk[:] = [k[0], k[1], k[2]]
    ss[:] = [s[0], s[1], s[2]]
    pp[:] = [p[0], p[1], p[2]]
    dd[:] = [d[0], d[1], d[2]]
    qp_geom_init(&g, x.shape[2], x.shape[3], x.shape[4], out.shape[2], out.shape[3],
                 out.shape[4], kk, ss, pp, dd)
    return g


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
