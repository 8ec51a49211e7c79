"""asv benchmarks of the activation family (generated from the op registry)."""
from ._registry_bench import make

make("activation", globals())
