"""Device-path benchmark: full-batch criterion and gradient on the GPU for the benchmark nets.

    python benchmarks/gpu.py --out DIR                 # every net, validated, then timed
    python benchmarks/gpu.py --nets lenet-mnist --repeat 20 --no-host

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

NETS = ["log-example", "lenet-mnist", "local-rgb", "mnist-small", "lenet-mnist-split", "series-sp500"]


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
    ap.add_argument("--params", default="", help='device parameters, e.g. "MAX BATCH=512"')
    ap.add_argument("--no-tiled", action="store_true",
                    help="convolutional layers with the gather product alone (no conv_tiled.cu)")
    ap.add_argument("--profile", metavar="NET",
                    help="run one gradient of NET between cuProfilerStart/Stop (for ncu) and exit")
    ap.add_argument("--sync-check", metavar="NET",
                    help="per activity: CUDA-event time against a synchronized host clock")
    ap.add_argument("--diagnose", metavar="NET",
                    help="compare max-pooling winners and per-layer gradients with the host path")
    return ap.parse_args(argv)


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


# ------------------------------------------------------------------------------ PyTorch model
def torch_model(arch, weights, dtype, device):
    """The net in PyTorch with parameters taken from host-order weights. Returns (params, loss_fn)
    where loss_fn(x, y, wpen) gives the criterion; the parameters' gradients concatenated in
    order are the host-order gradient."""
    import torch
    import torch.nn.functional as F
    from convnet.architecture import CONV, FC, LOCAL, POOLAVG, POOLMAX

    w = torch.as_tensor(np.asarray(weights), dtype=dtype, device=device)
    params, layers = [], []
    for L in arch.all_layers:
        kind = FC if L.is_output else L.kind
        if kind in (POOLAVG, POOLMAX):
            layers.append((kind, L, None))
            continue
        block = w[L.weight_offset:L.weight_offset + L.n_weights]
        npw = L.n_prior_weights
        if kind == FC:
            m = block.view(L.depth, npw)
            wt, b = m[:, :-1].clone(), m[:, -1].clone()
        elif kind == CONV:
            m = block.view(L.depth, npw)
            fv, fh = L.spec.filter_v, L.spec.filter_h
            wt = m[:, :-1].reshape(L.depth, L.prior_depth, fv, fh).clone()
            b = m[:, -1].clone()
        else:
            m = block.view(L.depth, L.height, L.width, npw)
            wt, b = m[..., :-1].clone(), m[..., -1].clone()
        wt.requires_grad_(True)
        b.requires_grad_(True)
        params += [wt, b]
        layers.append((kind, L, (wt, b)))
    n_weights = arch.n_weights

    def weight_views():
        # the host order is per neuron [weights..., bias]; grads are reassembled by host_grad
        return params

    def forward(x):
        a = x
        for kind, L, p in layers:
            s = L.spec
            if kind == POOLMAX:
                a = F.max_pool2d(a, (s.width_v, s.width_h), (s.stride_v, s.stride_h))
            elif kind == POOLAVG:
                a = F.avg_pool2d(a, (s.width_v, s.width_h), (s.stride_v, s.stride_h))
            elif kind == CONV:
                a = torch.tanh(F.conv2d(a, p[0], p[1], stride=(s.stride_v, s.stride_h),
                                        padding=(s.pad_v, s.pad_h)))
            elif kind == LOCAL:
                cols = F.unfold(a, (s.filter_v, s.filter_h), padding=(s.pad_v, s.pad_h),
                                stride=(s.stride_v, s.stride_h))            # (n, K, H*W)
                wt = p[0].reshape(L.depth, L.height * L.width, -1)           # (D, P, K)
                z = torch.einsum("nkp,dpk->ndp", cols, wt).reshape(-1, L.depth, L.height, L.width)
                a = torch.tanh(z + p[1])
            else:
                z = F.linear(a.reshape(a.shape[0], -1), p[0], p[1])
                a = z if L.is_output else torch.tanh(z)
        return a

    def loss_fn(x, y, wpen):
        logits = forward(x)
        ll = F.cross_entropy(logits, y, reduction="sum")
        n, ncls = logits.shape
        pen = sum((p[0] ** 2).sum() for _, _, p in layers if p is not None)
        return ll / (n * ncls) + wpen / n_weights * pen

    def host_grad(grads):
        out = []
        gi = iter(grads)
        for kind, L, p in layers:
            if p is None:
                continue
            gw, gb = next(gi), next(gi)
            if kind == LOCAL:
                m = torch.cat([gw.reshape(L.depth, L.height, L.width, -1), gb[..., None]], dim=-1)
            else:
                m = torch.cat([gw.reshape(L.depth, -1), gb[:, None]], dim=1)
            out.append(m.reshape(-1))
        return torch.cat(out)

    return weight_views(), loss_fn, host_grad


def torch_reference(arch, w, x, c, wpen):
    """(criterion, host-order gradient) in float64 on the GPU through PyTorch."""
    import torch
    dev = torch.device("cuda")
    params, loss_fn, host_grad = torch_model(arch, w, torch.float64, dev)
    xt = torch.as_tensor(x, dtype=torch.float64, device=dev)
    yt = torch.as_tensor(c, dtype=torch.int64, device=dev)
    loss = loss_fn(xt, yt, wpen)
    grads = torch.autograd.grad(loss, params)
    return float(loss), host_grad(grads).cpu().numpy()


TORCH_MODES = ("eager", "graph", "compile")


def torch_time(arch, w, x, c, wpen, repeat, modes=TORCH_MODES):
    """Median ms of one full-batch gradient (forward + backward) in PyTorch float32, TF32 off,
    data on the GPU, timed with CUDA events, three ways:
      eager    the step as written;
      graph    the whole step captured once in a CUDA graph and replayed;
      compile  torch.compile(mode="reduce-overhead") of the criterion (Inductor's fused kernels,
               CUDA graphs for forward and backward), then backward().
    Returns {mode: ms} (a mode that fails is left out, with the reason under "<mode>_error")."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    params, loss_fn, _ = torch_model(arch, w, torch.float32, dev)
    xt = torch.as_tensor(x, dtype=torch.float32, device=dev)
    yt = torch.as_tensor(c, dtype=torch.int64, device=dev)

    def eager_step():
        loss = loss_fn(xt, yt, wpen)
        return torch.autograd.grad(loss, params)

    def timed(step):
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        times = []
        for _ in range(repeat):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        return statistics.median(times)

    def graph_step():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                eager_step()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            eager_step()
        return g.replay

    def compile_step():
        torch._logging.set_logs(perf_hints=True)        # says so when it skips CUDA graphs
        compiled = torch.compile(lambda a, b: loss_fn(a, b, wpen), mode="reduce-overhead")

        def step():
            torch.compiler.cudagraph_mark_step_begin()
            for p in params:
                p.grad = None
            compiled(xt, yt).backward()
        return step

    out = {}
    for mode in modes:
        try:
            step = {"eager": lambda: eager_step, "graph": graph_step, "compile": compile_step}[mode]()
            out[mode] = timed(step)
        except Exception as e:          # a mode this PyTorch cannot do: say why, time the others
            out[f"{mode}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return out


def ceilings():
    """(float32 multiply-add rate in MAC/s, copy bandwidth in B/s) measured with PyTorch."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    n = 8192
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    for _ in range(2):
        a @ b
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(5):
        a @ b
    e1.record()
    e1.synchronize()
    mac_rate = 5 * n ** 3 / (e0.elapsed_time(e1) / 1000)
    src = torch.empty(2 ** 29, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    e0.record()
    for _ in range(5):
        dst.copy_(src)
    e1.record()
    e1.synchronize()
    bw = 5 * 2 * src.numel() * 4 / (e0.elapsed_time(e1) / 1000)
    del a, b, src, dst
    torch.cuda.empty_cache()
    return mac_rate, bw


def have_torch():
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


def median_ms(fn, repeat):
    times = []
    for i in range(repeat):
        t0 = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def rel(a, b):
    return float(np.linalg.norm(np.asarray(a) - b) / max(np.linalg.norm(b), 1e-300))


def parse_params(text):
    """A DeviceParams from "MAX BATCH=512,MAX HID GRAD=100"."""
    from convnet.params import Params
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, v = part.split("=")
        out[" ".join(k.upper().split())] = int(v)
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
    arch, x, c, wpen = load_net(args.bench_dir, args.sync_check)
    be = DeviceBackend(arch, parse_params(args.params))
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
    c2, g2 = DeviceBackend(arch, parse_params(args.params)).evaluator(x, c, wpen).gradient(w2)
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


def main(argv=None):
    args = parse_args(argv)
    if args.profile:
        return profile(args)
    if args.sync_check:
        return sync_check(args)
    if args.diagnose:
        return diagnose(args)
    from convnet.device.backend import DeviceBackend, device_report
    from convnet.device.options import DeviceOptions
    from convnet.params import Params
    from convnet.device.cuda_log import write_cuda_log
    from convnet.device.plan import ModelPlan, simulate

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
    rows = []
    record = {}
    for name in [n for n in args.nets.split(",") if n]:
        arch, x, c, wpen = load_net(args.bench_dir, name)
        n = x.shape[0]
        rng = np.random.default_rng(7)
        w0 = rng.uniform(-0.1, 0.1, arch.n_weights)
        w1 = w0 + rng.normal(0, 1e-3, arch.n_weights)
        be = DeviceBackend(arch, params, DeviceOptions(tiled=not args.no_tiled))
        ev = be.evaluator(x, c, wpen)
        crit, grad = ev.gradient(w0)
        info = {"cases": n, "weights": arch.n_weights, "criterion": crit}
        # ---- validation
        if use_torch:
            rc, rg = torch_reference(arch, w0, x, c, wpen)
            info["vs_float64"] = (abs(crit - rc) / abs(rc), rel(grad, rg))
        else:
            k = min(n, 300)
            rc, rg, _, _ = simulate(ModelPlan(arch), w0, x[:k], c[:k], wpen)
            sc, sg = be.evaluator(x[:k], c[:k], wpen).gradient(w0)
            info["vs_float64"] = (abs(sc - rc) / abs(rc), rel(sg, rg))
        from convnet.model import Model
        host = Model(arch, "cpu")
        hev = host.evaluator(x, c, wpen)
        hc, hg = hev.gradient(w0)
        info["vs_host"] = (abs(crit - hc) / abs(hc), rel(grad, hg))
        info["layer_err_host"] = [rel(grad[L.weight_slice], hg[L.weight_slice])
                                  for L in arch.all_layers if L.n_weights]
        if use_torch:
            info["layer_err_float64"] = [rel(grad[L.weight_slice], rg[L.weight_slice])
                                         for L in arch.all_layers if L.n_weights]
        # ---- timing
        ws = (w0, w1)
        from convnet.device.timers import TIMED_FIRST
        for i in range(3):
            ev.gradient(ws[i % 2])
        be.reset_timings()
        for i in range(TIMED_FIRST):        # the evaluations the timer times in full (CUDA.LOG)
            ev.gradient(ws[i % 2])
        ev_seconds = be.timer.total_seconds / max(be.timer.evaluations, 1)
        if args.out:
            write_cuda_log(str(args.out / f"CUDA-{name}.LOG"), be, arch,
                           Params(device=params).replace(WPEN=wpen))
        # as in training: the timer on, timing one evaluation in TIMED_EVERY from here
        g_ms = median_ms(lambda i: ev.gradient(ws[i % 2]), args.repeat)
        c_ms = median_ms(lambda i: ev.criterion(ws[i % 2]), args.repeat)
        be.timer.enabled = False
        g_ms_quiet = median_ms(lambda i: ev.gradient(ws[i % 2]), args.repeat)
        be.timer.enabled = True
        # the gradient as the refinement's line search takes it: the weights formed on the device
        # (x + t * d), the gradient and its slope along d left there, three numbers fetched; like
        # PyTorch's step above, no weights or gradient cross the bus
        line = ev.line(w0, w1 - w0)
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
        if not args.no_host:
            info["host_ms"] = median_ms(lambda i: hev.gradient(ws[i % 2]), args.host_repeat)
            info["host_threads"] = host.threads
        if use_torch:
            info["torch"] = torch_time(arch, w0, x, c, wpen, args.repeat)
            best = [info["torch"][m] for m in TORCH_MODES if m in info["torch"]]
            if best:
                info["torch_ms"] = min(best)
        fwd, bwd, grd = multiply_adds(be.plan)
        macs = (fwd + bwd + grd) * n
        info["gflop"] = 2 * macs / 1e9
        if mac_rate:
            bytes_min = 4 * x[0].size * n + 8 * arch.n_weights * 2
            info["floor_ms"] = 1000 * max(macs / mac_rate, bytes_min / bw)
        record[name] = info
        rows.append((name, info))
        print(f"{name}: {json.dumps(info)}", flush=True)
        del ev, be
    if args.out:
        (args.out / "gpu_bench.json").write_text(json.dumps(record, indent=1))
    print()
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
    print()
    print(f"{'net':<18}{'launch site':<24}candidates, steady-state ms (* the tuner's choice)")
    for name, i in rows:
        for line in candidate_lines(name, i["tiles"], i["tile_ms"]):
            print(line)


if __name__ == "__main__":
    main()
