/* 256-bit helpers shared by the AVX2 kernels of several families (arith, norm, quant).
 *
 * Byte blocks stay in 128-bit lanes: Zen 3 runs lane-crossing shuffles (vpmovzxbd ymm,
 * vpermd) as several uops on its two shuffle pipes. A block of 32 bytes becomes four vectors
 * of 32-bit values holding elements 0-3|16-19, 4-7|20-23, 8-11|24-27 and 12-15|28-31, the
 * order in which the per-lane packs of qops_narrow32 put them back, so no permute is needed.
 */
#ifndef QOPS_AVX2_H
#define QOPS_AVX2_H
#if defined(__AVX2__)
#include <immintrin.h>

/* The 32 bytes of x as float32 u - c, exactly, in the block order above. Each byte u (the
 * raw byte, or the byte + 128 for int8 data after the xor) goes under the half-word 0x4B00,
 * which makes the float 2^23 + u; one subtraction of off = 2^23 + c (exact for |c| < 2^23)
 * leaves the integer u - c exactly. That replaces a widening, an integer subtraction and a
 * conversion per 8 values. */
static inline __attribute__((always_inline)) void
qops_bytes_to_f32x4(__m256i x, int sgn, __m256 off, __m256 f[4]) {
    const __m256i z = _mm256_setzero_si256(), m = _mm256_set1_epi16(0x4B00);
    if (sgn) x = _mm256_xor_si256(x, _mm256_set1_epi8((char)0x80));
    __m256i wl = _mm256_unpacklo_epi8(x, z), wh = _mm256_unpackhi_epi8(x, z);
    f[0] = _mm256_sub_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(wl, m)), off);
    f[1] = _mm256_sub_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(wl, m)), off);
    f[2] = _mm256_sub_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(wh, m)), off);
    f[3] = _mm256_sub_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(wh, m)), off);
}

/* off for qops_bytes_to_f32x4 that leaves q - zp (int8 bytes are biased by the xor). */
static inline __m256 qops_f32_offset(int32_t zp, int sgn) {
    return _mm256_set1_ps(8388608.0f + (float)(sgn ? zp + 128 : zp));
}

/* 32 bytes, in order, from four vectors of int32 results (before the zero point) in the block
 * order above: the packs saturate (int32 -> int16, + zo in 16 bits, -> 8 bits), which clamps
 * to the dtype's range whenever zo lies in it; relu: then the byte max with zo. */
static inline __attribute__((always_inline)) __m256i
qops_narrow32(__m256i r0, __m256i r1, __m256i r2, __m256i r3, __m256i zo16, __m256i zo8,
              int sgn, int relu) {
    __m256i w0 = _mm256_adds_epi16(_mm256_packs_epi32(r0, r1), zo16);
    __m256i w1 = _mm256_adds_epi16(_mm256_packs_epi32(r2, r3), zo16);
    __m256i r = sgn ? _mm256_packs_epi16(w0, w1) : _mm256_packus_epi16(w0, w1);
    if (relu) r = sgn ? _mm256_max_epi8(r, zo8) : _mm256_max_epu8(r, zo8);
    return r;
}

/* The 32 bytes 0, 1, ..., 31 (plus k): every raw byte value, 32 at a time. */
static inline __m256i qops_iota32(int k) {
    return _mm256_add_epi8(_mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
                                            15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26,
                                            27, 28, 29, 30, 31),
                           _mm256_set1_epi8((char)k));
}
#endif
#endif
