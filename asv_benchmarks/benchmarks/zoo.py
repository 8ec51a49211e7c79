"""asv benchmarks of the layer zoo: every distinct layer shape of the benchmark models."""
from ._registry_bench import make_zoo

make_zoo(globals())
