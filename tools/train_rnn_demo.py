"""Train the demo-rnn model with PyTorch once and write qops/data/rnn_demo.npz.

Run from the repository root: python tools/train_rnn_demo.py (deterministic: fixed seeds, one
thread). The demo itself needs no torch; this script is not part of the package.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from qops.quantization._demo_rnn import DATA_FILE, EMBED, HIDDEN, LAYERS, VOCAB, make_data  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(VOCAB, EMBED)
        self.lstm = torch.nn.LSTM(EMBED, HIDDEN, LAYERS, batch_first=True)
        self.fc = torch.nn.Linear(HIDDEN, 2)

    def forward(self, t):
        out, _ = self.lstm(self.embedding(t))
        return self.fc(out[:, -1])


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    tokens, labels = make_data(4000, seed=0)
    tt, tl = torch.from_numpy(tokens), torch.from_numpy(labels)
    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    for epoch in range(30):
        perm = torch.randperm(len(tt), generator=g)
        for i in range(0, len(tt), 100):
            idx = perm[i:i + 100]
            loss = torch.nn.functional.cross_entropy(net(tt[idx]), tl[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            vt, vl = make_data(1000, seed=1)
            acc = (net(torch.from_numpy(vt)).argmax(1).numpy() == vl).mean()
        print(f"epoch {epoch}: loss {loss.item():.4f}, held-out accuracy {acc:.3f}")
    state = {("embedding" if k == "embedding.weight" else k): v.detach().numpy()
             for k, v in net.state_dict().items()}
    np.savez_compressed(DATA_FILE, **state)
    print(f"wrote {DATA_FILE} ({os.path.getsize(DATA_FILE)} bytes)")


if __name__ == "__main__":
    main()
