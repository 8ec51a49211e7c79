"""Backend choice ("fast" or "ref") and thread count, settable globally or in a `with`."""
import contextlib
import importlib
import os

__all__ = ["set_backend", "get_backend", "backend", "set_num_threads", "get_num_threads",
           "threads", "impl"]

_BACKENDS = ("fast", "ref")
_state = {"backend": "fast", "threads": None}


def _default_threads():
    env = os.environ.get("OMP_NUM_THREADS", "")
    try:
        n = int(env.split(",")[0])
        if n > 0:
            return n
    except ValueError:
        pass
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def set_backend(name):
    """Select the implementation every qops op runs: "fast" (Cython) or "ref" (numpy).

    Parameters
    ----------
    name : {"fast", "ref"}
    """
    if name not in _BACKENDS:
        raise ValueError(f"backend must be 'fast' or 'ref'; got {name!r}")
    _state["backend"] = name


def get_backend():
    """Return the active backend name, "fast" or "ref"."""
    return _state["backend"]


@contextlib.contextmanager
def backend(name):
    """Run the body of a `with` block on backend `name`, then restore the previous one."""
    previous = get_backend()
    set_backend(name)
    try:
        yield
    finally:
        set_backend(previous)


def set_num_threads(n):
    """Set how many OpenMP threads the fast kernels use (results never depend on it).

    Parameters
    ----------
    n : int >= 1
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"number of threads must be an int >= 1; got {n!r}")
    _state["threads"] = n


def get_num_threads():
    """Return the number of threads the fast kernels use."""
    if _state["threads"] is None:
        _state["threads"] = _default_threads()
    return _state["threads"]


@contextlib.contextmanager
def threads(n):
    """Run the body of a `with` block with `n` threads, then restore the previous count."""
    previous = get_num_threads()
    set_num_threads(n)
    try:
        yield
    finally:
        set_num_threads(previous)


_modules = {"fast": {}, "ref": {}}     # backend -> family -> kernel module
_omp = []                              # [set_num_threads of the compiled kernels], once loaded


def _load(backend, family):
    if backend == "ref":
        mod = importlib.import_module(f"qops._ref.{family}")
    else:
        from qops import _fast
        mod = _fast.load(family)
        if not _omp:
            _omp.append(_fast._cpu.set_num_threads)
    _modules[backend][family] = mod
    return mod


def impl(family):
    """The module of op family `family` ("quant", "conv", ...) for the active backend."""
    # Called once per op, so it is kept to two dict lookups and, for "fast", one C call:
    # OpenMP's thread count is per OS thread, so it is set on every call rather than cached.
    backend = _state["backend"]
    mod = _modules[backend].get(family)
    if mod is None:
        mod = _load(backend, family)
    if backend == "fast":
        _omp[0](_state["threads"] or get_num_threads())
    return mod
