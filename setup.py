"""Build qops: Cython + OpenMP kernels, compiled once per x86 instruction set.

Every ``qops/_fast/<family>.pyx`` is cythonized once and its C file compiled into
``qops/_fast/_<isa>/<family>`` for each instruction set this machine's compiler can
target (``baseline`` always; ``avx2`` and ``avx512`` on x86-64). ``qops._fast`` picks
the widest one the CPU supports at import (``QOPS_ISA`` overrides it).

Environment variables read at build time:

QOPS_DEBUG=1             Cython bounds/wraparound checks on (the test suite must pass so).
QOPS_REQUIRE_OPENMP=1    fail instead of building serial kernels when OpenMP is missing.
QOPS_BUILD_ONLY=a,b      build only these families (fast iteration while developing).
QOPS_ISAS=baseline,avx2  build only these instruction sets.
"""
import os
import platform
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import warnings
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
FAST = HERE / "qops" / "_fast"
GEN = HERE / "build" / "isa_src"
CYTHON_OUT = HERE / "build" / "cython"

# Never -march=native and never -ffast-math: the kernels must give the same bits on every
# machine. -ffp-contract=off stops GCC from fusing a*b+c on FMA targets, which would change
# float32 results against the reference; the kernels call fmaf() where PyTorch fuses.
COMMON_FLAGS = ["-O3", "-ffp-contract=off", "-fno-math-errno", "-Wno-unused-function",
                "-Wno-unreachable-code", "-Wno-maybe-uninitialized"]
ISA_FLAGS = {
    "baseline": [],
    "avx2": ["-mavx2", "-mfma", "-mf16c", "-mbmi2", "-mpopcnt"],
    "avx512": ["-mavx2", "-mfma", "-mf16c", "-mbmi2", "-mpopcnt", "-mavx512f", "-mavx512bw",
               "-mavx512vl", "-mavx512dq", "-mavx512cd", "-mavx512vnni",
               "-mprefer-vector-width=512"],
}

DIRECTIVES = {
    "language_level": 3,
    "boundscheck": False,
    "wraparound": False,
    "initializedcheck": False,
    "nonecheck": False,
    "cdivision": True,
    "binding": True,       # Cython functions get inspectable signatures (registry test)
    "embedsignature": True,
    "cpow": True,
}
DEBUG = os.environ.get("QOPS_DEBUG") == "1"
if DEBUG:
    DIRECTIVES.update(boundscheck=True, wraparound=True, initializedcheck=True)
else:
    # Python's own CFLAGS carry -g: without this the modules ship ~7x their size in DWARF.
    COMMON_FLAGS.append("-g0")


def _compiler_works(flags, code="int main(void){return 0;}\n", link=True):
    cc = sysconfig.get_config_var("CC") or "cc"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text(code)
        cmd = cc.split() + [str(src), "-o", str(Path(tmp) / "probe")] + flags
        if not link:
            cmd += ["-c"]
        try:
            return subprocess.run(cmd, capture_output=True).returncode == 0
        except OSError:
            return False


def openmp_flags():
    """Probe the compiler for OpenMP, as scikit-learn does; fall back to serial kernels."""
    code = textwrap.dedent("""\
        #include <omp.h>
        int main(void) { int n = 0;
        #pragma omp parallel reduction(+:n)
        n += 1; return omp_get_max_threads() > 0 ? 0 : 1; }
        """)
    if _compiler_works(["-fopenmp"], code):
        return ["-fopenmp"], ["-fopenmp"]
    msg = "qops: the C compiler has no OpenMP support; building serial kernels."
    if os.environ.get("QOPS_REQUIRE_OPENMP") == "1":
        raise RuntimeError(msg + " (QOPS_REQUIRE_OPENMP=1 makes this fatal)")
    warnings.warn(msg)
    return [], []


def isas():
    wanted = os.environ.get("QOPS_ISAS")
    machine = platform.machine().lower()
    names = ["baseline"]
    if machine in ("x86_64", "amd64") and sys.platform != "win32":
        names += [isa for isa in ("avx2", "avx512") if _compiler_works(ISA_FLAGS[isa], link=False)]
    if wanted:
        names = [n for n in names if n in wanted.split(",")]
        if "baseline" not in names:
            names.insert(0, "baseline")
    return names


def extensions():
    from Cython.Build import cythonize

    families = sorted(p.stem for p in FAST.glob("*.pyx"))
    only = os.environ.get("QOPS_BUILD_ONLY")
    if only:
        families = [f for f in families if f in only.split(",")]
    # Regenerate a family's C file when the directives change (a debug build and back); one
    # stamp per family, so concurrent builds of different families do not confuse each other.
    stamps = HERE / "build" / "cython_directives"
    stamps.mkdir(parents=True, exist_ok=True)
    wanted = repr(sorted(DIRECTIVES.items()))
    c_files = []
    for f in families:
        stamp = stamps / f"{f}.txt"
        force = not stamp.exists() or stamp.read_text() != wanted
        # The generated C goes under build/, not beside the .pyx: a build writes nothing into
        # the source tree except the compiled modules of an in-place (editable) build.
        c_files += cythonize([Extension(f"qops._fast.{f}", [str(FAST / f"{f}.pyx")])],
                             compiler_directives=DIRECTIVES, include_path=[str(FAST)], quiet=True,
                             force=force, build_dir=str(CYTHON_OUT))
        stamp.write_text(wanted)
    omp_compile, omp_link = openmp_flags()
    exts = []
    chosen = isas()
    for isa in chosen:
        for ext in c_files:
            family = ext.name.rsplit(".", 1)[1]
            # Each ISA compiles a one-line wrapper around the same generated C file, so object
            # files never collide and the module init name (PyInit_<family>) stays the same.
            wrapper = GEN / isa / f"{family}.c"
            wrapper.parent.mkdir(parents=True, exist_ok=True)
            generated = Path(ext.sources[0]).resolve()
            text = f'#include "{generated.as_posix()}"\n'
            if not wrapper.exists() or wrapper.read_text() != text:
                wrapper.write_text(text)
            exts.append(Extension(
                f"qops._fast._{isa}.{family}", [str(wrapper)],
                include_dirs=[str(FAST)],
                depends=[str(generated)] + [str(p) for p in FAST.glob("*.h")],
                define_macros=[("QOPS_DEBUG", "1")] if DEBUG else [],
                extra_compile_args=COMMON_FLAGS + ISA_FLAGS[isa] + omp_compile,
                extra_link_args=omp_link,
            ))
    # qops/_fast/_<isa>/ hold only compiled modules: namespace packages, no __init__.py.
    return exts


class BuildExt(build_ext):
    def initialize_options(self):
        super().initialize_options()
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1

    def copy_extensions_to_source(self):
        # An in-place build copies the modules into qops/_fast/_<isa>/ (namespace packages,
        # made here rather than by extensions(), so a wheel build leaves the source tree alone).
        for ext in self.extensions:
            package = ".".join(ext.name.split(".")[:-1])
            Path(package.replace(".", "/")).mkdir(parents=True, exist_ok=True)
        super().copy_extensions_to_source()


# Everything a build makes goes under build/ (the generated C, the per-ISA wrappers, objects,
# the egg-info); only an in-place build also puts its compiled modules into qops/_fast/_<isa>/.
(HERE / "build").mkdir(exist_ok=True)
setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExt},
      options={"egg_info": {"egg_base": "build"}})
