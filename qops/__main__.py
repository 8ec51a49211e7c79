"""python -m qops [demo|demo-rnn|bench|config]: the demos (default: demo), the speed
comparison, the build info."""
import argparse
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


def _demo(rest):
    try:
        from qops.quantization import _demo
    except ImportError:
        return _mini_demo()
    return _demo.main(rest)


def _demo_rnn(rest):
    from qops.quantization import _demo_rnn
    return _demo_rnn.main(rest)


def _bench(rest):
    from qops import bench
    return bench.main(rest)


def _config(rest):
    import qops
    qops.show_config()
    return 0


_COMMANDS = {
    "demo": (_demo, "quantize the shipped digits CNN: accuracy, speed, per-layer errors "
                    "(python -m qops demo --help for its options)"),
    "demo-rnn": (_demo_rnn, "embedding + 2-layer LSTM classifier: float32 vs dynamic int8 "
                            "accuracy (python -m qops demo-rnn --help)"),
    "bench": (_bench, "qops' kernels against its reference and PyTorch "
                      "(python -m qops bench --help)"),
    "config": (_config, "the build: OpenMP, threads, instruction sets, kernel tiers"),
}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="python -m qops", description=__doc__.split(":")[0])
    sub = parser.add_subparsers(dest="command", metavar="{demo,demo-rnn,bench,config}")
    for name, (_, text) in _COMMANDS.items():
        # Each command parses its own options: everything after its name goes to it.
        sub.add_parser(name, help=text, add_help=False)
    if not argv:
        argv = ["demo"]
    if argv[0] in _COMMANDS:
        return _COMMANDS[argv[0]][0](argv[1:]) or 0
    parser.parse_args(argv)     # --help (exit 0) or an unknown command (exit 2)
    return 2


if __name__ == "__main__":
    sys.exit(main())
