"""Host-path benchmark: full-batch criterion and gradient times for the benchmark nets.

    python benchmarks/host.py                       # the three nets, 1 and 2 threads, median of 5
    python benchmarks/host.py --threads 1,2,4 --repeat 7 --nets lenet-mnist
    python benchmarks/host.py --memory              # peak memory, 6,000 vs 60,000 cases of 28x28
    python benchmarks/host.py --warm --threads 2 --repeat 9 --no-torch
    python benchmarks/host.py --suite --warm        # the eight nets of benchmarks/suite/

Every net is validated first (fast path against the per-case reference path on a few cases), then
timed. When PyTorch is importable, the same net (the model of benchmarks/gpu.py) is then timed in
PyTorch on the CPU in float64 with the same thread count, in a process of its own started right
after ours (so neither library's threads or caches disturb the other); its full-batch gradient is
checked against ours, and the table prints our gradient time over PyTorch's. "first call" is the first gradient call of the run for that net: for the first net it
includes compiling every host kernel, because the script starts from an empty Numba cache unless
--warm is given. Timings are medians; on a machine shared with other work they are noisy.

The nets are those of the benchmark control files (../shared/bench by default):
log-example on 1024 random cases, lenet-mnist on the first 1000 MNIST test digits (read here with
numpy and gzip), local-rgb on 500 random cases; with --suite the eight nets of benchmarks/suite/
(copies of ../shared/bench/suite), each on the number of cases SUITE gives.
"""

import argparse
import gzip
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BENCH = ROOT.parent / "shared" / "bench"

NETS = {                      # control file, cases
    "log-example": ("log-example.ctl", 1024),
    "lenet-mnist": ("lenet-mnist.ctl", 1000),
    "local-rgb": ("local-rgb.ctl", 500),
}
# The suite (benchmarks/suite/*.ctl, as ../shared/bench/suite has them), each on enough of its
# cases for a gradient of a few tenths of a second on one core.
SUITE_DIR = ROOT / "benchmarks" / "suite"
SUITE = {
    "avgpool-deep": ("avgpool-deep.ctl", 150),
    "cifar-conv": ("cifar-conv.ctl", 150),
    "inexact": ("inexact.ctl", 300),
    "lenet-60k": ("lenet-60k.ctl", 500),
    "local-mnist": ("local-mnist.ctl", 1000),
    "strided-rgb": ("strided-rgb.ctl", 300),
    "vgg-mnist": ("vgg-mnist.ctl", 300),
    "wide-fc": ("wide-fc.ctl", 1000),
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench-dir", type=Path, default=DEFAULT_BENCH)
    ap.add_argument("--nets", default=",".join(NETS),
                    help=f"comma-separated, of {', '.join(NETS)} and the suite's {', '.join(SUITE)}")
    ap.add_argument("--suite", action="store_true", help="the suite's eight nets (--nets ignored)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--warm", action="store_true", help="keep the usual Numba cache")
    ap.add_argument("--memory", action="store_true",
                    help="measure peak memory on 6,000 and 60,000 MNIST-sized cases")
    ap.add_argument("--no-torch", action="store_true", help="do not time PyTorch")
    ap.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--torch-child", metavar="NET", help=argparse.SUPPRESS)
    ap.add_argument("--torch-out", type=Path, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


# ------------------------------------------------------------------------------ data
def read_idx(path):
    """An IDX file (plain or gzip) as a numpy array."""
    import numpy as np
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def data_file(ctl, filename):
    """A data file a control file names, or one of that name in the checkout's data/ (the suite's
    files name ../../data/mnist/..., as the shared folder has it)."""
    path = ctl.parent / filename
    return path if path.exists() else ROOT / "data" / Path(filename).name


def load_net(bench_dir, name, rng):
    """(architecture, inputs, classes, wpen) for a benchmark net."""
    import numpy as np
    from convnet.architecture import Architecture
    from convnet.control import parse_line

    if name in SUITE:
        ctl, n = SUITE[name]
        path = SUITE_DIR / ctl
    else:
        ctl, n = NETS[name]
        path = bench_dir / ctl
    specs, images, labels, shape, wpen = [], None, None, None, 0.0
    for i, text in enumerate(path.read_text().splitlines(), 1):
        cmd = parse_line(text, str(path), i)
        if cmd is None:
            continue
        if cmd.name == "LAYER":
            specs.append(cmd.args["spec"])
        elif cmd.name == "MAKE IMAGE":
            a = cmd.args
            shape = (a["rows"], a["columns"], a["bands"], a["classes"])
        elif cmd.name == "READ MNIST IMAGE":
            images = read_idx(data_file(path, cmd.args["filename"]))[:n]
        elif cmd.name == "READ MNIST LABELS":
            labels = read_idx(data_file(path, cmd.args["filename"]))[:n]
        elif cmd.name == "SET" and cmd.args.get("name") == "WPEN":
            wpen = float(cmd.args["value"])
        elif cmd.name == "TRAIN":
            break
    if images is not None:
        x = (images.astype(np.float64) / 127.5 - 1.0)[:, None, :, :]
        y = labels.astype(np.int64)
        arch = Architecture(specs, x.shape[2], x.shape[3], 1, 10)
    else:
        rows, cols, bands, k = shape
        x = rng.uniform(-1.0, 1.0, (n, bands, rows, cols))
        y = rng.integers(0, k, n)
        arch = Architecture(specs, rows, cols, bands, k)
    return arch, np.ascontiguousarray(x), y, wpen


# ------------------------------------------------------------------------------ timing
def median_time(f, repeat):
    """(median wall seconds, median process CPU seconds) of repeat calls."""
    import numpy as np
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        f()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return float(np.median(wall)), float(np.median(cpu))


def validate(arch, w, x, y, wpen):
    """Fast path against the reference path on the first cases; returns the relative errors."""
    import numpy as np
    from convnet.host.backend import HostBackend
    from convnet.host.reference import ReferenceModel
    xs, ys = x[:4], y[:4]
    c, g = HostBackend(arch, threads=2).evaluator(xs, ys, wpen).gradient(w)
    rc, rg = ReferenceModel(arch).gradient(w, xs, ys, wpen)
    return abs(c - rc) / abs(rc), float(np.linalg.norm(g - rg) / np.linalg.norm(rg))


def net_rng(name):
    """The random generator for one net's data and weights: the same in every process."""
    import numpy as np
    return np.random.default_rng([12345, *name.encode()])


def net_data(args, name):
    """(arch, inputs, classes, wpen, weights) of a benchmark net, the same in every process."""
    rng = net_rng(name)
    arch, x, y, wpen = load_net(args.bench_dir, name, rng)
    return arch, x, y, wpen, rng.normal(0.0, 0.1, arch.n_weights)


def have_torch():
    """True where PyTorch can be imported (checked without importing it here)."""
    import importlib.util
    return importlib.util.find_spec("torch") is not None


def torch_child(args):
    """Time the net in PyTorch float64 on the CPU (run in a process of its own); print one JSON
    line per thread count and save the full-batch gradient in --torch-out for the check."""
    import numpy as np
    import torch
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu import torch_model

    name = args.torch_child
    arch, x, y, wpen, w = net_data(args, name)
    params, loss_fn, host_grad = torch_model(arch, w, torch.float64, torch.device("cpu"))
    xt = torch.from_numpy(x)
    yt = torch.from_numpy(y)

    def gradient():
        loss = loss_fn(xt, yt, wpen)
        return loss, torch.autograd.grad(loss, params)

    def criterion():
        with torch.no_grad():
            return loss_fn(xt, yt, wpen)

    loss, grads = gradient()
    np.save(args.torch_out, np.concatenate([[float(loss.detach())], host_grad(grads).numpy()]))
    for t in [int(v) for v in args.threads.split(",")]:
        torch.set_num_threads(t)
        for _ in range(2):
            gradient()
        tc, _ = median_time(criterion, args.repeat)
        tg, cg = median_time(gradient, args.repeat)
        print(json.dumps({"threads": t, "criterion_s": tc, "gradient_s": tg, "gradient_cpu_s": cg,
                          "version": torch.__version__}))


def run_torch(args, name, ours):
    """PyTorch's timings for one net from a child process: ({threads: row}, version, criterion
    and gradient differences against ours (relative))."""
    import numpy as np
    with tempfile.TemporaryDirectory(prefix="convnet-bench-torch-") as d:
        out = Path(d) / "grad.npy"
        cmd = [sys.executable, __file__, "--torch-child", name, "--threads", args.threads,
               "--repeat", str(args.repeat), "--bench-dir", str(args.bench_dir),
               "--torch-out", str(out), "--warm"]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise SystemExit(f"{name}: the PyTorch run failed:\n{res.stderr}")
        ref = np.load(out)
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    c, g = ours
    diff_c = abs(c - ref[0]) / abs(ref[0])
    diff_g = float(np.linalg.norm(g - ref[1:]) / np.linalg.norm(ref[1:]))
    return {r["threads"]: r for r in rows}, rows[0]["version"], diff_c, diff_g


def bench(args):
    import numpy as np
    import numba
    from convnet.host.threads import blas_controllable

    threads = [int(t) for t in args.threads.split(",")]
    use_torch = not args.no_torch and have_torch()
    print(f"host benchmark: {cpu_name()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}, Python {platform.python_version()}, "
          f"numpy {np.__version__}, numba {numba.__version__}, "
          f"BLAS threads {'held to 1 per worker' if blas_controllable() else 'NOT controllable'}")
    print(f"float64, full batch, median of {args.repeat}; Numba cache: "
          f"{'usual' if args.warm else 'empty at start (first call includes compiling)'}; "
          f"PyTorch: {'CPU float64, own process after ours' if use_torch else 'not timed'}")
    rows = []
    version = None
    for name in args.nets.split(","):
        net_rows, net_version = bench_net(args, name, threads, use_torch)
        rows += net_rows
        version = net_version or version
    print()
    print_table(rows, version)
    print(f"load average after the runs: {os.getloadavg()[0]:.2f}")


def bench_net(args, name, threads, use_torch):
    """One net validated, then timed at each thread count (and in PyTorch when asked): its table
    rows and the PyTorch version (None when not timed)."""
    from convnet.host.backend import HostBackend

    arch, x, y, wpen, w = net_data(args, name)
    be = HostBackend(arch, threads=max(threads))
    ev = be.evaluator(x, y, wpen)
    t0 = time.perf_counter()
    ours = ev.gradient(w)
    first = time.perf_counter() - t0
    err_c, err_g = validate(arch, w, x, y, wpen)
    if err_c > 1e-9 or err_g > 1e-9:
        raise SystemExit(f"{name}: fast path disagrees with the reference path "
                         f"(criterion {err_c:.1e}, gradient {err_g:.1e})")
    mine = []
    for t in threads:
        be.threads = t
        ev.gradient(w)                          # work areas for this thread count
        tc, _ = median_time(lambda: ev.criterion(w), args.repeat)
        tg, cg = median_time(lambda: ev.gradient(w), args.repeat)
        mine.append((t, be.block_size(x.shape[0]), tc, tg, cg))
    be.close()
    pt, diff, version = {}, None, None
    if use_torch:
        pt, version, dc, dg = run_torch(args, name, ours)
        diff = max(dc, dg)
    rows = [(name, x.shape[0], t, b, tc, tg, cg, first, err_g, pt.get(t), diff)
            for t, b, tc, tg, cg in mine]
    return rows, version


def print_table(rows, version):
    """The table of every net and thread count, and what its columns mean."""
    head = (f"{'net':<12} {'cases':>6} {'thr':>3} {'block':>5} {'criterion s':>11} "
            f"{'gradient s':>10} {'grad CPU s':>10} {'crit/grad':>9} {'cases/s':>8} "
            f"{'first call s':>12} {'vs ref':>8}")
    if version:
        head += (f" {'torch crit s':>12} {'torch grad s':>12} {'torch CPU s':>11} {'ours/torch':>10}"
                 f" {'CPU ratio':>9} {'vs torch':>8}")
    print(head)
    for name, n, t, b, tc, tg, cg, first, err, p, diff in rows:
        line = (f"{name:<12} {n:>6} {t:>3} {b:>5} {tc:>11.4f} {tg:>10.4f} {cg:>10.4f} "
                f"{tc / tg:>9.2f} {n / tg:>8.0f} {first:>12.2f} {err:>8.0e}")
        if p:
            line += (f" {p['criterion_s']:>12.4f} {p['gradient_s']:>12.4f} "
                     f"{p['gradient_cpu_s']:>11.4f} {tg / p['gradient_s']:>10.2f} "
                     f"{cg / p['gradient_cpu_s']:>9.2f} {diff:>8.0e}")
        print(line)
    print("gradient s, criterion s: wall clock; grad CPU s: CPU time of the whole process per "
          "gradient (all threads).")
    if version:
        print(f"torch: PyTorch {version} on the CPU, float64, the same cases and weights, "
              f"torch.set_num_threads(thr); ours/torch: gradient time over PyTorch's; CPU ratio: "
              f"the same for the processes' CPU time (steadier where other work loads the machine; "
              f"with several threads it counts PyTorch's spinning threads too); vs torch: "
              f"relative difference of the full-batch criterion and gradient (max-pooling ties "
              f"may fall on another element where sums are taken in another order).")


def cpu_name():
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# ------------------------------------------------------------------------------ memory
def memory_child(n, threads):
    """Peak RSS of one gradient of the lenet-mnist net on n random 28x28 cases."""
    import numpy as np
    from convnet.architecture import Architecture
    from convnet.host.backend import HostBackend

    lines = ["CONVOLUTIONAL LAYER 20 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
             "CONVOLUTIONAL LAYER 50 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
             "FULLY CONNECTED LAYER 500"]
    arch = Architecture.from_lines(lines, 28, 28, 1, 10)
    rng = np.random.default_rng(0)
    be = HostBackend(arch, threads=threads)
    small = be.evaluator(rng.uniform(-1, 1, (4, 1, 28, 28)), np.zeros(4, dtype=np.int64))
    small.gradient(np.zeros(arch.n_weights))            # compile / load kernels first
    x = rng.uniform(-1, 1, (n, 1, 28, 28))
    y = rng.integers(0, 10, n)
    w = rng.normal(0, 0.1, arch.n_weights)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ev = be.evaluator(x, y)
    t0 = time.perf_counter()
    ev.gradient(w)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"{n} {threads} {be.block_size(n)} {x.nbytes / 2**20:.1f} {before / 1024:.1f} "
          f"{after / 1024:.1f} {seconds:.2f}")


def memory(args):
    print("peak RSS (resource.getrusage ru_maxrss) around one full-batch gradient of lenet-mnist")
    print(f"{'cases':>6} {'thr':>3} {'block':>5} {'inputs MiB':>10} {'RSS before MiB':>14} "
          f"{'RSS after MiB':>13} {'growth MiB':>10} {'seconds':>8}")
    for threads in (1, 2):
        for n in (6000, 60000):
            out = subprocess.run([sys.executable, __file__, "--memory-child", str(n), "--threads",
                                  str(threads), "--warm"], capture_output=True, text=True,
                                 check=True).stdout.split()
            n_, t_, b_, xm, before, after, sec = out
            print(f"{n_:>6} {t_:>3} {b_:>5} {xm:>10} {before:>14} {after:>13} "
                  f"{float(after) - float(before):>10.1f} {sec:>8}")


def main(argv=None):
    args = parse_args(argv)
    if args.suite:
        args.nets = ",".join(SUITE)
    if not args.warm:
        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="convnet-bench-numba-")
    sys.path.insert(0, str(ROOT))
    if args.torch_child:
        torch_child(args)
    elif args.memory_child:
        memory_child(args.memory_child, int(args.threads))
    elif args.memory:
        memory(args)
    else:
        bench(args)


if __name__ == "__main__":
    main()
