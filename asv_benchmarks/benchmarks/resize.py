"""asv benchmarks of the resize family (generated from the op registry)."""
from ._registry_bench import make

make("resize", globals())
