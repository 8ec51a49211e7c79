"""asv benchmarks of the pool family (generated from the op registry)."""
from ._registry_bench import make

make("pool", globals())
