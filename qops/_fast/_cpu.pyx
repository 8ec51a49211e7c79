# Run-time CPU features and OpenMP control, compiled like every family (all ISAs).
cdef extern from *:
    """
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
    #ifdef QOPS_DEBUG
    static const int qops_debug_build = 1;
    #else
    static const int qops_debug_build = 0;
    #endif
    #ifdef _OPENMP
    #include <omp.h>
    static const int qops_have_openmp = 1;
    static void qops_set_threads(int n) { omp_set_num_threads(n); }
    static int qops_max_threads(void) { return omp_get_max_threads(); }
    #else
    static const int qops_have_openmp = 0;
    static void qops_set_threads(int n) { (void)n; }
    static int qops_max_threads(void) { return 1; }
    #endif
    """
    int qops_cpu_supports(int which) nogil
    const int qops_have_openmp
    const int qops_debug_build
    void qops_set_threads(int n) nogil
    int qops_max_threads() nogil


def supports(isa):
    """True if this CPU (and OS) can run code compiled for `isa`."""
    return bool(qops_cpu_supports({"baseline": 0, "avx2": 1, "avx512": 2}[isa]))


def have_openmp():
    """True if this module was compiled with OpenMP."""
    return bool(qops_have_openmp)


def set_num_threads(int n):
    """Set the OpenMP thread count of the calling thread's parallel regions."""
    qops_set_threads(n)


def get_max_threads():
    """OpenMP's default thread count (1 without OpenMP)."""
    return qops_max_threads()


def debug_build():
    """True if built with QOPS_DEBUG=1 (Cython bounds checks on)."""
    return bool(qops_debug_build)
