"""asv benchmarks of the arith family (generated from the op registry)."""
from ._registry_bench import make

make("arith", globals())
