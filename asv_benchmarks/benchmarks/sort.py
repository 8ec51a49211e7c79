"""asv benchmarks of the sort family (generated from the op registry)."""
from ._registry_bench import make

make("sort", globals())
