/* qops_cpu.h: run-time CPU features and OpenMP control (qops/_fast/_cpu.pyx).
 * Compiled into every ISA's _cpu module; the probe itself must run on any x86-64, so it uses
 * GCC's __builtin_cpu_supports (CPUID plus the OS's XSAVE state), never an ISA intrinsic.
 */
#ifndef QOPS_CPU_H
#define QOPS_CPU_H

/* 1 if this CPU and OS can run code compiled for `which` (0 baseline, 1 AVX2, 2 AVX-512).
 * The AVX-512 build is compiled with F/BW/VL/DQ/CD/VNNI and also uses AVX2 and FMA, so all of
 * them must be present; anything but GCC or clang on x86 gets the baseline only. */
static int qops_cpu_supports(int which) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    switch (which) {
    case 1: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case 2: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
                && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")
                && __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512vnni")
                && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
#endif
    return which == 0;
}

/* QOPS_DEBUG=1 builds turn Cython's bounds checks back on; show_config reports it. */
#ifdef QOPS_DEBUG
static const int qops_debug_build = 1;
#else
static const int qops_debug_build = 0;
#endif

/* Without OpenMP everything runs on the calling thread, and the thread count is always 1
 * (qops_omp_threads, qops_common.h). */
#ifdef _OPENMP
#include <omp.h>
static const int qops_have_openmp = 1;
static void qops_set_threads(int n) { omp_set_num_threads(n); }
#else
static const int qops_have_openmp = 0;
static void qops_set_threads(int n) { (void)n; }
#endif

#endif /* QOPS_CPU_H */
