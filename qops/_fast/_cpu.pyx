# Run-time CPU features and OpenMP control, compiled like every family (all ISAs).
cdef extern from "qops_cpu.h":
    int qops_cpu_supports(int which) nogil
    const int qops_have_openmp
    const int qops_debug_build
    void qops_set_threads(int n) nogil

cdef extern from "qops_common.h":
    int qops_omp_threads() nogil


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
    return qops_omp_threads()


def debug_build():
    """True if built with QOPS_DEBUG=1 (Cython bounds checks on)."""
    return bool(qops_debug_build)
