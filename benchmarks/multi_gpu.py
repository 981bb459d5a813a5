"""Several GPUs: one full-batch gradient split across GPUs, and a batch of runs across GPUs.

    python benchmarks/multi_gpu.py                  # every GPU, both parts
    python benchmarks/multi_gpu.py --gpus 0,1 --parts gradient --repeat 20

Part "gradient": the LeNet net of controlfiles/lenet-mnist.ctl on the 10,000 real test digits and
on 60,000 MAKE IMAGE cases (28 x 28, 10 classes), and the suite's CIFAR-sized net (cifar-conv:
two padded 5x5 convolutions with max pooling) on 5,000 MAKE IMAGE cases. For one GPU (device 0 alone) and for every
prefix of --gpus with two or more: the median wall time of a full-batch gradient through the
public evaluator (weights alternate between two vectors, so every call copies the weights in and
the host-order gradient out), the speed-up over one GPU, and how far the gradient is from one
GPU's (relative 2-norm) and whether repeated evaluations give the same bits.

Part "batch": 8 control files (--batch digits: LeNet on 8,000 real digits, each its own window of
cases, 20 annealing and conjugate-gradient iterations; --batch make60k: on 60,000 MAKE IMAGE
cases, 50 of each; CUDA = YES) run by `convnet batch` with --gpus
naming only GPU 0 (one session at a time, then two at a time) and with --gpus naming all of
them (one session per GPU): wall time of the whole batch and the rows' status. One file runs
first, untimed, so that the kernel cache holds what every session uses; --rounds N runs each way N
times, alternating, and prints the speed-up of each round.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu import median_ms, rel  # noqa: E402  (the single-GPU benchmark's timing and error helpers)

LENET = """\
CONVOLUTIONAL LAYER 20 2 2 0 0 1 1
POOLED MAX LAYER 2 2 2 2
CONVOLUTIONAL LAYER 50 2 2 0 0 1 1
POOLED MAX LAYER 2 2 2 2
FULLY CONNECTED LAYER 500
"""
DIGITS = f"""\
READ MNIST IMAGE "{ROOT}/data/t10k-images-idx3-ubyte.gz"
READ MNIST LABELS "{ROOT}/data/t10k-labels-idx1-ubyte.gz"
"""
CIFAR_CONV = """\
CONVOLUTIONAL LAYER 24 2 2 2 2 1 1
POOLED MAX LAYER 2 2 2 2
CONVOLUTIONAL LAYER 48 2 2 2 2 1 1
POOLED MAX LAYER 2 2 2 2
FULLY CONNECTED LAYER 96
"""
# (data lines, layer lines) of each net the gradient part times
NETS = {
    "lenet, 10,000 digits": (DIGITS, LENET),
    "lenet, 60,000 cases": ("MAKE IMAGE 28 28 1 10 60000\n", LENET),
    "cifar-conv, 5,000 cases": ("MAKE IMAGE 32 32 3 10 5000\n", CIFAR_CONV),
}


def load(data_lines, layer_lines=LENET):
    """(architecture, inputs, classes) from data lines and layer lines."""
    from convnet.architecture import Architecture
    from convnet.control import parse_line
    from convnet.session import Session
    s = Session(check_only=True, seed=12345)
    for i, text in enumerate((data_lines + layer_lines).splitlines(), start=1):
        cmd = parse_line(text, "bench", i)
        if cmd is not None:
            if "filename" in cmd.args:          # absolute names: nothing to resolve
                cmd.args["path"] = cmd.args["filename"]
            s.execute(cmd)
    d = s.dataset
    return Architecture(s.layer_specs, d.rows, d.cols, d.bands, d.n_classes), d.inputs, d.classes


def gradient_part(gpus, repeat):
    from convnet.device.multi import device_backend
    from convnet.params import DeviceParams
    print(f"Full-batch gradient, median of {repeat} calls after 3 warm-up calls")
    print(f"{'net, data':<26}{'GPUs':>6}{'ms':>10}{'cases/s':>12}{'speed-up':>10}"
          f"{'rel. to 1 GPU':>15}{'same bits':>11}")
    rng = np.random.default_rng(1)
    for name, (data_lines, layer_lines) in NETS.items():
        arch, x, c = load(data_lines, layer_lines)
        ws = [rng.normal(0, 0.1, arch.n_weights) for _ in range(2)]
        base = None
        for k in [1] + list(range(2, len(gpus) + 1)):
            spec = ",".join(map(str, gpus[:k]))
            backend = device_backend(arch, DeviceParams(cuda_devices=spec))
            ev = backend.evaluator(x, c, 0.0)
            for i in range(3):
                ev.gradient(ws[i % 2])
            ms = median_ms(lambda i: ev.gradient(ws[i % 2]), repeat)
            crit, grad = ev.gradient(ws[0])
            same = all(np.array_equal(ev.gradient(ws[0])[1], grad) for _ in range(2))
            if base is None:
                base = (ms, crit, grad)
            diff = rel(grad, base[2])
            print(f"{name:<26}{spec:>6}{ms:>10.2f}{len(x) / ms * 1000:>12.0f}"
                  f"{base[0] / ms:>9.2f}x{diff:>15.1e}{str(same):>11}", flush=True)
            close = getattr(backend, "close", None)
            if close:
                close()
            del ev, backend


BATCHES = {
    "digits": ("8,000 digits each, 20 annealing + 20 CG iterations",
               lambda k: DIGITS + f"KEEP CASES {1 + 250 * k} {8000 + 250 * k}\n", 20),
    "make60k": ("60,000 MAKE IMAGE cases each, 50 annealing + 50 CG iterations",
                lambda k: "MAKE IMAGE 28 28 1 10 60000\n", 50),
}


def batch_files(folder, kind, n=8):
    _, data, iters = BATCHES[kind]
    files = []
    for k in range(n):
        path = Path(folder) / f"lenet{k + 1}.ctl"
        path.write_text(data(k) + LENET + f"CUDA = YES\nANNEAL ITERS = {iters}\n"
                        f"MAXITERS = {iters}\nTOL = 1e-12\nTRAIN\n")
        files.append(str(path))
    return files


def session_seconds(out):
    """Each session's wall seconds as summary.csv gives them (mean, min-max): what two sessions
    at once cost each other, beside what the batch itself adds."""
    import csv
    with open(Path(out) / "summary.csv", newline="") as f:
        seconds = [float(row["seconds"]) for row in csv.DictReader(f) if row["seconds"]]
    if not seconds:
        return "none"
    return f"mean {np.mean(seconds):.2f} s, {min(seconds):.2f}-{max(seconds):.2f} s"


def warm_caches(path, gpu, tmp):
    """One run of a batch file before any timing: the kernel cache then holds what the batch
    uses, so no way pays the build that only the first session of a fresh machine pays."""
    subprocess.run([sys.executable, "-m", "convnet", "run", path, "--out", str(Path(tmp) / "warm"),
                    "--seed", "1", "--quiet"], capture_output=True, text=True,
                   env=dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu)))


def batch_part(gpus, kind, ways=("one", "jobs2", "gpus"), rounds=1):
    print(f"\nBatch of 8 LeNet control files ({BATCHES[kind][0]})")
    print(f"{'how':<38}{'wall s':>9}{'per file s':>12}  rows")
    with tempfile.TemporaryDirectory() as tmp:
        files = batch_files(tmp, kind)
        warm_caches(files[0], gpus[0], tmp)
        one = str(gpus[0])
        everything = ",".join(map(str, gpus))
        walls = {}
        for r in range(rounds):
            for way, label, extra in (
                    ("one", f"--gpus {one} (one session at a time)", ["--gpus", one]),
                    ("jobs2", f"--gpus {one} --jobs 2", ["--gpus", one, "--jobs", "2"]),
                    ("gpus", f"--gpus {everything} (one session per GPU)", ["--gpus", everything])):
                if way not in ways:
                    continue
                out = Path(tmp) / f"round{r}-{way}"
                t0 = time.perf_counter()
                proc = subprocess.run([sys.executable, "-m", "convnet", "batch", *files, "--out",
                                       str(out), "--seed", "1", *extra],
                                      capture_output=True, text=True)
                wall = time.perf_counter() - t0
                walls.setdefault(way, []).append(wall)
                status = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr
                print(f"{label:<38}{wall:>9.1f}{wall / len(files):>12.2f}  {status}", flush=True)
                print(f"{'':<38}sessions' own seconds (results.json): {session_seconds(out)}",
                      flush=True)
        if "one" in walls and "gpus" in walls:
            each = [a / b for a, b in zip(walls["one"], walls["gpus"])]
            print(f"speed-up of a session per GPU over one GPU, each round: "
                  + ", ".join(f"{x:.2f}x" for x in each)
                  + f"; median {np.median(each):.2f}x", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="all")
    ap.add_argument("--parts", default="gradient,batch")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--batch", default="digits", choices=sorted(BATCHES),
                    help="what each file of the batch part trains on")
    ap.add_argument("--ways", default="one,jobs2,gpus",
                    help="the batch part's ways: one (a session at a time on the first GPU), "
                         "jobs2 (two sessions share it), gpus (a session per GPU)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="the batch part's rounds: each way once a round, the speed-up per round")
    args = ap.parse_args(argv)
    from convnet.device.multi import resolve_devices
    gpus = resolve_devices(args.gpus.upper() if args.gpus.lower() == "all" else args.gpus)
    import pycuda.driver as cuda
    print("GPUs: " + "; ".join(f"{i}: {cuda.Device(i).name()}" for i in gpus))
    parts = args.parts.split(",")
    if "gradient" in parts:
        gradient_part(gpus, args.repeat)
    if "batch" in parts:
        batch_part(gpus, args.batch, args.ways.split(","), args.rounds)


if __name__ == "__main__":
    main()
