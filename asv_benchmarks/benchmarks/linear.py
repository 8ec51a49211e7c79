"""asv benchmarks of the linear family (generated from the op registry)."""
from ._registry_bench import make

make("linear", globals())
