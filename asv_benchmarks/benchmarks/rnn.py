"""asv benchmarks of the rnn family (generated from the op registry)."""
from ._registry_bench import make

make("rnn", globals())
