"""numpy's BLAS in qops' float layers, on qops' threads.

The float layers (linear, attention) multiply with numpy's sgemm, whose OpenBLAS keeps a thread
pool of its own, one thread a core by default. Beside qops' OpenMP threads that pool contends
for the same cores: after a product OpenBLAS's threads keep polling for work while qops'
kernels run on every core, and qops' threads poll while OpenBLAS works (a dynamic-quantized
transformer encoder at 2 threads took twice its 1-thread time). So on the fast backend a float
layer's product calls numpy's own sgemm from qops' OpenMP threads (`blas_bmm` in
qops/_fast/linear.pyx), OpenBLAS held at one thread meanwhile: one pool for everything. A
product is one sgemm call on one thread, or one call per thread on column blocks (up to
ROW_SPLIT rows) or row blocks; a batch is shared out by entries. OpenBLAS's rounding depends on
the shape of each call, so, as with numpy's own threads, a float layer's last bits may differ
between thread counts (the quantized ops' never do).

OpenBLAS is found among the loaded libraries (/proc/self/maps) by the names numpy's wheels
(scipy-openblas, 64-bit integers) and plain OpenBLAS builds export. Where it is not found
(another BLAS, another OS) or on the ref backend, numpy multiplies as it is configured;
`qops.show_config()` says which.
"""
from __future__ import annotations

import ctypes
import os
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

_GET = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
        "openblas_get_num_threads64_", "openblas_get_num_threads")
_SET = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
        "openblas_set_num_threads64_", "openblas_set_num_threads")
# cblas_sgemm: names ending in 64_ take 64-bit integers (ILP64 builds)
_SGEMM = ("scipy_cblas_sgemm64_", "cblas_sgemm64_", "scipy_cblas_sgemm", "cblas_sgemm")

#: products below this many multiply-adds run as one call (splitting costs more than it gives)
SPLIT_MACS = 1 << 22
#: products of up to this many rows split by columns (each call then packs the small left
#: operand again), longer ones by rows (each packs the weight again)
ROW_SPLIT = 512

# None: not looked yet; False: no OpenBLAS; else (get, set, sgemm address, ilp64, name)
_found: Any = None


def _loaded_openblas() -> list:
    try:
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    paths = {line.split()[-1] for line in lines if len(line.split()) >= 6}
    return sorted(p for p in paths
                  if p.startswith("/") and "openblas" in os.path.basename(p).lower())


def _first(lib: ctypes.CDLL, names: tuple) -> Any:
    for name in names:
        fn = getattr(lib, name, None)
        if fn is not None:
            return fn
    return None


def _openblas() -> Any:
    global _found
    if _found is None:
        found: Any = False
        for path in _loaded_openblas():
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            get, set_ = _first(lib, _GET), _first(lib, _SET)
            gemm = _first(lib, _SGEMM)
            if get is not None and set_ is not None and gemm is not None:
                get.restype, get.argtypes = ctypes.c_int, []
                set_.restype, set_.argtypes = None, [ctypes.c_int]
                address = ctypes.cast(gemm, ctypes.c_void_p).value
                found = (get, set_, address, gemm.__name__.endswith("64_"),
                         os.path.basename(path))
                break
        _found = found
    return _found or None


def describe() -> str:
    """What governs numpy's BLAS threads in qops' float layers (for show_config)."""
    f = _openblas()
    if f is None:
        return "not found (numpy's BLAS runs at its own thread count)"
    return (f"OpenBLAS ({f[4]}): its sgemm on qops' threads in the float layers (fast "
            "backend), its own pool held at 1 thread meanwhile")


@contextmanager
def single_threaded() -> Iterator[None]:
    """numpy's OpenBLAS at one thread inside the block (restored after)."""
    f = _openblas()
    if f is None:
        yield
        return
    get, set_ = f[0], f[1]
    prev = get()
    if prev == 1:
        yield
        return
    set_(1)
    try:
        yield
    finally:
        set_(prev)


def _fast_linear():
    from qops import _config
    if _config.get_backend() != "fast":
        return None
    try:
        return _config.impl("linear")
    except ImportError:
        return None


def bmm(a: np.ndarray, b: np.ndarray, trans_b: bool = False) -> np.ndarray:
    """a (B, M, K) @ b (B, K, N), or @ b.transpose(0, 2, 1) for b (B, N, K) with trans_b, as
    float32, on qops' threads (see the module docstring)."""
    a = np.ascontiguousarray(a, np.float32)
    b = np.ascontiguousarray(b, np.float32)
    f = _openblas()
    k = _fast_linear() if f is not None else None
    nb, m, kk = a.shape
    n = b.shape[1] if trans_b else b.shape[2]
    if k is None or (not f[3] and max(m, n, kk, nb * m * kk, nb * n * kk) >= 2 ** 31):
        return np.matmul(a, b.transpose(0, 2, 1) if trans_b else b)
    from qops import _config
    threads = _config.get_num_threads()
    blocks, row_step = 1, 0
    if nb == 1 and threads > 1 and m * n * kk >= SPLIT_MACS:
        if m <= ROW_SPLIT:
            blocks = threads if n >= 16 * threads else 1
        else:
            row_step = -(-m // threads)
    with single_threaded():
        return k.blas_bmm(f[2], f[3], a, b, trans_b, blocks, row_step, threads)


def linear(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """x (M, K) @ weight (N, K).T as float32, on qops' threads."""
    return bmm(x[None], weight[None], trans_b=True)[0]
