"""Where the time of a gradient split across GPUs goes (one net, every device of --gpus).

    python benchmarks/multi_gpu_diagnose.py --gpus 0,1 --net "lenet, 60,000 cases"

For each shard evaluator alone (the others idle), for all shards at once through the backend's
threads, and for the whole multi-device gradient (shards plus the host's float64 sum): the median
wall time of a gradient. If the shards at once take about the slowest shard alone, the devices
overlap and the rest is host work; if they take about the sum, something serialises them.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu import median_ms  # noqa: E402
from multi_gpu import NETS, load  # noqa: E402


def profile(fn):
    """The main thread's 12 costliest functions (own time) over fn()."""
    import cProfile
    import pstats
    prof = cProfile.Profile()
    prof.runcall(fn)
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)


def timing_rows(backend, ev, ws, repeat):
    """(what, median ms) of each shard alone, the shards at once and one after another, the whole
    multi-device gradient, and the host's float64 sum of the parts."""
    rows = [(f"shard {k} alone", median_ms(lambda i, p=part: p.gradient(ws[i % 2]), repeat))
            for k, part in enumerate(ev.parts)]
    both = [lambda i, p=p: p.gradient(ws[i % 2]) for p in ev.parts]
    rows.append(("shards at once", median_ms(
        lambda i: backend.run_each([lambda f=f: f(i) for f in both]), repeat)))
    rows.append(("shards one after another", median_ms(lambda i: [f(i) for f in both], repeat)))
    rows.append(("whole multi gradient", median_ms(lambda i: ev.gradient(ws[i % 2]), repeat)))
    part = np.array(ev.parts[0].gradient(ws[0])[1])
    rows.append(("host float64 sum of parts", median_ms(
        lambda i: sum(part for _ in ev.parts), repeat)))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="0,1")
    ap.add_argument("--net", action="append")
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args(argv)
    from convnet.device.multi import device_backend
    from convnet.device.options import DeviceOptions
    from convnet.params import DeviceParams
    rng = np.random.default_rng(1)
    for name in args.net or list(NETS):
        arch, x, c = load(*NETS[name])
        ws = [rng.normal(0, 0.1, arch.n_weights) for _ in range(2)]
        for label, options in (("split upload", DeviceOptions()),
                               ("one upload", DeviceOptions(split_upload=False))):
            backend = device_backend(arch, DeviceParams(cuda_devices=args.gpus), options)
            ev = backend.evaluator(x, c, 0.0)
            for i in range(3):
                ev.gradient(ws[i % 2])
            rows = timing_rows(backend, ev, ws, args.repeat)
            print(f"{name} ({label}, {len(x)} cases, {arch.n_weights} weights)")
            for what, ms in rows:
                print(f"    {what:<30}{ms:>9.2f} ms", flush=True)
            if label == "split upload":
                profile(lambda: [ev.gradient(ws[i % 2]) for i in range(20)])
            backend.close()
            ev = backend = None      # free this backend's GPU memory before the next


if __name__ == "__main__":
    main()
