"""asv benchmarks of the conv family (generated from the op registry)."""
from ._registry_bench import make

make("conv", globals())
