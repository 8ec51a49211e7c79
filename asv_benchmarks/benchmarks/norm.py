"""asv benchmarks of the norm family (generated from the op registry)."""
from ._registry_bench import make

make("norm", globals())
