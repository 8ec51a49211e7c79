# Shared declarations of the fast kernels: integer types, fused types, the numeric primitives
# of qops_common.h. Every _fast/<family>.pyx cimports from here.
from libc.stdint cimport int8_t, uint8_t, int16_t, int32_t, int64_t
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE

ctypedef fused q8_t:
    uint8_t
    int8_t

ctypedef fused qint_t:
    uint8_t
    int8_t
    int32_t

ctypedef int32_t acc_t    # integer accumulators (exact int32, as fbgemm's)

cdef extern from "qops_common.h" nogil:
    int qops_threads_for(Py_ssize_t work, Py_ssize_t grain)
    int qops_omp_threads()
    Py_ssize_t qops_chunk64(Py_ssize_t n, int threads)
    float qops_rintf(float x)
    float qops_clampf(float v, float lo, float hi)
    int32_t qops_q_fma(float x, float inv, float zpf, float qmin, float qmax)
    int32_t qops_q_leg8(float x, float inv, float zpf, float qmin, float qmax)
    int32_t qops_q_leg32(float x, float inv, float zpf)
    int32_t qops_q_vec(float x, float inv, int32_t zp, float lo, float hi)
    float qops_d_sc(int32_t q, float s, int32_t zp)
    float qops_d_vec(int32_t q, float s, float s_negzp)
    float qops_d_pc(int32_t q, double scale, int32_t zp)


cdef inline char* qops_ptr(object a, bint writable=False) except NULL:
    """The data pointer of C-contiguous array `a`, which the caller keeps alive.

    A third of the cost of a typed memoryview, which matters for ops on small tensors; raises
    BufferError for non-contiguous (or, with `writable`, read-only) arrays, so no kernel ever
    walks a strided array as if it were flat.
    """
    cdef Py_buffer view
    PyObject_GetBuffer(a, &view, PyBUF_WRITABLE if writable else PyBUF_SIMPLE)
    cdef char* p = <char*>view.buf
    PyBuffer_Release(&view)
    return p


cdef inline object qops_empty(object np, object shape, object dtype):
    """np.empty(shape, dtype) (pass the numpy module as `np`), 64-byte aligned when large.

    glibc hands large blocks out 16 bytes past a page boundary, so every 64-byte vector store
    into a plain np.empty output straddles two cache lines: measured, that makes a streaming
    op (copy, relu, add) 25-40% slower. Large outputs are therefore cut from a block 64 bytes
    longer (one allocation, so a loop of calls keeps reusing the same cache-warm block); small
    ones keep the cheaper plain allocation.
    """
    d = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
    cdef Py_ssize_t n = 1, nbytes
    for e in shape:
        n *= <Py_ssize_t>e
    nbytes = n * <Py_ssize_t>d.itemsize
    if nbytes < 65536:
        return np.empty(shape, d)
    buf = np.empty(nbytes + 64, np.uint8)
    cdef Py_ssize_t off = (64 - (<size_t>qops_ptr(buf, True)) % 64) % 64
    # one constructor call: half the cost of slicing, viewing and reshaping
    return np.ndarray(shape, d, buf, off)


cdef inline object qops_aligned(object np, object a):
    """A copy of array `a`, flat and 64-byte aligned whatever its size (packed weights: each
    tile or group row then starts a cache line)."""
    flat = np.ascontiguousarray(a).reshape(-1)
    buf = np.empty(flat.nbytes + 64, np.uint8)
    cdef Py_ssize_t off = (64 - (<size_t>qops_ptr(buf, True)) % 64) % 64
    out = np.ndarray(flat.shape, flat.dtype, buf, off)
    out[:] = flat
    return out


cdef inline tuple qops_range8(object dtype):
    """(qmin, qmax) of an 8-bit integer numpy dtype (np.iinfo is slow)."""
    return (0, 255) if dtype.kind == "u" else (-128, 127)
