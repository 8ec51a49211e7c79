"""python -m qops [demo|bench|config]: the demo (default), the speed comparison, the build info."""
import sys


def _mini_demo():
    import numpy as np

    import qops
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    q = qops.quantize_per_tensor(x, 0.01, 128, qops.quint8)
    print("x            ", x)
    print("quantized    ", q)
    print("int_repr     ", q.int_repr())
    print("dequantize   ", q.dequantize())
    qops.show_config()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    cmd, rest = (argv[0], argv[1:]) if argv else ("demo", [])
    if cmd == "demo":
        try:
            from qops.quantization import _demo
        except ImportError:
            return _mini_demo()
        return _demo.main(rest)
    if cmd == "bench":
        from qops import bench
        return bench.main(rest)
    if cmd == "config":
        import qops
        return qops.show_config()
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
