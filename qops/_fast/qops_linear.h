/* qops_linear.h: the linear family's own C (qops/_fast/linear.pyx): which GEMM tier this
 * build compiled (for its routes), and the min/max scan of dynamic linear's input.
 * The GEMM core itself is qops_gemm.h.
 */
#ifndef QOPS_LINEAR_H
#define QOPS_LINEAR_H
#include <stddef.h>
#include <stdint.h>
#include "qops_gemm.h"

/* The GEMM tier of this build: 2 AVX-512 VNNI (with AMX where the CPU grants it), 1 AVX2,
 * 0 portable C. */
#if defined(QG_VNNI)
#define QL_TIER 2
#elif defined(QG_AVX2)
#define QL_TIER 1
#else
#define QL_TIER 0
#endif

/* min and max of a float run, NaN flagged apart. Written with intrinsics: a plain
 * a < b ? a : b reduction does not vectorize without fast-math (it is not associative
 * under NaN). */
#if defined(__SSE2__)
#include <immintrin.h>
#endif
static void qops_lin_minmax(const float *x, ptrdiff_t n, float *lo, float *hi, int *nan) {
    ptrdiff_t i = 0;
    float mn = x[0], mx = x[0];
    int bad = 0;
#if defined(__AVX512F__)
    if (n >= 16) {
        __m512 vmn = _mm512_set1_ps(x[0]), vmx = vmn;
        __mmask16 un = 0;
        for (; i + 16 <= n; i += 16) {
            __m512 v = _mm512_loadu_ps(x + i);
            vmn = _mm512_min_ps(vmn, v);
            vmx = _mm512_max_ps(vmx, v);
            un |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        }
        mn = _mm512_reduce_min_ps(vmn);
        mx = _mm512_reduce_max_ps(vmx);
        bad = un != 0;
    }
#elif defined(__SSE2__)
    if (n >= 4) {
        __m128 vmn = _mm_set1_ps(x[0]), vmx = vmn, un = _mm_setzero_ps();
        float a[4], b[4];
        for (; i + 4 <= n; i += 4) {
            __m128 v = _mm_loadu_ps(x + i);
            vmn = _mm_min_ps(vmn, v);
            vmx = _mm_max_ps(vmx, v);
            un = _mm_or_ps(un, _mm_cmpunord_ps(v, v));
        }
        _mm_storeu_ps(a, vmn);
        _mm_storeu_ps(b, vmx);
        for (int j = 0; j < 4; j++) {
            mn = a[j] < mn ? a[j] : mn;
            mx = b[j] > mx ? b[j] : mx;
        }
        bad = _mm_movemask_ps(un) != 0;
    }
#endif
    for (; i < n; i++) {
        float v = x[i];
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
        bad |= v != v;
    }
    *lo = mn; *hi = mx; *nan = bad;
}


#endif
