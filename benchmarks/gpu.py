"""Device-path benchmark: full-batch criterion and gradient on the GPU for the benchmark nets.

    python benchmarks/gpu.py --out DIR                 # every net, validated, then timed
    python benchmarks/gpu.py --nets lenet-mnist --repeat 20 --no-host
    python benchmarks/gpu.py --suite --out DIR         # the suite table (see below)

--suite times the three benchmark nets and the eight suite nets (benchmarks/suite/*.ctl, copies
of ../shared/bench with their data paths into data/ here, since the GPU machine sees only the
checkout): ours, the best PyTorch in strict float32 (TF32 off) and with TF32 allowed, the floor,
each ratio, and the geometric mean of ours over the best PyTorch. The PyTorch side
(benchmarks/torch_anchor.py) warms torch.compile up until nothing recompiles and reports graph
breaks, skipped CUDA graphs and fallbacks; a compiled step slower than eager is warned about.

For each net of the benchmark control files (the data and layers up to the first TRAIN):
  1. validate: the device criterion and gradient against the host path (float64, the book's
     rules) on every case, layer by layer, and against the same net in PyTorch float64 when
     PyTorch is importable (else the numpy model of plan.py on a subset). PyTorch's float64
     convolutions do not sum every position in the same order, so exact ties in max pooling
     (blank image regions) can fall to another element there: expect it to differ more;
  2. time the device path through the public evaluator (weights alternate between two vectors,
     so every call copies weights in and the host-order gradient out): median wall time;
  3. time the host path (all cases, --host-repeat calls) and, when PyTorch is
     importable, the same model in PyTorch float32 with TF32 off (cuDNN convolutions, unfold for
     LOCAL layers), forward + backward, timed with CUDA events three ways: eager, the whole step
     in one CUDA graph, and torch.compile(mode="reduce-overhead"); we are compared with the best;
  4. the floor: the net's multiply-adds over the float32 rate measured here (a large cuBLAS
     SGEMM, TF32 off), and the fewest bytes (cases in, gradient out) over the copy bandwidth.
A CUDA.LOG per net goes to --out, with the per-layer timing table. The tables printed last:
device ms, cases/s, speed-up over the host path, PyTorch ms (each way) and our time over the
best of them, floor ms; then, per net and launch site, the tuner's steady-state time of every
candidate kernel (fastest first, the chosen one marked), which is how kernel variants are
compared with each other.
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from torch_anchor import (TORCH_MODES, best_ms, ceilings, have_torch,  # noqa: E402,F401
                          torch_model, torch_reference, torch_time)
from torch_anchor import compile_warnings as torch_anchor_warnings  # noqa: E402,F401

NETS = ["log-example", "lenet-mnist", "local-rgb", "mnist-small", "lenet-mnist-split", "series-sp500"]
SUITE = ["cifar-conv", "strided-rgb", "local-mnist", "vgg-mnist", "avgpool-deep", "inexact",
         "wide-fc", "lenet-60k", "log-example", "lenet-mnist", "local-rgb"]
# seconds of our evaluations before any is timed (warm_up)
WARM_UP_SECONDS = 0.5
SUITE_DIR = ROOT / "benchmarks" / "suite"      # the benchmark and suite nets, paths to data/ here


def bench_dir_default():
    for d in (ROOT.parent / "shared" / "bench", ROOT / "shared" / "bench"):
        if d.is_dir():
            return d
    return ROOT.parent / "shared" / "bench"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench-dir", type=Path, default=bench_dir_default())
    ap.add_argument("--nets", default=",".join(NETS))
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--no-host", action="store_true", help="skip timing the host path")
    ap.add_argument("--host-repeat", type=int, default=2)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--suite", action="store_true",
                    help="the three benchmark nets and the suite's eight (benchmarks/suite), "
                         "PyTorch strict float32 and with TF32, the geometric mean")
    ap.add_argument("--tf32", action="store_true", help="also time PyTorch with TF32 allowed")
    ap.add_argument("--torch-modes", default=",".join(TORCH_MODES),
                    help="PyTorch ways to time (eager, graph, compile)")
    ap.add_argument("--params", default="", help='device parameters, e.g. "MAX BATCH=512,CUDA PRECISION=TF32"')
    ap.add_argument("--no-tiled", action="store_true",
                    help="convolutional layers with the gather product alone (no conv_tiled.cu)")
    ap.add_argument("--tensor-cores", choices=("rule", "on", "off"), default="rule",
                    help="products on the tensor cores (split TF32, or one TF32 product with "
                         "CUDA PRECISION=TF32 in --params): where the plan's rule says (the "
                         "default), wherever they can be, or nowhere")
    ap.add_argument("--first-grad", choices=("rule", "on", "off"), default="rule",
                    help="a conv_small first layer's weight gradient from its own deltas a "
                         "position a thread (conv_grad_first): where the plan's rule says, "
                         "wherever it fits, or never")
    ap.add_argument("--profile", metavar="NET",
                    help="run one gradient of NET between cuProfilerStart/Stop (for ncu) and exit")
    ap.add_argument("--sync-check", metavar="NET",
                    help="per activity: CUDA-event time against a synchronized host clock")
    ap.add_argument("--diagnose", metavar="NET",
                    help="compare max-pooling winners and per-layer gradients with the host path")
    args = ap.parse_args(argv)
    args.torch_modes = tuple(m for m in args.torch_modes.split(",") if m)
    if args.suite:
        args.tf32 = args.no_host = True
        if args.bench_dir == bench_dir_default():
            args.bench_dir = SUITE_DIR
        if args.nets == ",".join(NETS):
            args.nets = ",".join(SUITE)
    return args


# ------------------------------------------------------------------------------ data
def load_net(bench_dir, name):
    """(architecture, inputs, classes, wpen) from a control file, up to its first TRAIN."""
    from convnet.architecture import Architecture
    from convnet.control import parse_file
    from convnet.session import Session

    path = bench_dir / f"{name}.ctl"
    commands, _ = parse_file(str(path))
    s = Session(check_only=True, seed=12345)
    for cmd in commands:
        if cmd.name == "TRAIN":
            break
        s.execute(cmd)
    d = s.dataset
    arch = Architecture(s.layer_specs, d.rows, d.cols, d.bands, d.n_classes)
    return arch, d.inputs, d.classes, float(s.params["WPEN"] or 0.0)


def multiply_adds(plan):
    """Multiply-adds per case of one gradient evaluation (forward, delta, weight gradient),
    counting only products that touch the prior layer (not the zero padding)."""
    tables = plan.tables.astype(np.int64)
    fwd = bwd = 0
    for lp in plan.layers:
        if not lp.kind.has_weights:
            continue
        for a_start, _, K, _, _ in lp.fwd.desc:
            valid = int(np.count_nonzero(tables[a_start:a_start + K] != -1))
            fwd += valid * lp.fwd.n_cols
        if lp.bwd is not None:
            bwd += int(lp.bwd.desc[:, 2].sum()) * lp.bwd.n_cols
    return fwd, bwd, fwd


def warm_up(fn, seconds=WARM_UP_SECONDS, least=3):
    """Call fn(i) for at least `seconds` and `least` times. Right after the host path's
    validation the first few dozen milliseconds of evaluations ran slower (wide-fc from host
    weights: 3.5 ms against 2.7 in a median of 10 taken there; NOTES.md, "Host copies in
    threads"), so the timing starts only after this."""
    i, t0 = 0, time.perf_counter()
    while i < least or time.perf_counter() - t0 < seconds:
        fn(i)
        i += 1


def median_ms(fn, repeat):
    times = []
    for i in range(repeat):
        t0 = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def rel(a, b):
    return float(np.linalg.norm(np.asarray(a) - b) / max(np.linalg.norm(b), 1e-300))


# --tensor-cores and --first-grad: DeviceOptions.tensor_cores and .first_grad
TENSOR_CORES = {"rule": None, "on": True, "off": False}


def parse_params(text):
    """A DeviceParams from "MAX BATCH=512,MAX HID GRAD=100,CUDA PRECISION=TF32"."""
    from convnet.params import Params
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, v = (side.strip() for side in part.split("="))
        out[" ".join(k.upper().split())] = int(v) if v.lstrip("-").isdigit() else v.upper()
    return Params.from_phrases(out).device


def profile(args):
    """Warm up, then one gradient evaluation between cuProfilerStart and cuProfilerStop."""
    import ctypes
    from convnet.device.backend import DeviceBackend
    arch, x, c, wpen = load_net(args.bench_dir, args.profile)
    from convnet.device.options import DeviceOptions
    be = DeviceBackend(arch, parse_params(args.params), DeviceOptions(timing=False))
    ev = be.evaluator(x, c, wpen)
    rng = np.random.default_rng(7)
    w = rng.uniform(-0.1, 0.1, arch.n_weights)
    ev.gradient(w)
    ev.gradient(w + 1e-3)
    lib = ctypes.CDLL("libcuda.so.1")
    with be.rt.active():
        lib.cuProfilerStart()
        ev.gradient(w)
        be.rt.stream.synchronize()
        lib.cuProfilerStop()


def sync_check(args):
    from convnet.device.backend import DeviceBackend
    from convnet.device.options import DeviceOptions
    arch, x, c, wpen = load_net(args.bench_dir, args.sync_check)
    options = DeviceOptions(tensor_cores=TENSOR_CORES[args.tensor_cores])
    be = DeviceBackend(arch, parse_params(args.params), options)
    ev = be.evaluator(x, c, wpen)
    rng = np.random.default_rng(7)
    w = rng.uniform(-0.1, 0.1, arch.n_weights)
    for i in range(3):
        ev.gradient(w + i * 1e-4)
    be.reset_timings()
    be.timer.host_sync = True
    for i in range(5):
        ev.gradient(w + i * 1e-3)
    print(f"{'layer':<18}{'activity':<16}{'events ms':>10}{'host ms':>10}")
    for (label, act), (n, s) in be.timer.totals.items():
        h = be.timer.host_totals.get((label, act), (0, 0.0))[1]
        print(f"{label:<18}{act:<16}{s * 200:>10.3f}{h * 200:>10.3f}")
    be.timer.host_sync = False
    be.rt.trace = []
    with be.rt.active():
        t0 = be.rt.cuda.Event()
        t0.record(be.rt.stream)
    ev.gradient(w + 0.5)
    print("launch trace of one evaluation (start, duration in ms from the first event):")
    for name, grid, e0, e1 in be.rt.trace:
        print(f"   {name:<26}{str(grid):<18}{e0.time_since(t0):9.3f}{e1.time_since(e0):9.3f}")
    be.rt.trace = None
    print(f"events in that evaluation: {sum(s for (_, _), (_, s) in be.timer.totals.items()):.6f}")
    w2 = w + 0.01
    c1, g1 = ev.gradient(w2)
    c2, g2 = DeviceBackend(arch, parse_params(args.params), options).evaluator(
        x, c, wpen).gradient(w2)
    print(f"reused evaluator vs fresh one: criterion equal {c1 == c2}, gradient equal "
          f"{bool(np.array_equal(g1, g2))}, max difference {float(np.abs(g1 - g2).max()):.3e}")


def diagnose(args):
    """Where the device gradient departs from the host's: max-pooling winners that differ
    (float32 near-ties), and the per-layer error with and without the cases they touch."""
    from convnet.device.backend import DeviceBackend
    from convnet.model import Model
    arch, x, c, wpen = load_net(args.bench_dir, args.diagnose)
    rng = np.random.default_rng(7)
    w = rng.uniform(-0.1, 0.1, arch.n_weights)
    be = DeviceBackend(arch, parse_params(args.params))
    host = Model(arch, "cpu")
    dwin = be.poolmax_winners(w, x)
    hwin = host.backend.poolmax_winners(w, x)
    bad = np.zeros(x.shape[0], bool)
    for i in sorted(dwin):
        diff = dwin[i] != hwin[i]
        print(f"layer {i + 1}: {int(diff.sum())} pooled neurons in {int(diff.any(axis=1).sum())} cases "
              f"have another winner on the device")
        bad |= diff.any(axis=1)
    for name, keep in (("all cases", np.ones_like(bad)), ("cases with the same winners", ~bad)):
        if not keep.any():
            continue
        dc, dg = be.evaluator(x[keep], c[keep], wpen).gradient(w)
        hc, hg = host.evaluator(x[keep], c[keep], wpen).gradient(w)
        errs = [f"{rel(dg[L.weight_slice], hg[L.weight_slice]):.2e}" for L in arch.all_layers if L.n_weights]
        print(f"{name} ({int(keep.sum())}): criterion {abs(dc - hc) / hc:.2e}, gradient {rel(dg, hg):.2e}, "
              f"by layer {' '.join(errs)}")
    for n in (1000, 2000, 4000, 8000):
        if n > x.shape[0]:
            break
        dc, dg = be.evaluator(x[:n], c[:n], wpen).gradient(w)
        hc, hg = host.evaluator(x[:n], c[:n], wpen).gradient(w)
        errs = [f"{rel(dg[L.weight_slice], hg[L.weight_slice]):.2e}" for L in arch.all_layers if L.n_weights]
        print(f"first {n} cases: gradient {rel(dg, hg):.2e}, by layer {' '.join(errs)}")


def candidate_lines(name, choice, tile_ms, most=8):
    """Lines of the candidate table of one net: per launch site (the JSON record's "tiles" and
    "tile_ms"), its candidates' times in ms, fastest first, the tuner's choice marked *."""
    out = []
    for site, times in tile_ms.items():
        ranked = sorted(times.items(), key=lambda kv: kv[1])
        cells = [f"{t}{'*' if t == choice.get(site) else ''} {ms:.3f}" for t, ms in ranked[:most]]
        more = f"  (+{len(ranked) - most} more)" if len(ranked) > most else ""
        out.append(f"{name:<18}{site:<24}" + "  ".join(cells) + more)
    return out


def validate(args, arch, x, c, wpen, be, ev, w0, use_torch):
    """The device criterion and gradient at w0 against PyTorch float64 (or the numpy model) and
    the host path, overall and per layer."""
    from convnet.device.plan import ModelPlan, simulate
    from convnet.model import Model
    crit, grad = ev.gradient(w0)
    n = x.shape[0]
    info = {"cases": n, "weights": arch.n_weights, "criterion": crit}
    if use_torch:
        rc, rg = torch_reference(arch, w0, x, c, wpen)
        info["layer_err_float64"] = [rel(grad[L.weight_slice], rg[L.weight_slice])
                                     for L in arch.all_layers if L.n_weights]
    else:
        k = min(n, 300)
        rc, rg, _, _ = simulate(ModelPlan(arch), w0, x[:k], c[:k], wpen)
        crit_k, grad_k = be.evaluator(x[:k], c[:k], wpen).gradient(w0)
        crit, grad = crit_k, grad_k
    info["vs_float64"] = (abs(crit - rc) / abs(rc), rel(grad, rg))
    host = Model(arch, "cpu")
    hev = host.evaluator(x, c, wpen)
    crit, grad = ev.gradient(w0)
    hc, hg = hev.gradient(w0)
    info["vs_host"] = (abs(crit - hc) / abs(hc), rel(grad, hg))
    info["layer_err_host"] = [rel(grad[L.weight_slice], hg[L.weight_slice])
                              for L in arch.all_layers if L.n_weights]
    return info, host, hev


def time_device(args, name, arch, params, be, ev, ws, info):
    """Our gradient (timer on and off), criterion and line-search evaluation, CUDA.LOG, and the
    tuner's steady-state time of every candidate."""
    from convnet.device.cuda_log import write_cuda_log
    from convnet.device.timers import TIMED_FIRST
    from convnet.params import Params
    warm_up(lambda i: ev.gradient(ws[i % 2]))
    be.reset_timings()
    for i in range(TIMED_FIRST):        # the evaluations the timer times in full (CUDA.LOG)
        ev.gradient(ws[i % 2])
    ev_seconds = be.timer.total_seconds / max(be.timer.evaluations, 1)
    if args.out:
        write_cuda_log(str(args.out / f"CUDA-{name}.LOG"), be, arch,
                       Params(device=params).replace(WPEN=info["wpen"]))
    # as in training: the timer on, timing one evaluation in TIMED_EVERY from here
    g_ms = median_ms(lambda i: ev.gradient(ws[i % 2]), args.repeat)
    c_ms = median_ms(lambda i: ev.criterion(ws[i % 2]), args.repeat)
    be.timer.enabled = False
    g_ms_quiet = median_ms(lambda i: ev.gradient(ws[i % 2]), args.repeat)
    be.timer.enabled = True
    # the gradient as the refinement's line search takes it: the weights formed on the device
    # (x + t * d), the gradient and its slope along d left there, three numbers fetched; like
    # PyTorch's step, no weights or gradient cross the bus
    line = ev.line(ws[0], ws[1] - ws[0])
    line.evaluate(0.5)
    l_ms = median_ms(lambda i: line.evaluate(0.25 + 0.5 * (i % 2)), args.repeat)
    info.update(gradient_ms=g_ms, gradient_ms_untimed=g_ms_quiet, criterion_ms=c_ms,
                line_ms=l_ms, event_ms=1000 * ev_seconds)
    info["tiles"] = {" ".join(map(str, k)): v for k, v in ev.tuner.choice.items()}
    info["graphs"] = len(ev.graphs)
    with be.rt.active():
        steady = ev.tuner.measure()
    info["tile_ms"] = {" ".join(map(str, k)): {t: round(ms, 4) for t, ms in v.items()}
                       for k, v in steady.items()}


def bench_net(args, name, params, use_torch, mac_rate, bw):
    """Everything measured for one net: validation, our times, the host's, PyTorch's (float32
    strict, and with TF32 allowed under --tf32), and the floor."""
    from convnet.device.backend import DeviceBackend
    from convnet.device.options import DeviceOptions
    arch, x, c, wpen = load_net(args.bench_dir, name)
    rng = np.random.default_rng(7)
    w0 = rng.uniform(-0.1, 0.1, arch.n_weights)
    w1 = w0 + rng.normal(0, 1e-3, arch.n_weights)
    tensor_cores = TENSOR_CORES[args.tensor_cores]
    be = DeviceBackend(arch, params, DeviceOptions(tiled=not args.no_tiled,
                                                   tensor_cores=tensor_cores,
                                                   first_grad=TENSOR_CORES[args.first_grad]))
    ev = be.evaluator(x, c, wpen)
    info, host, hev = validate(args, arch, x, c, wpen, be, ev, w0, use_torch)
    info["wpen"] = wpen
    time_device(args, name, arch, params, be, ev, (w0, w1), info)
    if not args.no_host:
        info["host_ms"] = median_ms(lambda i: hev.gradient((w0, w1)[i % 2]), args.host_repeat)
        info["host_threads"] = host.threads
    if use_torch:
        info["torch"] = torch_time(arch, w0, x, c, wpen, args.repeat, modes=args.torch_modes)
        info["torch_ms"] = best_ms(info["torch"])
        if args.tf32:
            info["torch_tf32"] = torch_time(arch, w0, x, c, wpen, args.repeat, tf32=True,
                                            modes=args.torch_modes)
            info["torch_tf32_ms"] = best_ms(info["torch_tf32"])
    fwd, bwd, grd = multiply_adds(be.plan)
    macs = (fwd + bwd + grd) * x.shape[0]
    info["gflop"] = 2 * macs / 1e9
    if mac_rate:
        bytes_min = 4 * x[0].size * x.shape[0] + 8 * arch.n_weights * 2
        info["floor_ms"] = 1000 * max(macs / mac_rate, bytes_min / bw)
    return info


def geometric_mean(values):
    values = [v for v in values if v]
    return float(np.exp(np.mean(np.log(values)))) if values else None


def main(argv=None):
    args = parse_args(argv)
    if args.profile:
        return profile(args)
    if args.sync_check:
        return sync_check(args)
    if args.diagnose:
        return diagnose(args)
    from convnet.device.backend import device_report
    use_torch = not args.no_torch and have_torch()
    print("\n".join(device_report()))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    mac_rate = bw = None
    if use_torch:
        import torch
        mac_rate, bw = ceilings()
        print(f"Ceilings measured here: float32 SGEMM {2 * mac_rate / 1e12:.1f} TFLOP/s (TF32 off), "
              f"copy {bw / 1e12:.2f} TB/s; PyTorch {torch.__version__}, cuDNN "
              f"{torch.backends.cudnn.version()}")
    params = parse_params(args.params)
    record = {}
    for name in [n for n in args.nets.split(",") if n]:
        try:
            record[name] = bench_net(args, name, params, use_torch, mac_rate, bw)
        except Exception as e:      # one net that fails does not cost the others' figures
            record[name] = {"error": f"{type(e).__name__}: {e}"}
        print(f"{name}: {json.dumps(record[name])}", flush=True)
        if args.out:
            (args.out / "gpu_bench.json").write_text(json.dumps(record, indent=1))
    rows = [(name, info) for name, info in record.items() if "error" not in info]
    print()
    print_suite(rows) if args.suite else print_table(rows)
    for name, info in record.items():
        if "error" in info:
            print(f"{name}: FAILED: {info['error']}")
    print()
    print(f"{'net':<18}{'launch site':<24}candidates, steady-state ms (* the tuner's choice)")
    for name, i in rows:
        for line in candidate_lines(name, i["tiles"], i["tile_ms"]):
            print(line)


def print_table(rows):
    head = (f"{'net':<18}{'cases':>7}{'GFLOP':>7}{'grad ms':>9}{'untimed':>9}{'line ms':>9}"
            f"{'crit ms':>9}{'cases/s':>10}{'host ms':>9}{'x host':>7}{'pt eager':>9}{'pt graph':>9}"
            f"{'pt comp':>9}{'ours/best':>10}{'line/best':>10}{'floor ms':>9}{'err64':>9}"
            f"{'errhost':>9}")
    print(head)
    for name, i in rows:
        h, t, g = i.get("host_ms"), i.get("torch_ms"), i["gradient_ms"]
        tm = i.get("torch", {})
        host_s = f"{h:.1f}" if h else "-"
        speed_s = f"{h / g:.0f}" if h else "-"
        modes_s = "".join(f"{tm[m]:>9.3f}" if m in tm else f"{'-':>9}" for m in TORCH_MODES)
        ratio_s = f"{g / t:.2f}" if t else "-"
        line_s = f"{i['line_ms'] / t:.2f}" if t else "-"
        floor_s = f"{i['floor_ms']:.3f}" if "floor_ms" in i else "-"
        print(f"{name:<18}{i['cases']:>7}{i['gflop']:>7.1f}{g:>9.3f}{i['gradient_ms_untimed']:>9.3f}"
              f"{i['line_ms']:>9.3f}{i['criterion_ms']:>9.3f}{i['cases'] / g * 1000:>10.0f}"
              f"{host_s:>9}{speed_s:>7}{modes_s}{ratio_s:>10}{line_s:>10}{floor_s:>9}"
              f"{i['vs_float64'][1]:>9.1e}{i['vs_host'][1]:>9.1e}")
    print("grad ms: the gradient at host weights, sent up and fetched back (float64); line ms: at a "
          "line search's trial point formed on the device, the gradient left there, as the "
          "refinement evaluates it")
    print("ours/best, line/best: those times over the best of PyTorch eager, CUDA graph and "
          "torch.compile(reduce-overhead) (weights and gradient on the GPU), float32, TF32 off, "
          "same run")
    for name, i in rows:
        for w in i.get("torch", {}).get("warnings", []):
            print(f"WARNING {name}: PyTorch: {w}")


def _mode_cells(times):
    """'best ms (mode)' of one PyTorch precision."""
    best = best_ms(times or {})
    if best is None:
        return "-"
    mode = next(m for m in TORCH_MODES if times.get(m) == best)
    return f"{best:.3f} {mode[:5]}"


def print_suite(rows):
    """The suite table: ours (the gradient from host weights), PyTorch's best strict float32 and
    with TF32, the floor, the ratios, and the geometric means of ours over each."""
    print(f"{'net':<16}{'cases':>7}{'GFLOP':>7}{'ours ms':>9}{'PyTorch f32':>15}{'PyTorch tf32':>15}"
          f"{'floor ms':>9}{'/f32':>7}{'/tf32':>7}{'/floor':>7}{'err64':>9}")
    strict, tf32, line_strict, line_tf32 = [], [], [], []
    for name, i in rows:
        g, line = i["gradient_ms"], i.get("line_ms")
        t, t32 = i.get("torch_ms"), i.get("torch_tf32_ms")
        strict.append(g / t if t else None)
        tf32.append(g / t32 if t32 else None)
        line_strict.append(line / t if t and line else None)
        line_tf32.append(line / t32 if t32 and line else None)
        fl = i.get("floor_ms")
        print(f"{name:<16}{i['cases']:>7}{i['gflop']:>7.1f}{g:>9.3f}{_mode_cells(i.get('torch')):>15}"
              f"{_mode_cells(i.get('torch_tf32')):>15}{(f'{fl:.3f}' if fl else '-'):>9}"
              f"{(f'{g / t:.2f}' if t else '-'):>7}{(f'{g / t32:.2f}' if t32 else '-'):>7}"
              f"{(f'{g / fl:.1f}' if fl else '-'):>7}{i['vs_float64'][1]:>9.1e}")
    gs, gt = geometric_mean(strict), geometric_mean(tf32)
    print(f"geometric mean of ours / best PyTorch: float32 strict {gs:.3f}" if gs else "no PyTorch",
          f", TF32 allowed {gt:.3f}" if gt else "")
    ls, lt = geometric_mean(line_strict), geometric_mean(line_tf32)
    if ls:
        print("the same at a trial point formed on the GPU (as the refinement evaluates, nothing "
              f"over the bus): float32 strict {ls:.3f}"
              + (f", TF32 allowed {lt:.3f}" if lt else ""))
    print("ours: full-batch gradient from host weights (float64 in and out), timer on; PyTorch: "
          "best of eager / CUDA graph / torch.compile(reduce-overhead), weights and gradient on "
          "the GPU; floor: multiply-adds at the SGEMM rate measured here (TF32 off)")
    for name, i in rows:
        for key in ("torch", "torch_tf32"):
            for w in (i.get(key) or {}).get("warnings", []):
                print(f"WARNING {name} ({key}): {w}")


if __name__ == "__main__":
    main()
