"""asv benchmarks of the quant family (generated from the op registry)."""
from ._registry_bench import make

make("quant", globals())
