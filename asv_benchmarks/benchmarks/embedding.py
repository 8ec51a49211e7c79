"""asv benchmarks of the embedding family (generated from the op registry)."""
from ._registry_bench import make

make("embedding", globals())
