# Shared declarations of the fast kernels: integer types, fused types, the numeric primitives
# of qops_common.h. Every _fast/<family>.pyx cimports from here.
from libc.stdint cimport int8_t, uint8_t, int16_t, int32_t, int64_t

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
    float qops_rintf(float x)
    float qops_clampf(float v, float lo, float hi)
    int32_t qops_q_fma(float x, float inv, float zpf, float qmin, float qmax)
    int32_t qops_q_leg8(float x, float inv, float zpf, float qmin, float qmax)
    int32_t qops_q_leg32(float x, float inv, float zpf)
    int32_t qops_q_vec(float x, float inv, int32_t zp, float lo, float hi)
    float qops_d_sc(int32_t q, float s, int32_t zp)
    float qops_d_vec(int32_t q, float s, float s_negzp)
    float qops_d_pc(int32_t q, double scale, int32_t zp)
