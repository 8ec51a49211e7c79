# C declarations of the pool family's kernels, cimported by pool.pyx (no module of its own:
# extern blocks only, so nothing is imported at run time).
from libc.stdint cimport int8_t, uint8_t, int16_t, int32_t

cdef extern from "qops_pool.h" nogil:
    # opaque here: qops_pool_common.h declares the fields, the *_init functions fill them
    ctypedef struct qp_geom:
        pass
    ctypedef struct qp_irq:
        pass
    ctypedef struct qp_avgq:
        pass
    void qp_geom_init(qp_geom* g, Py_ssize_t D, Py_ssize_t H, Py_ssize_t W, Py_ssize_t OD,
                      Py_ssize_t OH, Py_ssize_t OW, const Py_ssize_t* k, const Py_ssize_t* s,
                      const Py_ssize_t* p, const Py_ssize_t* d)
    void qp_irq_init(qp_irq* iq, const int16_t* t, Py_ssize_t stride, int sh, int kind)
    void qp_avgq_init(qp_avgq* aq, const int32_t* cls, const int32_t* zt, const float* mt,
                      float zp, const qp_irq* iq)
    void qp_short_lim(const qp_geom* g, Py_ssize_t* lim)
    int QP_SIMD
    int QP_SHORT
    int QP_AVG3
    int QP_MAX_ROWS
    int QP_ERR_NOMEM
    int qp_cpu_vbmi()
    int qp_max_rows(const uint8_t* x, uint8_t* out, const qp_geom* g, Py_ssize_t g0,
                    Py_ssize_t g1, int sgn)
    int qp_avg_rows(const uint8_t* x, uint8_t* out, const qp_geom* g, Py_ssize_t g0,
                    Py_ssize_t g1, const int32_t* cls, const int32_t* zt, const float* mt,
                    float zp, int32_t qmin, int32_t qmax, int sgn, const qp_irq* iq)
    void qp_avg3_rows(const uint8_t* x, uint8_t* out, const qp_geom* g, Py_ssize_t g0,
                      Py_ssize_t g1, const int32_t* cls, const qp_irq* iq, Py_ssize_t ow3,
                      int cmp, int sgn)
    void qp_max_s2_rows(const uint8_t* x, uint8_t* out, const qp_geom* g, Py_ssize_t g0,
                        Py_ssize_t g1, int sgn)
    void qp_avg2x2_rows_g(const uint8_t* x, uint8_t* out, const qp_geom* g, Py_ssize_t g0,
                          Py_ssize_t g1, int sgn, const qp_irq* iq, Py_ssize_t cz)
    int qp_short_avg_rows_g(const uint8_t* x, uint8_t* out, const qp_geom* g,
                            const Py_ssize_t* lim, Py_ssize_t g0, Py_ssize_t g1, int sgn,
                            const qp_avgq* aq)
    int qp_short_rows_g(const uint8_t* x, uint8_t* out, const qp_geom* g, const Py_ssize_t* lim,
                        const float* recip, Py_ssize_t g0, Py_ssize_t g1, int avg, int sgn)
    void qp_fold_max128(const uint8_t* x, Py_ssize_t W, Py_ssize_t rows, uint8_t* buf, int first,
                        int sgn)
    void qp_row_u8(int32_t* a, const uint8_t* s, Py_ssize_t n, int first)
    void qp_row_s8(int32_t* a, const int8_t* s, Py_ssize_t n, int first)
    float floorf(float)
    float ceilf(float)

cdef extern from "reduce_sum.h" nogil:
    void qops_run_means(const uint8_t* x, uint8_t* out, Py_ssize_t r0, Py_ssize_t r1,
                        Py_ssize_t n, int is_signed, float mul, float div)

cdef extern from "pool_cl.h" nogil:
    void qpc_avg_row(const void* x, void* out, int sgn, Py_ssize_t H, Py_ssize_t W, Py_ssize_t C,
                     Py_ssize_t OW, Py_ssize_t d0, Py_ssize_t d1, Py_ssize_t h0, Py_ssize_t h1,
                     const Py_ssize_t* w0, const Py_ssize_t* w1, const int32_t* sub,
                     const float* mul, float add, float post, float qmin, float qmax)
    void qpc_max_row(const void* const* rows, void* out, int kind, Py_ssize_t W, Py_ssize_t C,
                     Py_ssize_t OW, Py_ssize_t sW, Py_ssize_t pW, Py_ssize_t kW, Py_ssize_t dW,
                     Py_ssize_t nrows)
