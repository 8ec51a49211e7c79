# Included by pool.pyx (see its docstring): adaptive average and max pools on
# (N, C, D, H, W): global (one contiguous sum per plane), planes, and the max pools' indices
# scan; windows and multipliers built once per geometry (_adaptive_tables, _adaptive_max_lim).

cdef int _adaptive_avg_planes(const uint8_t* x, uint8_t* out, Py_ssize_t planes,
                              Py_ssize_t D, Py_ssize_t H, Py_ssize_t W,
                              Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                              const Py_ssize_t* lim, const float* recip, int sgn,
                              int nthreads) noexcept nogil:
    # One (n, c, od) output plane per iteration: the rows of each (od, oh) window are added
    # into a W-long row buffer, the W windows summed from it into a plane buffer, then one
    # rounding loop over the plane. lim = d0[OD], d1[OD], h0[OH], h1[OH], w0[OW], w1[OW].
    # The buffers are per-thread slots of one block allocated before the parallel region;
    # returns -1, nothing written, if it cannot be had.
    cdef Py_ssize_t area = OH * OW, HW = H * W
    cdef Py_ssize_t p, i, w, ow, idd, ih, od, oh
    cdef Py_ssize_t wr = (W + 15) & ~(<Py_ssize_t>15)
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
    cdef size_t slot
    cdef char* block = <char*>_slots(nthreads, (wr + area) * sizeof(int32_t), &slot)
    if block == NULL:
        return -1
    with parallel(num_threads=nthreads if nthreads > 1 else 1):
        vrow = <int32_t*>(block + threadid() * slot)
        sums = vrow + wr
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
    free(block)
    return 0


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
    cdef Py_ssize_t n, c, D, H, W, OD, OH, OW, P
    cdef float r
    cdef int sgn, nt, err
    n, c, D, H, W = x.shape
    OD, OH, OW = out_size
    out = qops_empty(np, (n, c, OD, OH, OW), x.dtype)
    cdef const Py_ssize_t* lim = NULL
    cdef const float* recip = NULL
    cdef bint one = OD == 1 and OH == 1 and OW == 1
    if not one and n * c * OD * OH * OW:
        lim_a, recip_a = _adaptive_tables(out_size, (D, H, W))
        lim = <const Py_ssize_t*>qops_ptr(lim_a)
        recip = <const float*>qops_ptr(recip_a)
    route = _plan(OP_AAVG, x, tuple(out_size), _ONE, _ONE, _ZERO, _ONE, False, None,
                  lim)
    if route is R_EMPTY:
        return out
    sgn = x.dtype.kind == "i"
    cdef const uint8_t* xp = <const uint8_t*>qops_ptr(x)
    cdef uint8_t* op = <uint8_t*>qops_ptr(out, True)
    P = n * c
    if route is R_AAVG_GLOBAL:
        # r = f32(f32(f32(1.0 / D) / H) / W), float32 arithmetic as the reference
        r = <float>1.0 / <float>D
        r = r / <float>H
        r = r / <float>W
        nt = qops_threads_for(P * D * H * W, GLOBAL_GRAIN)
        with nogil:
            _plane_mean(xp, op, P, D * H * W, r, sgn, nt)
        return out
    nt = qops_threads_for(n * c * D * H * W, GRAIN)
    cdef qp_geom g
    cdef _Rows a
    if route is R_AAVG_SHORT:
        g = _geom(x, out, (1, 1, 1), (1, 1, 1), (0, 0, 0), (1, 1, 1))
        a.g = &g
        a.lim = lim
        a.recip = recip
        a.avg = 1
        a.sgn = sgn
        return _run_rows(K_SHORT, &a, x, out, nt)
    with nogil:
        err = _adaptive_avg_planes(xp, op, P * OD, D, H, W, OD, OH, OW, lim, recip, sgn, nt)
    if err:
        raise MemoryError()
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
    cdef Py_ssize_t* lim = <Py_ssize_t*>qops_ptr(lim_a, True)
    cdef float* recip = <float*>qops_ptr(recip_a, True)
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


cdef void _adaptive_max_rows(const qint_t* x, qint_t* out, int64_t* index, Py_ssize_t planes,
                             Py_ssize_t D, Py_ssize_t H, Py_ssize_t W, Py_ssize_t OD,
                             Py_ssize_t OH, Py_ssize_t OW, const Py_ssize_t* lim,
                             int nthreads) noexcept nogil:
    # A plain scan of each window in (d, h, w) order keeping the first maximum; lim as
    # _adaptive_max_lim.
    cdef Py_ssize_t rows = planes * OD * OH
    cdef Py_ssize_t r, ow, idd, ih, iw, od, oh, best_i
    cdef const Py_ssize_t* d0 = lim
    cdef const Py_ssize_t* d1 = lim + OD
    cdef const Py_ssize_t* h0 = lim + 2 * OD
    cdef const Py_ssize_t* h1 = lim + 2 * OD + OH
    cdef const Py_ssize_t* w0 = lim + 2 * OD + 2 * OH
    cdef const Py_ssize_t* w1 = lim + 2 * OD + 2 * OH + OW
    cdef const qint_t* xp
    cdef qint_t best, v
    for r in prange(rows, schedule="static", num_threads=nthreads):
        oh = r % OH
        od = (r // OH) % OD
        xp = x + (r // (OH * OD)) * D * H * W
        for ow in range(OW):
            best_i = (d0[od] * H + h0[oh]) * W + w0[ow]
            best = xp[best_i]
            for idd in range(d0[od], d1[od]):
                for ih in range(h0[oh], h1[oh]):
                    for iw in range(w0[ow], w1[ow]):
                        v = xp[(idd * H + ih) * W + iw]
                        if v > best:
                            best = v
                            best_i = (idd * H + ih) * W + iw
            out[r * OW + ow] = best
            index[r * OW + ow] = best_i


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




cdef int _amax_planes(const qint_t* x, qint_t* out, Py_ssize_t planes, Py_ssize_t D,
                      Py_ssize_t H, Py_ssize_t W, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                      const Py_ssize_t* lim, int nthreads) noexcept nogil:
    # lim = d0[OD], d1[OD], then _amax_plane's h0, h1, w0, w1; one W-long buffer per thread,
    # slots of one block allocated before the parallel region (the short-row fold writes up
    # to 128 bytes); returns -1, nothing written, if it cannot be had.
    cdef Py_ssize_t p, od
    cdef size_t slot
    cdef qint_t* buf = NULL
    cdef char* block = <char*>_slots(nthreads, max(<size_t>W * sizeof(qint_t), <size_t>128), &slot)
    if block == NULL:
        return -1
    with parallel(num_threads=nthreads if nthreads > 1 else 1):
        buf = <qint_t*>(block + threadid() * slot)
        for p in prange(planes, schedule="static"):
            od = p % OD
            _amax_plane(x + (p // OD) * D * H * W, out + p * OH * OW, buf, H, W, OH, OW,
                        lim[od], lim[OD + od], lim + 2 * OD)
    free(block)
    return 0


def _adaptive_max_lim(out_size, in_size):
    """An adaptive max pool's windows [floor(o*L/O), ceil((o+1)*L/O)) in exact integers:
    lim = d0[OD], d1[OD], h0[OH], h1[OH], w0[OW], w1[OW]."""
    cdef Py_ssize_t i, O, L, off = 0
    lim_a = np.empty(2 * sum(out_size), np.intp)
    cdef Py_ssize_t* lim = <Py_ssize_t*>qops_ptr(lim_a, True)
    for O, L in zip(out_size, in_size):
        for i in range(O):
            lim[off + i] = (i * L) // O
            lim[off + O + i] = ((i + 1) * L + O - 1) // O
        off += 2 * O
    return lim_a


def adaptive_max_pool(x, out_size, with_indices):
    """Adaptive max pool on raw values; windows as PyTorch's float adaptive max pool."""
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    cdef Py_ssize_t n, c, D, H, W
    n, c, D, H, W = x.shape
    cdef Py_ssize_t OD = out_size[0], OH = out_size[1], OW = out_size[2]
    shape = (n, c, OD, OH, OW)
    out = qops_empty(np, shape, x.dtype)
    lim_a = _adaptive_max_lim(out_size, (D, H, W))
    cdef const Py_ssize_t* lim = <const Py_ssize_t*>qops_ptr(lim_a)
    route = _plan(OP_AMAX, x, tuple(out_size), _ONE, _ONE, _ZERO, _ONE, with_indices,
                  None, lim)
    if route is R_EMPTY:
        return (out, np.empty(shape, np.int64)) if with_indices else out
    cdef int nt = qops_threads_for(x.size + out.size, GRAIN)
    cdef Py_ssize_t planes = n * c
    cdef char* xp = qops_ptr(x)
    cdef char* op = qops_ptr(out, True)
    cdef int64_t* ip
    cdef int err = 0, kind
    cdef qp_geom g
    cdef _Rows a
    if route is R_AMAX_IDX:
        index = np.empty(shape, dtype=np.int64)
        ip = <int64_t*>qops_ptr(index, True)
        kind = 2 if x.itemsize == 4 else (1 if x.dtype.kind == "i" else 0)
        with nogil:
            if kind == 2:
                _adaptive_max_rows[int32_t](<const int32_t*>xp, <int32_t*>op, ip, planes, D, H,
                                            W, OD, OH, OW, lim, nt)
            elif kind == 1:
                _adaptive_max_rows[int8_t](<const int8_t*>xp, <int8_t*>op, ip, planes, D, H, W,
                                           OD, OH, OW, lim, nt)
            else:
                _adaptive_max_rows[uint8_t](<const uint8_t*>xp, <uint8_t*>op, ip, planes, D, H,
                                            W, OD, OH, OW, lim, nt)
        return out, index
    if route is R_AMAX_SHORT:
        g = _geom(x, out, (1, 1, 1), (1, 1, 1), (0, 0, 0), (1, 1, 1))
        a.g = &g
        a.lim = lim
        a.recip = NULL
        a.avg = 0
        a.sgn = x.dtype.kind == "i"
        return _run_rows(K_SHORT, &a, x, out, nt)
    kind = 2 if x.itemsize == 4 else (1 if x.dtype.kind == "i" else 0)
    with nogil:
        if kind == 0:
            err = _amax_planes[uint8_t](<const uint8_t*>xp, <uint8_t*>op, planes * OD, D, H, W,
                                        OD, OH, OW, lim, nt)
        elif kind == 1:
            err = _amax_planes[int8_t](<const int8_t*>xp, <int8_t*>op, planes * OD, D, H, W, OD,
                                       OH, OW, lim, nt)
        else:
            err = _amax_planes[int32_t](<const int32_t*>xp, <int32_t*>op, planes * OD, D, H, W,
                                        OD, OH, OW, lim, nt)
    if err:
        raise MemoryError()
    return out
