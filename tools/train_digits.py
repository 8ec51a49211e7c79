"""Train the small CNN that `python -m qops demo` quantizes, and write qops/data/digits_cnn.npz.

Run once by a maintainer (needs PyTorch and scikit-learn; neither is a qops dependency):

    python tools/train_digits.py

The network is defined twice, here in PyTorch and in qops/quantization/_demo.py with qops.nn,
with the same module names so the state_dict keys match. The shipped file holds the float
weights (PyTorch state_dict keys), a calibration set taken from the training images and a
held-out test set, images stored as uint8 (the digits data are integers 0..16).
"""
import argparse
import os

import numpy as np


def build_torch_model():
    """The demo CNN in PyTorch: conv-bn-relu x3, max pool, two linear layers."""
    import torch.nn as nn

    class DigitsCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
            self.bn1 = nn.BatchNorm2d(16)
            self.relu1 = nn.ReLU()
            self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
            self.bn2 = nn.BatchNorm2d(32)
            self.relu2 = nn.ReLU()
            self.pool = nn.MaxPool2d(2)
            self.conv3 = nn.Conv2d(32, 32, 3, padding=1)
            self.bn3 = nn.BatchNorm2d(32)
            self.relu3 = nn.ReLU()
            self.flatten = nn.Flatten()
            self.fc1 = nn.Linear(32 * 4 * 4, 64)
            self.relu4 = nn.ReLU()
            self.fc2 = nn.Linear(64, 10)

        def forward(self, x):
            x = self.relu1(self.bn1(self.conv1(x)))
            x = self.relu2(self.bn2(self.conv2(x)))
            x = self.pool(x)
            x = self.relu3(self.bn3(self.conv3(x)))
            x = self.relu4(self.fc1(self.flatten(x)))
            return self.fc2(x)

    return DigitsCNN()


def main(argv=None):
    """Train, evaluate and save the demo model and data."""
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "qops", "data",
                                                 "digits_cnn.npz"))
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--n-test", type=int, default=360)
    p.add_argument("--n-calib", type=int, default=256)
    args = p.parse_args(argv)

    torch.manual_seed(0)
    digits = load_digits()
    images = digits.images.astype(np.uint8)  # values 0..16
    labels = digits.target.astype(np.uint8)
    x_tr, x_te, y_tr, y_te = train_test_split(images, labels, test_size=args.n_test,
                                              random_state=0, stratify=labels)
    model = build_torch_model()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3, weight_decay=1e-4)
    xt = torch.from_numpy(x_tr.astype(np.float32) / 16.0).unsqueeze(1)
    yt = torch.from_numpy(y_tr.astype(np.int64))
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(len(xt))
        for i in range(0, len(xt), 64):
            idx = perm[i:i + 64]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(x_te.astype(np.float32) / 16.0).unsqueeze(1)).argmax(1)
    acc = float((pred.numpy() == y_te).mean())
    print(f"float test accuracy: {acc:.4f} on {len(y_te)} images")

    arrays = {f"state.{k}": v.detach().numpy() for k, v in model.state_dict().items()
              if v.dtype.is_floating_point}
    arrays["calib_images"] = x_tr[:args.n_calib]
    arrays["test_images"] = x_te
    arrays["test_labels"] = y_te
    arrays["input_divisor"] = np.float32(16.0)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    np.savez_compressed(args.out, **arrays)
    print(f"wrote {os.path.abspath(args.out)} ({os.path.getsize(args.out) // 1024} KB)")


if __name__ == "__main__":
    main()
