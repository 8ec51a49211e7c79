"""qops.show_config(): what this build compiled and what it runs, and which kernel a call takes."""
import platform
import sys

import numpy as np


def config_info():
    """A dict of the facts show_config() prints."""
    import qops
    from qops import _config
    info = {"qops": qops.__version__, "python": sys.version.split()[0], "numpy": np.__version__,
            "machine": platform.machine(), "backend": _config.get_backend(),
            "threads": _config.get_num_threads()}
    from qops import _blas
    info["float_blas"] = _blas.describe()
    try:
        from qops import _fast
        info.update(openmp=_fast.OPENMP, isas_compiled=_fast.ISAS, isas_cpu=_fast.CPU_ISAS,
                    isa=_fast.ISA, debug_build=_fast.DEBUG,
                    omp_max_threads=_fast._cpu.get_max_threads(),
                    # kernels the AVX-512 build picks at run time by CPU feature
                    vbmi_max_pool=_fast.load("pool")._use_vbmi(),
                    vbmi2_topk=_fast.load("sort")._topk_vbmi(),
                    conv_kernel=_conv_kernel(_fast), cl_conv_kernel=_cl_conv_kernel(_fast),
                    gemm_kernel=_gemm_kernel(_fast))
    except ImportError as exc:
        info.update(fast_error=str(exc))
    return info


# op families whose _fast module has a plan() and _trace_routes() (see qops/_fast/pool.pyx)
ROUTED_FAMILIES = ("conv", "pool", "linear", "quant", "activation", "arith", "norm", "reduce",
                   "resize", "sort")


def explain(op, *args, **kwargs):
    """The kernel routes the fast backend takes for op(*args, **kwargs): a list of Route
    (.name, .kernel, .where), one per kernel call, in order. Runs the call.

    op : a qops op, e.g. qops.functional.max_pool2d, and its arguments
    """
    from qops import _config, _fast
    mods = [_fast.load(f) for f in ROUTED_FAMILIES]
    routes = []
    for m in mods:
        m._trace_routes(routes)
    try:
        with _config.backend("fast"):
            op(*args, **kwargs)
    finally:
        for m in mods:
            m._trace_routes(None)
    return routes


def show_config(op=None, *args, **kwargs):
    """Print the qops version, numpy version, OpenMP, threads, and the instruction sets; with
    an op and its arguments, print instead which kernel each of its fast calls runs and where
    that kernel lives (see explain)."""
    if op is not None:
        name = getattr(op, "__name__", repr(op))
        routes = explain(op, *args, **kwargs)
        if not routes:
            print(f"{name}: no planned kernel (this op's family has no plan() yet)")
        for r in routes:
            print(f"{name}: route {r.name}, kernel {r.kernel} in {r.where}")
        return
    info = config_info()
    rows = [("qops", info["qops"]), ("python", info["python"]), ("numpy", info["numpy"]),
            ("machine", info["machine"]), ("backend", info["backend"]),
            ("threads", info["threads"]),
            ("numpy BLAS (float layers)", info["float_blas"])]
    if "fast_error" in info:
        rows.append(("fast kernels", "not available: " + info["fast_error"]))
    else:
        rows += [("OpenMP", "on" if info["openmp"] else "off (serial kernels)"),
                 ("ISAs compiled", ", ".join(info["isas_compiled"])),
                 ("ISAs this CPU runs", ", ".join(info["isas_cpu"])),
                 ("ISA in use", info["isa"] + ("  (forced by QOPS_ISA)" if _forced() else "")),
                 ("VBMI kernels (stride-2 max pool, top-k)",
                  f"{'on' if info['vbmi_max_pool'] else 'off'}, "
                  f"{'on' if info['vbmi2_topk'] else 'off'}"),
                 ("int8 conv kernel", info["conv_kernel"]),
                 ("channels-last conv kernels", info["cl_conv_kernel"]),
                 ("int8 linear kernel", info["gemm_kernel"]),
                 ("debug build (bounds checks)", "yes" if info["debug_build"] else "no")]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


def _conv_kernel(fast):
    """The tier the conv family runs: AMX, AVX-512 VNNI, AVX2 or portable C."""
    mode = fast.load("conv")._MODE[0]
    if mode == 2:
        return "AMX tiles"
    if mode == 1:
        return "AVX-512 VNNI" if fast.ISA == "avx512" else "AVX2 (vpmaddubsw, exact)"
    return "portable C"


def _cl_conv_kernel(fast):
    """What channels-last convolutions with symmetric weights run, ungrouped and depthwise."""
    conv = fast.load("conv")
    ungrouped = ("AMX tiles (unpadded inputs read in place, 1x1 at stride 1 as one GEMM over "
                 "the pixels, its output channels split over the threads where pixels are "
                 "few; im2col rows below 32 channels)" if conv._MODE[0] == 2
                 else "the conv kernel, C-order result")
    if getattr(conv, "_GEMM", [False])[0] and conv._MODE[0] == 1:
        core = "AVX2" if getattr(conv, "_AVX2", False) else "AVX-512 VNNI"
        rows = ("windows read in place from 32 channels, im2col rows below, a kernel row "
                "a tap under 4 channels (RGB stems)"
                if getattr(conv, "_TAPS", [False])[0] else "im2col rows on small grids")
        ungrouped = (f"{core} GEMM core (1x1 as it lies; {rows}), "
                     "else the conv kernel, C-order result")
    depthwise = "a C-order copy"
    if conv._DWCL and conv._MODE[0] >= 1:
        depthwise = "AVX-512 VNNI"
    elif getattr(conv, "_DWCL2", False) and conv._MODE[0] >= 1:
        depthwise = "AVX2 (vpmaddwd pairs, exact) from 32 channels, a C-order copy below"
    return f"ungrouped: {ungrouped}; depthwise: {depthwise}"


def _gemm_kernel(fast):
    """The tier the linear GEMM runs: AMX (16/32-row blocks), AVX-512 VNNI, AVX2 or portable C."""
    if fast.ISA == "avx512":
        return "AMX tiles + AVX-512 VNNI" if fast.load("linear")._amx() else "AVX-512 VNNI"
    return "AVX2 (vpmaddubsw, exact)" if fast.ISA == "avx2" else "portable C"


def _forced():
    import os
    return bool(os.environ.get("QOPS_ISA"))
