"""asv benchmarks of the reduce family (generated from the op registry)."""
from ._registry_bench import make

make("reduce", globals())
