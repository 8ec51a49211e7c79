"""Backend choice ("fast" or "ref") and thread count, settable globally or in a `with`.

The setters (`set_backend`, `set_num_threads`) change the process-wide default. The context
managers (`backend`, `threads`) override it for the calling thread (and asyncio task) only, so
one Python thread's `with qops.backend("ref")` never switches another's.
"""
from __future__ import annotations

import contextlib
import contextvars
import importlib
import os
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import ModuleType

__all__ = ["set_backend", "get_backend", "backend", "set_num_threads", "get_num_threads",
           "threads", "impl"]

_BACKENDS = ("fast", "ref")
# OpenMP keeps one pool of threads per process; far more threads than that is a typo, and
# 2**31 would make every parallel region fail to start.
MAX_THREADS = 1024
_state: dict[str, Any] = {"backend": "fast", "threads": None, "pool_started": False,
                          "forked": False}
# Per-thread overrides set by the context managers; None means "use the global default".
_ctx_backend: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar(
    "qops_backend", default=None)
_ctx_threads: contextvars.ContextVar[Optional[int]] = contextvars.ContextVar(
    "qops_threads", default=None)


def _default_threads():
    env = os.environ.get("OMP_NUM_THREADS", "")
    try:
        n = int(env.split(",")[0])
        if n > 0:
            return min(n, MAX_THREADS)
    except ValueError:
        pass
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _check_backend(name):
    if not isinstance(name, str) or name not in _BACKENDS:
        raise ValueError(f"backend must be 'fast' or 'ref'; got {name!r}")


def set_backend(name: str) -> None:
    """Select the implementation every qops op runs: "fast" (Cython) or "ref" (numpy).

    Sets the process-wide default; inside a `with qops.backend(...)` block it also replaces
    that block's choice for the calling thread until the block ends.

    Parameters
    ----------
    name : {"fast", "ref"}
    """
    _check_backend(name)
    _state["backend"] = name
    if _ctx_backend.get() is not None:
        _ctx_backend.set(name)


def get_backend() -> str:
    """Return the backend the calling thread runs, "fast" or "ref"."""
    return _ctx_backend.get() or _state["backend"]


@contextlib.contextmanager
def backend(name: str) -> Iterator[None]:
    """Run the body of a `with` block on backend `name` (this thread only), then restore."""
    _check_backend(name)
    token = _ctx_backend.set(name)
    try:
        yield
    finally:
        _ctx_backend.reset(token)


def _check_threads(n):
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_THREADS:
        raise ValueError(f"number of threads must be an int in [1, {MAX_THREADS}]; got {n!r}")


def set_num_threads(n: int) -> None:
    """Set how many OpenMP threads the fast kernels use (results never depend on it).

    Sets the process-wide default; inside a `with qops.threads(...)` block it also replaces
    that block's count for the calling thread until the block ends. In a process forked from
    one whose kernels already ran on several threads, kernels run on one thread whatever is
    set (GNU OpenMP's threads do not survive a fork).

    Parameters
    ----------
    n : int in [1, 1024]
    """
    _check_threads(n)
    _state["threads"] = n
    if _ctx_threads.get() is not None:
        _ctx_threads.set(n)


def get_num_threads() -> int:
    """Return the number of threads the fast kernels use in the calling thread."""
    if _state["forked"]:
        return 1
    n = _ctx_threads.get()
    if n is None:
        n = _state["threads"]
        if n is None:
            n = _state["threads"] = _default_threads()
    return n


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    """Run the body of a `with` block with `n` threads (this thread only), then restore."""
    _check_threads(n)
    token = _ctx_threads.set(n)
    try:
        yield
    finally:
        _ctx_threads.reset(token)


def _after_fork_in_child():
    # GNU OpenMP is not fork-safe: a child whose parent had started OpenMP's thread pool hangs
    # in its first parallel region of more than one thread. One thread never touches the pool.
    if _state["pool_started"]:
        _state["forked"] = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

# backend -> family -> kernel module
_modules: dict[str, dict[str, ModuleType]] = {"fast": {}, "ref": {}}
_omp: list[Any] = []                   # [set_num_threads of the compiled kernels], once loaded


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


def impl(family: str) -> ModuleType:
    """The module of op family `family` ("quant", "conv", ...) for the active backend."""
    # Called once per op, so it is kept to a few lookups and, for "fast", one C call:
    # OpenMP's thread count is per OS thread, so it is set on every call rather than cached.
    backend = _ctx_backend.get() or _state["backend"]
    mod = _modules[backend].get(family)
    if mod is None:
        mod = _load(backend, family)
    if backend == "fast":
        n = _ctx_threads.get() or _state["threads"] or get_num_threads()
        if n > 1:
            if _state["forked"]:
                n = 1
            else:
                _state["pool_started"] = True
        _omp[0](n)
    return mod
