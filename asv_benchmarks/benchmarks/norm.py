"""asv benchmarks of the norm family (generated from the op registry)."""
from ._registry_bench import make

Time, TimeRef = make("norm")
