/* qops_amx.h: what the AMX-INT8 kernels (conv, linear) share: whether this process may use the
 * tile registers, and loading a tile configuration. Included by AVX-512 VNNI builds; QOPS_AMX
 * is defined where the compiler has the AMX intrinsics (GCC 11+) on x86-64 Linux. */
#ifndef QOPS_AMX_H
#define QOPS_AMX_H
#if defined(__AVX512VNNI__) && defined(__linux__) && defined(__x86_64__) && defined(__GNUC__) \
    && __GNUC__ >= 11
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <cpuid.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <immintrin.h>
#define QOPS_AMX 1

/* The 64-byte operand of ldtilecfg (palette 1: tiles 0-7). */
typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} qops_tilecfg;

/* 1 when this CPU has AMX-TILE and AMX-INT8 and the kernel let this process use the tile
 * registers (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, 18: the permission is per process),
 * unless the environment variable QOPS_AMX is "0": then conv and linear run the AVX-512 VNNI
 * kernels, as on a CPU without AMX (how an AMX machine measures that tier). */
static int qops_amx_request(void) {
    unsigned int eax, ebx, ecx, edx;
    const char *off = getenv("QOPS_AMX");
    if (off && off[0] == '0' && off[1] == 0) return 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return 0;
    if (!((edx >> 24) & 1) || !((edx >> 25) & 1)) return 0;
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

/* A configuration of palette 1, every tile unused (0 rows, 0 bytes) until set. */
static inline void qops_tilecfg_init(qops_tilecfg *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->palette = 1;
}

/* Load `cfg`. GCC 12's ldtilecfg builtin does not tell the optimizer that it reads its operand,
 * which then dropped the stores filling it (the tiles stayed unconfigured: SIGSEGV at the first
 * tile load); the empty asm with a memory clobber keeps them. */
__attribute__((target("amx-tile"))) static inline void qops_tilecfg_load(const qops_tilecfg *cfg) {
    __asm__ volatile("" : : "r"(cfg) : "memory");
    _tile_loadconfig(cfg);
}

/* Store accumulator tile t (0-3, 16 rows of 64 bytes) to buf: the tile number of
 * _tile_stored must be a constant. */
__attribute__((target("amx-tile"))) static inline void qops_tile_store_acc(int t, int32_t *buf) {
    switch (t) {
    case 0: _tile_stored(0, buf, 64); break;
    case 1: _tile_stored(1, buf, 64); break;
    case 2: _tile_stored(2, buf, 64); break;
    default: _tile_stored(3, buf, 64); break;
    }
}
#endif
#endif
