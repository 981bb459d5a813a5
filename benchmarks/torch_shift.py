"""The tanh LeNet of controlfiles/lenet-mnist-split.ctl trained in PyTorch on the same 8,000
digits, with each batch's cases moved by up to 0, 1 or 2 pixels: does moving the cases help
mini-batch descent in about 22 epochs? (benchmarks/NOTES.md, "Moved cases (AUGMENT SHIFT)").

    python benchmarks/torch_shift.py          # needs PyTorch and a GPU

Nesterov SGD (0.1) and Adam (0.002), one-cycle rate, 128-case batches, cross-entropy per case,
seeds 1-3; pixels moved in are -1 (the background). Prints the test error on the last 2,000
digits per setting and seed.
"""

import gzip
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
DEVICE = "cuda"
TRAIN_CASES, BATCH, SIDE = 8000, 128, 28


def read_idx(path):
    """An MNIST idx file (gzip) as a numpy array."""
    with gzip.open(path) as f:
        data = f.read()
    n_dims = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(n_dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * n_dims).reshape(dims)


def load_digits():
    """(train inputs, train classes, test inputs, test classes) on the GPU, inputs in -1..1."""
    images = read_idx(ROOT / "data" / "t10k-images-idx3-ubyte.gz").astype(np.float32)
    images = images / 127.5 - 1.0
    labels = read_idx(ROOT / "data" / "t10k-labels-idx1-ubyte.gz").astype(np.int64)
    x, y = torch.tensor(images[:, None]).to(DEVICE), torch.tensor(labels).to(DEVICE)
    return x[:TRAIN_CASES], y[:TRAIN_CASES], x[TRAIN_CASES:], y[TRAIN_CASES:]


class LeNet(nn.Module):
    """Two 5x5 convolutions (20 and 50 maps) with 2x2 max pooling, 500 hidden, 10 classes; tanh."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 20, 5), nn.Conv2d(20, 50, 5)
        self.hidden, self.out = nn.Linear(800, 500), nn.Linear(500, 10)

    def forward(self, x):
        x = F.max_pool2d(torch.tanh(self.conv1(x)), 2)
        x = F.max_pool2d(torch.tanh(self.conv2(x)), 2)
        return self.out(torch.tanh(self.hidden(x.flatten(1))))


def moved(x, most, generator):
    """Each case moved by -most..most pixels down and across (the background moved in)."""
    if most == 0:
        return x
    n = x.shape[0]
    padded = F.pad(x, (most, most, most, most), value=-1.0)
    down = torch.randint(0, 2 * most + 1, (n,), generator=generator)
    across = torch.randint(0, 2 * most + 1, (n,), generator=generator)
    rows = (down[:, None] + torch.arange(SIDE)).to(DEVICE)
    cols = (across[:, None] + torch.arange(SIDE)).to(DEVICE)
    cases = torch.arange(n, device=DEVICE)[:, None, None]
    return padded[cases, 0, rows[:, :, None], cols[:, None, :]][:, None]


def train_and_test(data, seed, most, epochs, method, rate):
    """(test error %, training seconds) of one run."""
    x_train, y_train, x_test, y_test = data
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    net = LeNet().to(DEVICE)
    if method == "sgd":
        opt = torch.optim.SGD(net.parameters(), lr=rate, momentum=0.9, nesterov=True)
    else:
        opt = torch.optim.Adam(net.parameters(), lr=rate)
    per_epoch = TRAIN_CASES // BATCH
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=rate, pct_start=0.3,
                                                   total_steps=epochs * per_epoch)
    t0 = time.perf_counter()
    for _ in range(epochs):
        order = torch.randperm(TRAIN_CASES, generator=generator).to(DEVICE)
        for b in range(per_epoch):
            cases = order[b * BATCH:(b + 1) * BATCH]
            loss = F.cross_entropy(net(moved(x_train[cases], most, generator)), y_train[cases])
            opt.zero_grad()
            loss.backward()
            opt.step()
            schedule.step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        error = (net(x_test).argmax(1) != y_test).float().mean().item() * 100
    return error, seconds


def main():
    data = load_digits()
    for method, rate in (("sgd", 0.1), ("adam", 0.002)):
        for most in (0, 1, 2):
            for epochs in (22, 44):
                runs = [train_and_test(data, seed, most, epochs, method, rate) for seed in (1, 2, 3)]
                errors = " / ".join(f"{error:.2f}" for error, _ in runs)
                print(f"{method} shift {most} epochs {epochs}: test % {errors}   "
                      f"({runs[0][1]:.1f} s eager)", flush=True)


if __name__ == "__main__":
    main()
