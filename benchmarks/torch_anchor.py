"""PyTorch anchors for benchmarks/gpu.py: the same net in PyTorch, its full-batch gradient timed
the ways PyTorch users run it, so that our time is compared with PyTorch at its best.

    times = torch_time(arch, w, x, c, wpen, repeat)              # float32, TF32 off
    times = torch_time(arch, w, x, c, wpen, repeat, tf32=True)   # TF32 allowed

Three ways, each timed with CUDA events (median of `repeat` after warming up):
  eager    forward + torch.autograd.grad as written;
  graph    that whole step captured once in a CUDA graph and replayed;
  compile  torch.compile(mode="reduce-overhead") of the criterion with the weights, cases and
           classes as arguments at fixed addresses (Inductor's kernels, CUDA graphs), then
           torch.autograd.grad. It is warmed up until a call compiles nothing new (Dynamo's
           counters unchanged for several calls in a row), and what compiling left out is
           reported: graph breaks, recompilations, CUDA graphs skipped, kernels that fell back to
           ATen. A compiled step slower than eager is reported as such (warnings in the result).
"""

import statistics

import numpy as np


def torch_model(arch, weights, dtype, device):
    """The net in PyTorch with parameters taken from host-order weights. Returns (params, loss_fn,
    host_grad) where loss_fn(x, y, wpen) gives the criterion and host_grad(the parameters'
    gradients) the host-order gradient."""
    import torch
    import torch.nn.functional as F
    from convnet.architecture import CONV, FC, LOCAL, POOLAVG, POOLMAX

    w = torch.as_tensor(np.asarray(weights), dtype=dtype, device=device)
    params, layers = _torch_layers(arch, w)
    n_weights = arch.n_weights

    # what forward reads, as strings and integers only: torch.compile traces them as constants
    # (comparing the layer-kind objects themselves broke its graph in two places)
    steps = [(_tag(kind, L, CONV, FC, LOCAL, POOLAVG, POOLMAX), _geometry(L), p)
             for kind, L, p in layers]

    def forward(x):
        a = x
        for tag, g, p in steps:
            if tag == "max":
                a = F.max_pool2d(a, (g["wv"], g["wh"]), (g["sv"], g["sh"]))
            elif tag == "avg":
                a = F.avg_pool2d(a, (g["wv"], g["wh"]), (g["sv"], g["sh"]))
            elif tag == "conv":
                a = torch.tanh(F.conv2d(a, p[0], p[1], stride=(g["sv"], g["sh"]),
                                        padding=(g["pv"], g["ph"])))
            elif tag == "local":
                cols = F.unfold(a, (g["fv"], g["fh"]), padding=(g["pv"], g["ph"]),
                                stride=(g["sv"], g["sh"]))                  # (n, K, H*W)
                wt = p[0].reshape(g["d"], g["h"] * g["w"], -1)              # (D, P, K)
                z = torch.einsum("nkp,dpk->ndp", cols, wt).reshape(-1, g["d"], g["h"], g["w"])
                a = torch.tanh(z + p[1])
            else:
                z = F.linear(a.reshape(a.shape[0], -1), p[0], p[1])
                a = z if tag == "output" else torch.tanh(z)
        return a

    def loss_fn(x, y, wpen):
        logits = forward(x)
        ll = F.cross_entropy(logits, y, reduction="sum")
        n, ncls = logits.shape
        pen = sum((p[0] ** 2).sum() for _, _, p in layers if p is not None)
        return ll / (n * ncls) + wpen / n_weights * pen

    def host_grad(grads):
        return _host_order(layers, grads)

    # the host order is per neuron [weights..., bias]; grads are reassembled by host_grad
    return params, loss_fn, host_grad


def _torch_layers(arch, w):
    """(the parameters that need gradients, (kind, layer, (weights, bias) or None) per layer)
    from the host-order weights ``w`` (a tensor)."""
    from convnet.architecture import CONV, FC, POOLAVG, POOLMAX

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
    return params, layers


def _host_order(layers, grads):
    """The parameters' gradients as one host-order vector (per neuron: weights, then bias)."""
    import torch
    from convnet.architecture import LOCAL

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




def _tag(kind, L, CONV, FC, LOCAL, POOLAVG, POOLMAX):
    if L.is_output:
        return "output"
    return {POOLMAX: "max", POOLAVG: "avg", CONV: "conv", LOCAL: "local", FC: "fc"}[kind]


def _geometry(L):
    """A layer's windows, strides, padding and shape as plain integers."""
    s = L.spec
    names = {"wv": "width_v", "wh": "width_h", "fv": "filter_v", "fh": "filter_h",
             "sv": "stride_v", "sh": "stride_h", "pv": "pad_v", "ph": "pad_h"}
    g = {k: int(getattr(s, a)) for k, a in names.items() if hasattr(s, a)}
    g.update(d=int(L.depth), h=int(L.height), w=int(L.width))
    return g


TORCH_MODES = ("eager", "graph", "compile")
STABLE_CALLS = 3        # compile: this many calls in a row that compile nothing new
MAX_WARMUP = 40         # ... or give up warming up after this many calls (and say so)


def set_precision(tf32):
    """TF32 on or off for cuBLAS and cuDNN (strict float32: off)."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cudnn.benchmark = True


def _timed(step, repeat):
    import torch
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


def _compile_counts():
    """Dynamo's and Inductor's counters that grow while anything is still being compiled."""
    from torch._dynamo.utils import counters
    return (sum(counters["frames"].values()), counters["stats"].get("unique_graphs", 0),
            sum(counters["recompiles"].values()) if "recompiles" in counters else 0)


def compile_report():
    """What compiling left out, from torch._dynamo.utils.counters: graph breaks by reason,
    recompilations, CUDA graphs skipped (by reason) and ATen fallbacks."""
    from torch._dynamo.utils import counters
    inductor = counters["inductor"]
    return {
        "graphs": counters["stats"].get("unique_graphs", 0),
        "graph_breaks": dict(counters["graph_break"]),
        "recompiles": dict(counters["recompiles"]) if "recompiles" in counters else {},
        "cudagraph_skips": int(inductor.get("cudagraph_skips", 0)),
        "fallbacks": {k: v for k, v in inductor.items() if "fallback" in k},
    }


def _compile_step(loss_fn, params, xt, yt, wpen):
    """A warmed-up torch.compile(reduce-overhead) gradient step and its compile report."""
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    for t in (xt, yt, *params):             # fixed addresses: CUDA graphs need not copy them
        torch._dynamo.mark_static_address(t)
    compiled = torch.compile(lambda a, b, *p: loss_fn(a, b, wpen), mode="reduce-overhead")

    def step():
        torch.compiler.cudagraph_mark_step_begin()
        loss = compiled(xt, yt, *params)
        return torch.autograd.grad(loss, params)

    last, stable, calls = None, 0, 0
    while stable < STABLE_CALLS and calls < MAX_WARMUP:
        step()
        torch.cuda.synchronize()
        calls += 1
        now = _compile_counts()
        stable = stable + 1 if now == last else 0
        last = now
    report = compile_report()
    report["warmup_calls"] = calls
    report["settled"] = stable >= STABLE_CALLS
    return step, report


def torch_time(arch, w, x, c, wpen, repeat, tf32=False, modes=TORCH_MODES):
    """Median ms of one full-batch gradient (forward + backward) in PyTorch float32, data on the
    GPU, each of `modes`; TF32 off unless tf32. Returns {mode: ms, "compile_report": {...},
    "warnings": [...]} (a mode that fails is left out, with the reason under "<mode>_error")."""
    import torch
    set_precision(tf32)
    dev = torch.device("cuda")
    params, loss_fn, _ = torch_model(arch, w, torch.float32, dev)
    xt = torch.as_tensor(x, dtype=torch.float32, device=dev)
    yt = torch.as_tensor(c, dtype=torch.int64, device=dev)

    def eager_step():
        loss = loss_fn(xt, yt, wpen)
        return torch.autograd.grad(loss, params)

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

    out = {"warnings": []}
    for mode in modes:
        try:
            if mode == "compile":
                step, out["compile_report"] = _compile_step(loss_fn, params, xt, yt, wpen)
            else:
                step = eager_step if mode == "eager" else graph_step()
            out[mode] = _timed(step, repeat)
        except Exception as e:          # a mode this PyTorch cannot do: say why, time the others
            out[f"{mode}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    out["warnings"] += compile_warnings(out)
    set_precision(False)
    return out


def compile_warnings(times):
    """Why a compile time may not be PyTorch at its best."""
    out = []
    rep = times.get("compile_report")
    if "compile" in times and "eager" in times and times["compile"] > times["eager"]:
        out.append(f"torch.compile slower than eager ({times['compile']:.3f} > {times['eager']:.3f} ms)")
    if rep:
        if rep["graph_breaks"]:
            out.append(f"graph breaks: {rep['graph_breaks']}")
        if rep["cudagraph_skips"]:
            out.append(f"CUDA graphs skipped {rep['cudagraph_skips']} times")
        if not rep["settled"]:
            out.append(f"still compiling after {rep['warmup_calls']} calls")
        if rep["fallbacks"]:
            out.append(f"ATen fallbacks: {rep['fallbacks']}")
    return out


def best_ms(times):
    """The fastest of the modes timed (None if none was)."""
    found = [times[m] for m in TORCH_MODES if m in times]
    return min(found) if found else None


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


