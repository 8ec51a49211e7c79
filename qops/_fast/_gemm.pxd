# C declarations of the GEMM core (qops_gemm.h), cimported by the families built on it
# (linear, conv, rnn): extern blocks only, so nothing is imported at run time. Each family
# compiles its own copy of the header: pack and multiply within one module.
from libc.stdint cimport int8_t, uint8_t, int32_t

cdef extern from "qops_gemm.h" nogil:
    ctypedef struct qops_gemm_b:
        const int8_t *data
        const int32_t *wsum
        const int32_t *wzp
        Py_ssize_t N
        Py_ssize_t K
    ctypedef struct qops_gemm_out:
        int kind
        const float *bias
        const float *mult
        int32_t out_zp
        int relu
        void *out
        Py_ssize_t ldc
    enum:
        QOPS_GEMM_U8
        QOPS_GEMM_F32
        QOPS_GEMM_I32
    Py_ssize_t qops_gemm_packed_size(Py_ssize_t N, Py_ssize_t K)
    Py_ssize_t qops_gemm_kpad(Py_ssize_t K)
    void qops_gemm_pack(const int8_t *W, Py_ssize_t ldw, Py_ssize_t N, Py_ssize_t K,
                        int8_t *packed, int32_t *wsum)
    void qops_gemm_pack_ex(const int8_t *W, Py_ssize_t ldw, Py_ssize_t N, Py_ssize_t K,
                           int8_t *packed, int32_t *wsum, int reorder)
    void qops_gemm_pack_t(const uint8_t *B, Py_ssize_t ldb, Py_ssize_t N, Py_ssize_t K,
                          uint8_t flip, uint8_t *tmp, int8_t *packed, int32_t *wsum)
    Py_ssize_t qops_gemm_packed_paired(const int8_t *data, Py_ssize_t N, Py_ssize_t K)
    void qops_gemm(const uint8_t *A, Py_ssize_t lda, Py_ssize_t M, int32_t a_zp,
                   const qops_gemm_b *B, const qops_gemm_out *out)
    void qops_gemm_mt(const uint8_t *A, Py_ssize_t lda, Py_ssize_t M, int32_t a_zp,
                      const qops_gemm_b *B, const qops_gemm_out *out, int nthreads)
    void qops_gemm_mt_corder(const uint8_t *x, Py_ssize_t hw, Py_ssize_t K, Py_ssize_t M,
                             int32_t a_zp, const qops_gemm_b *B, const qops_gemm_out *out,
                             int nthreads, uint8_t *bufs)
    Py_ssize_t qops_gemm_rows_scratch(Py_ssize_t M, Py_ssize_t K)
    Py_ssize_t qops_gemm_npanels(Py_ssize_t N)
    int qops_gemm_amx(int on)
