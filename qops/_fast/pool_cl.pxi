# Included by pool.pyx (see its docstring): channels-last (N, D, H, W, C) pools, one output
# row (n, od, oh) per work item, each pixel's window reduced in registers by pool_cl.h.
# qops/_ops/pool.py sends inputs lying channels last in memory (max pools without indices)
# to these entry points.

cdef int _max_cl(const qint_t* x, qint_t* out, Py_ssize_t N, Py_ssize_t D, Py_ssize_t H,
                 Py_ssize_t W, Py_ssize_t C, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                 Py_ssize_t kD, Py_ssize_t kH, Py_ssize_t kW, Py_ssize_t sD, Py_ssize_t sH,
                 Py_ssize_t sW, Py_ssize_t pD, Py_ssize_t pH, Py_ssize_t pW, Py_ssize_t dD,
                 Py_ssize_t dH, Py_ssize_t dW, int nt) noexcept nogil:
    # One output row (n, od, oh) per work item: the window's valid input rows (D and H taps)
    # are listed, then pool_cl.h takes each pixel's max over them in 64-byte registers
    # (rather than taking each tap's max through an output row in memory). The row lists are
    # per-thread slots of one block allocated before the parallel region; returns -1, nothing
    # written, if it cannot be had.
    cdef Py_ssize_t r
    cdef int kind = 2 if qint_t is int32_t else (1 if qint_t is int8_t else 0)
    cdef size_t slot
    cdef const qint_t** rows = NULL
    cdef char* block = <char*>_slots(nt, kD * kH * sizeof(qint_t*), &slot)
    if block == NULL:
        return -1
    if nt <= 1:
        # no parallel region (see _avg_cl)
        for r in range(N * OD * OH):
            _max_cl_row(x, out, r, <const qint_t**>block, kind, D, H, W, C, OD, OH, OW, kD, kH,
                        kW, sD, sH, sW, pD, pH, pW, dD, dH, dW)
        free(block)
        return 0
    with parallel(num_threads=nt):
        rows = <const qint_t**>(block + threadid() * slot)
        for r in prange(N * OD * OH, schedule="static"):
            _max_cl_row(x, out, r, rows, kind, D, H, W, C, OD, OH, OW, kD, kH, kW, sD, sH, sW,
                        pD, pH, pW, dD, dH, dW)
    free(block)
    return 0


cdef inline void _max_cl_row(const qint_t* x, qint_t* out, Py_ssize_t r, const qint_t** rows,
                             int kind, Py_ssize_t D, Py_ssize_t H, Py_ssize_t W, Py_ssize_t C,
                             Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t kD,
                             Py_ssize_t kH, Py_ssize_t kW, Py_ssize_t sD, Py_ssize_t sH,
                             Py_ssize_t sW, Py_ssize_t pD, Py_ssize_t pH, Py_ssize_t pW,
                             Py_ssize_t dD, Py_ssize_t dH, Py_ssize_t dW) noexcept nogil:
    # output row r = (n, od, oh): its window's valid input rows listed in `rows`, then reduced
    cdef Py_ssize_t n = r // (OD * OH)
    cdef Py_ssize_t od = r // OH - n * OD
    cdef Py_ssize_t oh = r - (n * OD + od) * OH
    cdef Py_ssize_t i, j, id_, ih, nr = 0
    for i in range(kD):
        id_ = od * sD - pD + i * dD
        if id_ < 0 or id_ >= D:
            continue
        for j in range(kH):
            ih = oh * sH - pH + j * dH
            if 0 <= ih < H:
                rows[nr] = x + ((n * D + id_) * H + ih) * W * C
                nr = nr + 1
    qpc_max_row(<const void* const*>rows, out + r * OW * C, kind, W, C, OW, sW, pW, kW, dW, nr)


def max_pool_cl(x, kernel_size, stride, padding, dilation, out_size):
    """max_pool (without indices) of channels-last data: x (N, D, H, W, C) -> (N, OD, OH, OW, C)."""
    x = np.ascontiguousarray(x)
    (kD, kH, kW), (sD, sH, sW) = kernel_size, stride
    (pD, pH, pW), (dD, dH, dW) = padding, dilation
    N, D, H, W, C = x.shape
    OD, OH, OW = out_size
    out = qops_empty(np, (N, OD, OH, OW, C), x.dtype)
    if _plan(OP_MAX_CL, x, tuple(out_size), _ONE, _ONE, _ZERO, _ONE, False, None,
             NULL) is R_EMPTY:
        return out
    nt = qops_threads_for(x.size + out.size * kW, GRAIN)
    cdef const uint8_t* xp = <const uint8_t*>qops_ptr(x)
    cdef uint8_t* op = <uint8_t*>qops_ptr(out, True)
    dt = x.dtype           # (kind and itemsize: comparing numpy dtypes costs more)
    if dt.kind == "u":
        err = _max_cl[uint8_t](xp, op, N, D, H, W, C, OD, OH, OW, kD, kH, kW, sD, sH, sW, pD,
                               pH, pW, dD, dH, dW, nt)
    elif dt.itemsize == 1:
        err = _max_cl[int8_t](<const int8_t*>xp, <int8_t*>op, N, D, H, W, C, OD, OH, OW, kD, kH,
                              kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, nt)
    else:
        err = _max_cl[int32_t](<const int32_t*>xp, <int32_t*>op, N, D, H, W, C, OD, OH, OW, kD,
                               kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW, nt)
    if err:
        raise MemoryError()
    return out


cdef void _avg_cl(const q8_t* x, q8_t* out, Py_ssize_t N, Py_ssize_t D, Py_ssize_t H,
                  Py_ssize_t W, Py_ssize_t C, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                  const Py_ssize_t* lim, const int32_t* sub, const float* mul, float add,
                  float post, float qmin, float qmax, int nt) noexcept nogil:
    # One output row (n, od, oh) per work item (pool_cl.h sums each pixel's window in
    # registers). lim = d0[OD], d1[OD], h0[OH], h1[OH], w0[OW], w1[OW], clipped to the input.
    cdef Py_ssize_t r
    if nt <= 1:
        # no parallel region: libgomp's barriers make two futex calls even in a team of one
        for r in range(N * OD * OH):
            _avg_cl_row(x, out, r, D, H, W, C, OD, OH, OW, lim, sub, mul, add, post, qmin, qmax)
        return
    for r in prange(N * OD * OH, schedule="static", num_threads=nt):
        _avg_cl_row(x, out, r, D, H, W, C, OD, OH, OW, lim, sub, mul, add, post, qmin, qmax)


cdef inline void _avg_cl_row(const q8_t* x, q8_t* out, Py_ssize_t r, Py_ssize_t D, Py_ssize_t H,
                             Py_ssize_t W, Py_ssize_t C, Py_ssize_t OD, Py_ssize_t OH,
                             Py_ssize_t OW, const Py_ssize_t* lim, const int32_t* sub,
                             const float* mul, float add, float post, float qmin,
                             float qmax) noexcept nogil:
    cdef Py_ssize_t n = r // (OD * OH)
    cdef Py_ssize_t od = r // OH - n * OD
    cdef Py_ssize_t oh = r - (n * OD + od) * OH
    cdef int sgn = q8_t is int8_t
    qpc_avg_row(x + n * D * H * W * C, out + r * OW * C, sgn, H, W, C, OW, lim[od],
                lim[OD + od], lim[2 * OD + oh], lim[2 * OD + OH + oh],
                lim + 2 * OD + 2 * OH, lim + 2 * OD + 2 * OH + OW,
                sub + (od * OH + oh) * OW, mul + (od * OH + oh) * OW, add, post, qmin, qmax)


_CL_TABLES = {}


cdef object _avg_cl_run(_Op op, x, out_size, tables):
    """Run _avg_cl on x (N, D, H, W, C) with tables = (lim, sub, mul, add, post): the
    clipped windows per axis (d0, d1, h0, h1, w0, w1) and sub and mul per output (OD, OH,
    OW)."""
    cdef Py_ssize_t N, D, H, W, C, OD, OH, OW
    N, D, H, W, C = x.shape
    OD, OH, OW = out_size
    out = qops_empty(np, (N, OD, OH, OW, C), x.dtype)
    if _plan(op, x, tuple(out_size), _ONE, _ONE, _ZERO, _ONE, False, None, NULL) is R_EMPTY:
        return out
    lim_a, sub_a, mul_a, add_o, post_o = tables
    cdef float add = add_o, post = post_o
    cdef const Py_ssize_t* lim = <const Py_ssize_t*>qops_ptr(lim_a)
    cdef const int32_t* sp = <const int32_t*>qops_ptr(sub_a)
    cdef const float* mp = <const float*>qops_ptr(mul_a)
    cdef int nt = qops_threads_for(x.size + out.size, GRAIN)
    cdef const uint8_t* xp = <const uint8_t*>qops_ptr(x)
    cdef uint8_t* op_ = <uint8_t*>qops_ptr(out, True)
    if x.dtype.kind == "u":
        with nogil:
            _avg_cl[uint8_t](xp, op_, N, D, H, W, C, OD, OH, OW, lim, sp, mp, add, post, 0.0,
                             255.0, nt)
    else:
        with nogil:
            _avg_cl[int8_t](<const int8_t*>xp, <int8_t*>op_, N, D, H, W, C, OD, OH, OW, lim,
                            sp, mp, add, post, -128.0, 127.0, nt)
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
        return _avg_cl_run(OP_AVG_CL, x, out_size, tables)
    # windows clipped to the input: start = max(o*s - p, 0), end = min(o*s - p + k, L)
    lims = []
    for o, s, p, k, L in zip(out_size, stride, padding, kernel_size, x.shape[1:4]):
        start = np.arange(o, dtype=np.intp) * s - p
        lims += [np.maximum(start, 0), np.minimum(start + k, L)]
    # size*zp and f32(1/div) per output, as the C-order kernels' tables (rows by class); the
    # zero point added after rounding (post)
    cls, zt, mt, _, _ = _avg_tables(out_size, stride, padding, kernel_size, x.shape[1:4],
                                    count_include_pad, divisor_override, zero_point)
    return _avg_cl_run(OP_AVG_CL, x, out_size,
                       _cl_tables(key, np.concatenate(lims), zt[cls], mt[cls], 0.0,
                                  float(zero_point)))


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
    return _avg_cl_run(OP_AAVG_CL, x, out_size, tables)
