"""python -m qops demo-rnn: an embedding + 2-layer LSTM + linear classifier, float vs int8.

The task: a sequence of 24 tokens from a vocabulary of 8; the label says whether token 1
occurs more often than token 2 (the data never ties). The weights in qops/data/rnn_demo.npz
were trained once with PyTorch by tools/train_rnn_demo.py on `make_data(4000, seed=0)`; the demo
evaluates on held-out sequences, with no torch at run time.
"""
import argparse
import os
import time

import numpy as np

import qops
from qops import nn as qnn

DATA_FILE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "rnn_demo.npz")
VOCAB, SEQ, EMBED, HIDDEN, LAYERS = 8, 24, 8, 32, 2


def make_data(n, seed):
    """(tokens int64 (n, SEQ), labels int64 (n,)): label 1 when token 1 outnumbers token 2."""
    r = np.random.default_rng(seed)
    tokens = np.empty((n, SEQ), np.int64)
    labels = np.empty(n, np.int64)
    i = 0
    while i < n:
        t = r.integers(0, VOCAB, SEQ)
        d = int((t == 1).sum()) - int((t == 2).sum())
        if d == 0:
            continue
        tokens[i], labels[i] = t, int(d > 0)
        i += 1
    return tokens, labels


class SeqClassifier(qnn.Module):
    """Embedding (a float lookup table) + LSTM + Linear on the last step's output."""

    def __init__(self, vocab=VOCAB, embed=EMBED, hidden=HIDDEN, layers=LAYERS, classes=2):
        super().__init__()
        self.register_buffer("embedding", np.zeros((vocab, embed), np.float32))
        self.lstm = qnn.LSTM(embed, hidden, layers, batch_first=True)
        self.fc = qnn.Linear(hidden, classes)

    def forward(self, tokens):
        x = self.embedding[tokens]                    # (batch, seq, embed)
        out, _ = self.lstm(x)
        return self.fc(np.ascontiguousarray(out[:, -1]))


def load_model(path=DATA_FILE):
    """The float SeqClassifier with the shipped weights."""
    m = SeqClassifier()
    with np.load(path) as z:
        state = {k: z[k] for k in z.files}
    m.load_state_dict(state)
    return m.eval()


def accuracy(model, tokens, labels, batch=250):
    hits = 0
    for i in range(0, len(tokens), batch):
        hits += int((model(tokens[i:i + batch]).argmax(1) == labels[i:i + batch]).sum())
    return hits / len(tokens)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m qops demo-rnn", description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=2000, help="held-out sequences to evaluate")
    args = p.parse_args(argv)
    from qops.quantization import quantize_dynamic
    tokens, labels = make_data(args.n, seed=1)
    fmodel = load_model()
    qmodel = quantize_dynamic(fmodel, dtype=qops.qint8)
    hmodel = quantize_dynamic(fmodel, dtype="float16")
    print(f"qops {qops.__version__} demo-rnn: embedding + {LAYERS}-layer LSTM (hidden {HIDDEN})"
          f" + linear; does token 1 outnumber token 2 in {SEQ} tokens? ({args.n} held-out "
          f"sequences)")
    print(f"quantized: {qmodel.lstm!r}")
    res = {}
    for name, m in (("float32", fmodel), ("int8 dynamic", qmodel), ("float16 weights", hmodel)):
        t0 = time.perf_counter()
        res[name] = accuracy(m, tokens, labels)
        dt = time.perf_counter() - t0
        print(f"{name + ' accuracy:':24s}{res[name]:.2%}  "
              f"({(res[name] - res['float32']) * 100:+.2f} points, {dt * 1e3:.0f} ms)")
    logits_f = fmodel(tokens[:200])
    logits_q = qmodel(tokens[:200])
    print(f"max |logit int8 - logit float32| on 200 sequences: "
          f"{float(np.abs(logits_q - logits_f).max()):.4f}")
    return 0
