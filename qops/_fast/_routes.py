"""What every op family's fast module shares for naming its kernel routes.

A family's ``qops/_fast/<family>.pyx`` keeps its own ``ROUTES`` table (route name -> Route),
``_built_here``/``BUILT`` (the routes this build and CPU can take) and its one plan function;
the Route record, the instruction set a module was built for and the trace that
``qops._show.explain`` reads are here, once. Each family module re-exports
``trace_routes`` as ``_trace_routes``.
"""
from collections import namedtuple

Route = namedtuple("Route", "name kernel where")
Route.__doc__ = """The kernel a fast call runs: name "<op>.<route>" (or "empty"), the kernel
function (with the instruction-set tier it runs), the file it lives in."""

# The list collecting the Route of every planned call, while qops._show.explain runs, as the
# only element of TRACE; TRACE is empty otherwise. A list rather than a flag: each family holds
# this very object as a typed `cdef list`, so the check on every call is a C length test.
TRACE = []


def trace_routes(routes):
    """Append the Route of every following fast call, of every family, to list `routes`
    (None: stop). For qops._show.explain."""
    TRACE[:] = [] if routes is None else [routes]


def module_isa(name):
    """The instruction set compiled module `name` was built for: the package it was built
    into ("qops._fast._avx2.reduce" -> "avx2"), "baseline" outside one."""
    parts = name.split(".")
    return parts[2].lstrip("_") if len(parts) == 4 else "baseline"
