"""Test error along a mini-batch run on mnist-small's net, on the host: the runner of
convnet/minibatch.py driven directly (no control file), the test error of the weights every
--every epochs (that testing not in the seconds).

    python benchmarks/minibatch_curve.py --kind ADAM --lr 0.01 --batch 256 --epochs 600 --every 50

The training cases are MNIST test digits 1-2000 and the test cases 2001-3000 (data/), as in
controlfiles/mnist-small.ctl; the start is one random draw within --range (ANNEAL ITERS = 0),
WPEN as there. Each line: epoch, training seconds so far, the likelihood term of the epoch's
batches, the weight penalty (and the weights' root mean square), the test misclassification.
"""

import argparse
import time
from pathlib import Path

import numpy as np

from convnet.architecture import Architecture
from convnet.data import mnist
from convnet.host.backend import HostBackend
from convnet.minibatch import UpdateRule, batch_layout, learning_rates
from convnet.train.anneal import weight_scales

DATA = Path(__file__).resolve().parents[1] / "data"
LAYERS = ["CONVOLUTIONAL LAYER 8 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
          "FULLY CONNECTED LAYER 32"]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", default="SGD", choices=["SGD", "ADAM"])
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--schedule", default="CONSTANT")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--nesterov", action="store_true")
    ap.add_argument("--scale", default="FLAT", choices=["FLAT", "FANIN"])
    ap.add_argument("--range", type=float, default=0.1)
    ap.add_argument("--wpen", type=float, default=0.0001)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    return ap.parse_args(argv)


def main(argv=None):
    a = parse_args(argv)
    images = mnist.read_images(DATA / "t10k-images-idx3-ubyte.gz")
    ds = mnist.read_labels(DATA / "t10k-labels-idx1-ubyte.gz", images)
    arch = Architecture.from_lines(LAYERS, 28, 28, 1, 10)
    backend = HostBackend(arch, threads=a.threads)
    train = backend.evaluator(ds.inputs[:2000], ds.classes[:2000], a.wpen)
    test_classes = ds.classes[2000:3000]
    test = backend.evaluator(ds.inputs[2000:3000], test_classes, 0.0)
    rng = np.random.default_rng(a.seed)
    w = rng.uniform(-1, 1, arch.n_weights) * weight_scales(arch, a.range, a.scale)
    batch, per_epoch = batch_layout(train.n_cases, a.batch)
    rates = learning_rates(a.lr, a.schedule, a.epochs, per_epoch)
    runner = train.minibatches(UpdateRule(a.kind, a.momentum, a.nesterov), batch, rates, w)
    print(vars(a), flush=True)
    seconds = 0.0
    for epoch in range(1, a.epochs + 1):
        t0 = time.perf_counter()
        runner.start_epoch(rng.permutation(train.n_cases))
        while runner.steps_left:
            runner.step()
        likelihood, w = runner.end_epoch()
        seconds += time.perf_counter() - t0
        if epoch % a.every == 0 or epoch == a.epochs:
            error = 100 * np.mean(np.argmax(test.outputs(w), axis=1) != test_classes)
            print(f"epoch {epoch} {seconds:.1f} s likelihood {likelihood:.3g} penalty "
                  f"{train.penalty.value(w):.3g} (rms weight {np.sqrt(np.mean(w * w)):.3g}) "
                  f"test {error:.2f} %", flush=True)


if __name__ == "__main__":
    main()
