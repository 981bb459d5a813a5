"""The CUDA path on a real GPU: reference vectors, random architectures of every layer type, launch
splits, weight copies, timings and CUDA.LOG. Skipped where PyCUDA or a GPU is missing."""

import dataclasses

import numpy as np
import pytest

from convnet.architecture import Architecture
from convnet.device import device_available
from convnet.device.options import DeviceOptions
from convnet.device.plan import ModelPlan, simulate
from convnet.errors import ConvnetError
from convnet.params import DeviceParams, Params

from test_device_emulated import FLOAT32  # the float32 kernels' variants, tensor cores off

_OK, _WHY = device_available()
pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not _OK, reason=f"no CUDA device: {_WHY}")]


def _backend(arch, params=None, options=DeviceOptions()):
    from convnet.device.backend import DeviceBackend
    return DeviceBackend(arch, params or DeviceParams(), dataclasses.replace(options, poison=True))


def _rel(a, b):
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / max(np.linalg.norm(b), 1e-300))


def test_reference_vectors(reference_case):
    z, arch = reference_case.arrays, reference_case.arch
    be = _backend(arch)
    ev = be.evaluator(z["inputs"], z["classes"], float(z["wpen"]))
    crit, grad = ev.gradient(z["weights"])
    assert np.isfinite(grad).all()
    assert abs(crit - z["criterion"]) <= 1e-6 * abs(z["criterion"])
    assert _rel(grad, z["gradient"]) <= 1e-5
    assert abs(ev.criterion(z["weights"]) - crit) <= 1e-12 * abs(crit)
    assert np.abs(ev.outputs(z["weights"]) - z["outputs"]).max() < 1e-6
    acts = be.activations(z["weights"], z["inputs"])
    for i, a in enumerate(acts):
        for c in range(a.shape[0]):
            key = f"act_L{i}_case{c}"
            if key in z:
                assert np.abs(a[c] - z[key]).max() < 1e-5
    for i, a in be.poolmax_winners(z["weights"], z["inputs"]).items():
        for c in range(a.shape[0]):
            key = f"poolmax_id_L{i}_case{c}"
            if key in z:
                assert np.array_equal(a[c], z[key])


def random_architecture(rng):
    """A random valid architecture mixing every layer type (retries until one builds)."""
    kinds = ["CONV", "LOCAL", "POOLMAX", "POOLAVG", "FC"]
    while True:
        rows, cols = int(rng.integers(5, 15)), int(rng.integers(5, 15))
        bands, ncls = int(rng.integers(1, 4)), int(rng.integers(2, 7))
        lines = []
        for _ in range(int(rng.integers(1, 5))):
            k = kinds[int(rng.integers(0, len(kinds)))]
            if k in ("CONV", "LOCAL"):
                hv, hh = int(rng.integers(0, 3)), int(rng.integers(0, 3))
                name = "CONVOLUTIONAL" if k == "CONV" else "LOCAL"
                lines.append(f"{name} LAYER {int(rng.integers(1, 40))} {hv} {hh} "
                             f"{int(rng.integers(0, hv + 1))} {int(rng.integers(0, hh + 1))} "
                             f"{int(rng.integers(1, 3))} {int(rng.integers(1, 3))}")
            elif k.startswith("POOL"):
                name = "MAX" if k == "POOLMAX" else "AVERAGE"
                lines.append(f"POOLED {name} LAYER {int(rng.integers(1, 4))} {int(rng.integers(1, 4))} "
                             f"{int(rng.integers(1, 3))} {int(rng.integers(1, 3))}")
            else:
                lines.append(f"FULLY CONNECTED LAYER {int(rng.integers(1, 70))}")
        try:
            return Architecture.from_lines(lines, rows, cols, bands, ncls)
        except ConvnetError:
            continue


SEEDS = list(range(10))


@pytest.mark.parametrize("seed", SEEDS)
def test_random_architectures_and_launch_splits(seed):
    rng = np.random.default_rng(1000 + seed)
    arch = random_architecture(rng)
    n = 700
    x = rng.random((n, arch.bands, arch.rows, arch.cols))
    c = rng.integers(0, arch.n_classes, n)
    w = rng.normal(0, 0.5, arch.n_weights)
    wpen = 0.01
    crit_ref, grad_ref, p_ref, _ = simulate(ModelPlan(arch), w, x, c, wpen)
    exact = []
    for params in (DeviceParams(), DeviceParams(max_batch=256), DeviceParams(max_batch=512, max_hid_grad=1),
                   DeviceParams(max_batch=768, max_mem_grad=1)):
        crit, grad = _backend(arch, params).evaluator(x, c, wpen).gradient(w)
        assert abs(crit - crit_ref) <= 1e-6 * crit_ref, (arch, params)
        assert _rel(grad, grad_ref) <= 1e-5, (arch, params)
        exact.append((crit, grad))
    for crit, grad in exact[1:]:          # MAX BATCH >= 256, MAX HID GRAD, MAX MEM GRAD: same bits
        assert crit == exact[0][0]
        assert np.array_equal(grad, exact[0][1])
    for params in (DeviceParams(max_batch=100), DeviceParams(max_batch=7, max_hid_grad=5, max_mem_grad=1)):
        be = _backend(arch, params)
        ev = be.evaluator(x, c, wpen)
        crit, grad = ev.gradient(w)
        assert abs(crit - crit_ref) <= 1e-6 * crit_ref, (arch, params)
        assert _rel(grad, grad_ref) <= 1e-5, (arch, params)
        assert np.abs(ev.outputs(w) - p_ref).max() < 1e-5


def test_against_host_backend():
    from convnet.model import Model
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 6 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
                                    "CONVOLUTIONAL LAYER 8 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
                                    "FULLY CONNECTED LAYER 40"], 28, 28, 1, 10)
    rng = np.random.default_rng(7)
    x = rng.random((400, 1, 28, 28))
    c = rng.integers(0, 10, 400)
    w = rng.normal(0, 0.2, arch.n_weights)
    host = Model(arch, "cpu")
    host.weights = w
    dev = Model(arch, "cuda")
    dev.weights = w
    hc, hg = host.gradient(x, c, 0.001)
    dc, dg = dev.gradient(x, c, 0.001)
    assert abs(dc - hc) <= 1e-6 * hc
    assert _rel(dg, hg) <= 1e-5
    assert np.abs(dev.predict(x) - host.predict(x)).max() < 1e-5
    for a, b in zip(dev.activations(x[:20]), host.activations(x[:20])):
        assert np.abs(a - b).max() < 1e-5


def test_weights_sent_as_float64_and_rounded_on_the_device():
    """The device rounds the weights to float32 (the host's rounding, to the bit) and sums their
    penalty; criterion and gradient agree on it."""
    arch = Architecture.from_lines(["LOCAL LAYER 3 1 1 1 1 1 1", "FULLY CONNECTED LAYER 5"], 6, 6, 2, 3)
    rng = np.random.default_rng(3)
    x, c = rng.random((50, 2, 6, 6)), rng.integers(0, 3, 50)
    be = _backend(arch)
    ev = be.evaluator(x, c, 0.3)
    w = rng.normal(0, 0.3, arch.n_weights)
    c1 = ev.criterion(w)
    c2, _ = ev.gradient(w.copy())
    ev.outputs(w)
    assert be.weight_uploads == 3 and c1 == c2
    w32 = np.empty(arch.n_weights, np.float32)
    with be.rt.active():
        be.rt.cuda.memcpy_dtoh(w32, be.d_w32)
    assert np.array_equal(w32, w.astype(np.float32))
    no_penalty = be.evaluator(x, c, 0.0).criterion(w)
    assert (c1 - no_penalty) == pytest.approx(ev.penalty.value(w), rel=1e-10)
    w[-1] += 0.5                          # the last output bias: it moves the criterion
    assert ev.criterion(w) != c1


def test_timings_and_cuda_log(tmp_path):
    from convnet.device.cuda_log import write_cuda_log
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 4 1 1 1 1 1 1", "POOLED MAX LAYER 2 2 2 2",
                                    "FULLY CONNECTED LAYER 6"], 8, 8, 1, 3)
    rng = np.random.default_rng(5)
    x, c = rng.random((300, 1, 8, 8)), rng.integers(0, 3, 300)
    be = _backend(arch, DeviceParams(max_batch=100), DeviceOptions(fuse=False))
    ev = be.evaluator(x, c)
    for k in range(3):
        ev.gradient(rng.normal(0, 0.3, arch.n_weights))
    rows = be.timings()
    acts = {(label, a) for label, a, _, _ in rows}
    for label in ("Layer 1 CONV", "Layer 2 POOLMAX", "Layer 3 FC", "Output"):
        assert (label, "forward") in acts
    assert ("Layer 1 CONV", "gradient") in acts and ("Layer 3 FC", "delta") in acts
    assert ("Layer 1 CONV", "delta") in acts and ("Output", "delta") not in acts
    total = sum(s for *_, s in rows)
    assert total > 0 and abs(total - be.timer.total_seconds) < 1e-9
    fwd = [n for label, a, n, _ in rows if label == "Layer 1 CONV" and a == "forward"][0]
    assert fwd == 3 * 3                   # 3 batches of 100 cases, 3 evaluations
    path = write_cuda_log(str(tmp_path / "CUDA.LOG"), be, arch,
                          Params.from_phrases({"MAX BATCH": 100, "WPEN": 0.0}))
    text = open(path).read()
    for title in ("1. Device and capabilities", "2. Architecture and training parameters",
                  "3. Device memory allocations", "4. Device time by layer and activity"):
        assert title in text
    assert "Compute capability" in text and "scratch" in text and "Sum of the rows" in text


def test_device_report():
    from convnet.device import device_report
    lines = device_report()
    assert lines[0].startswith("Device 0:") and any("Compute capability" in s for s in lines)


def test_model_cuda_errors_are_user_errors():
    from convnet.model import Model
    arch = Architecture.from_lines([], 3, 3, 1, 2)
    m = Model(arch, "cuda")
    with pytest.raises(ConvnetError):
        m.gradient(np.zeros((2, 1, 4, 4)), np.zeros(2, int))


def _tn_fitting(tile, R, N):
    """tile, or where a whole-column variant does not fit the launch, the one that does."""
    from convnet.device import tuning
    if tile not in tuning.TN_COLS or tuning.tn_cols_shape(tile, R, N) is not None:
        return tile
    return next((t for t in tuning.TN_COLS if tuning.tn_cols_shape(t, R, N) is not None),
                next(iter(tuning.TN_TILES)))


def _nn_fitting(tile, M, N, dense, candidates):
    """tile, or where it is a variant for dense rows that this launch cannot take (not among
    its candidates), the first shape."""
    from convnet.device import tuning
    special = {*tuning.NN_DENSE, *tuning.NN_NARROW}
    if tile in special and tile not in candidates(M, N, (), dense):
        return next(iter(tuning.NN_TILES))
    return tile


@pytest.mark.parametrize("seed", [3, 5])
def test_every_tile_shape_gives_the_same_bits(seed, monkeypatch):
    from convnet.device import tuning
    rng = np.random.default_rng(2000 + seed)
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 37 1 2 1 1 1 1", "POOLED MAX LAYER 2 2 2 2",
                                    "LOCAL LAYER 20 1 1 1 0 1 1", "FULLY CONNECTED LAYER 70"],
                                   12, 11, 2, 5) if seed == 3 else random_architecture(rng)
    x = rng.random((900, arch.bands, arch.rows, arch.cols))
    c = rng.integers(0, arch.n_classes, 900)
    w = rng.normal(0, 0.4, arch.n_weights)
    nns, tns = list(tuning.NN_TILES), tuning.tn_tiles()
    gather = tuning.nn_candidates
    # and the tiled variants of the convolutional layers' activations (conv_tiled.cu)
    tiled = sorted({t for ct in _backend(arch).conv_tiled.values()
                    for t in [*ct.fwd, *ct.bwd, *ct.grad]}) or [None]
    assert seed != 3 or tiled != [None]
    results = {}
    for i in range(max(len(nns), len(tns), len(tiled))):       # every shape at least once
        nn, tn, ct = nns[i % len(nns)], tns[i % len(tns)], tiled[i % len(tiled)]
        monkeypatch.setattr(tuning, "nn_candidates",
                            lambda M, N, conv=(), dense=False, direct=False, t=nn, ct=ct:
                            [ct] if ct in conv else [_nn_fitting(t, M, N, dense, gather)])
        monkeypatch.setattr(tuning, "tn_candidates", lambda R, N, t=tn: [_tn_fitting(t, R, N)])
        monkeypatch.setattr(tuning, "grad_candidates",
                            lambda grad, ct=ct: [ct] if ct in grad else list(grad)[:1])
        results[(nn, tn, ct)] = _backend(arch, options=FLOAT32).evaluator(x, c, 0.001).gradient(w)
    first = next(iter(results.values()))
    for key, (crit, grad) in results.items():
        assert crit == first[0] and np.array_equal(grad, first[1]), key
    crit_ref, grad_ref, _, _ = simulate(ModelPlan(arch), w, x, c, 0.001)
    tol = 1e-5
    assert abs(first[0] - crit_ref) <= tol / 10 * crit_ref and _rel(first[1], grad_ref) <= tol


@pytest.mark.parametrize("lines", [
    ["CONVOLUTIONAL LAYER 20 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2", "FULLY CONNECTED LAYER 30"],
    ["CONVOLUTIONAL LAYER 7 1 1 1 1 1 1", "POOLED MAX LAYER 3 2 3 2", "CONVOLUTIONAL LAYER 5 1 1 1 1 1 1"],
])
def test_fused_first_layer_gives_the_same_bits(lines):
    """criterion and outputs use the fused kernel, and gradients too where the windows tile the
    first layer (the second architecture); activations the plain kernels. MAX BATCH all and 256."""
    arch = Architecture.from_lines(lines, 15, 14, 2, 4)
    rng = np.random.default_rng(11)
    x, c = rng.random((700, 2, 15, 14)), rng.integers(0, 4, 700)
    w = rng.normal(0, 0.4, arch.n_weights)
    # (conv_grad_pooled adds the first layer's gradient in its own order: held to the same bits in
    # test_first_layer_gradient_from_pooled_deltas)
    fused, plain = _backend(arch, options=DeviceOptions(pooled_grad=False)), _backend(arch, options=DeviceOptions(fuse=False))
    assert fused.fused_pool and not plain.fused_pool
    assert fused.fused_pool_gradient == ("POOLED MAX LAYER 3 2 3 2" in lines)
    ef, ep = fused.evaluator(x, c, 0.01), plain.evaluator(x, c, 0.01)
    cf, gf = ef.gradient(w)
    cp, gp = ep.gradient(w)
    assert cf == cp and np.array_equal(gf, gp)
    cb, gb = _backend(arch, DeviceParams(max_batch=256), DeviceOptions(pooled_grad=False)).evaluator(x, c, 0.01).gradient(w)
    assert cb == cp and np.array_equal(gb, gp)
    assert ef.criterion(w) == ep.criterion(w)
    assert np.array_equal(ef.outputs(w), ep.outputs(w))
    for a, b in zip(fused.activations(w, x[:50]), plain.activations(w, x[:50])):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("params", [DeviceParams(), DeviceParams(max_batch=256)])
def test_graph_replay_gives_the_same_bits(params):
    """Evaluations after the first replay a captured CUDA graph: the same bits as plain launches,
    for changing weights, and the timing table still covers every activity."""
    rng = np.random.default_rng(11)
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 6 2 2 1 1 1 1", "POOLED MAX LAYER 2 2 2 2",
                                    "LOCAL LAYER 5 1 1 1 0 1 1", "FULLY CONNECTED LAYER 20"],
                                   14, 13, 2, 4)
    x = rng.random((700, 2, 14, 13))
    c = rng.integers(0, 4, 700)
    ws = [rng.normal(0, 0.4, arch.n_weights) for _ in range(3)]
    runs = []
    for graphs in (False, True):
        be = _backend(arch, params, DeviceOptions(graphs=graphs))
        ev = be.evaluator(x, c, 0.01)
        out = [(ev.gradient(ws[i % 3]), ev.criterion(ws[i % 3])) for i in range(5)]
        runs.append((out, {(label, a) for label, a, *_ in be.timings()}, ev))
    (eager, acts0, _), (graphed, acts1, ev) = runs
    assert ev.graphs, "no graph was captured"
    for ((c0, g0), k0), ((c1, g1), k1) in zip(eager, graphed):
        assert c0 == c1 and np.array_equal(g0, g1) and k0 == k1
    assert acts0 == acts1


@pytest.mark.parametrize("params", [DeviceParams(), DeviceParams(max_batch=512)])
def test_gradients_beside_the_deltas_give_the_same_bits(params):
    """Untimed evaluations replayed from graphs run each weight gradient on a second stream
    beside the delta from its layer: the same bits as plain launches on one stream, for
    gradients from host weights and from line search points."""
    rng = np.random.default_rng(12)
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 12 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
                                    "CONVOLUTIONAL LAYER 24 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
                                    "FULLY CONNECTED LAYER 200", "FULLY CONNECTED LAYER 40"],
                                   28, 28, 1, 10)
    x = rng.random((3000, 1, 28, 28)) * 2 - 1
    c = rng.integers(0, 10, 3000)
    ws = [rng.normal(0, 0.2, arch.n_weights) for _ in range(3)]
    runs = []
    for graphs in (False, True):
        be = _backend(arch, params, DeviceOptions(graphs=graphs, timing=False))
        ev = be.evaluator(x, c, 0.0)
        out = [ev.gradient(ws[i % 3]) for i in range(6)]
        line = ev.line(ws[0], ws[1] - ws[0])
        for t in (0.25, 0.5, 0.75):
            f, slope, handle = line.evaluate(t)
            out.append((f, np.array(line.gradient(handle)), slope))
        runs.append(out)
    for a, b in zip(*runs):
        assert a[0] == b[0] and np.array_equal(a[1], b[1]) and a[2:] == b[2:]


def test_weights_rounded_by_the_host_are_the_device_rounding():
    """Without a penalty the host rounds the weights to float32 as it stages them: the device
    weights are those of the device's own rounding, to the bit (subnormals, underflow, ties,
    overflow), and so are the criterion and the gradient."""
    arch = Architecture.from_lines(["LOCAL LAYER 3 1 1 1 1 1 1", "FULLY CONNECTED LAYER 5"],
                                   6, 6, 2, 3)
    rng = np.random.default_rng(4)
    x, c = rng.random((50, 2, 6, 6)), rng.integers(0, 3, 50)
    be = _backend(arch)
    n = arch.n_weights
    edge = rng.standard_normal(n) * 2.0 ** rng.integers(-160, 140, n)
    edge[:6] = [1e-40, -1e-46, 1 + 2.0 ** -24, 1 + 3 * 2.0 ** -24, -5e38, 2.0 ** -149 * 0.75]
    device_w32 = []
    for rounded in (False, True):
        with be.rt.active():
            be.stage_weights(edge, rounded=rounded)
            be.queue_upload(rounded=rounded)
            be.rt.stream.synchronize()
            w32 = np.empty(n, np.float32)
            be.rt.cuda.memcpy_dtoh(w32, be.d_w32)
        device_w32.append(w32.view(np.uint32))
    assert np.array_equal(*device_w32)
    ev = be.evaluator(x, c, 0.0)
    w = rng.normal(0, 0.3, n)
    by_host = ev.gradient(w)
    be.stage_weights(w)                 # float64, staged by the caller: rounded on the device
    ev.queue_gradient(None)()
    by_device = ev.finish_gradient()
    assert by_host[0] == by_device[0] and np.array_equal(by_host[1], by_device[1])
    assert by_host[0] == ev.criterion(w)


@pytest.mark.parametrize("params, wpen", [(DeviceParams(), 0.01),
                                          (DeviceParams(max_batch=256), 0.01),
                                          (DeviceParams(max_batch=256), 0.0)])
def test_split_upload_gives_the_same_bits(params, wpen):
    """Host weights sent in two parts, the second on its own stream behind LeNet's first
    layers: the same bits as one upload, for changing weights, eager and replayed as graphs,
    and no evaluation reads a weight of the earlier one."""
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 20 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
                                    "CONVOLUTIONAL LAYER 50 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
                                    "FULLY CONNECTED LAYER 200"], 28, 28, 1, 10)
    rng = np.random.default_rng(12)
    x = rng.uniform(-1, 1, (1100, 1, 28, 28))
    c = rng.integers(0, 10, 1100)
    # weights far apart, so that a stale part would change the results
    ws = [rng.normal(0, s, arch.n_weights) for s in (0.05, 0.4, 0.15)]
    runs = []
    for split in (False, True):
        be = _backend(arch, params, DeviceOptions(split_upload=split))
        assert (be.upload_split is not None) == split
        ev = be.evaluator(x, c, wpen)
        runs.append([(ev.gradient(ws[i % 3]), ev.criterion(ws[(i + 1) % 3])) for i in range(6)])
    assert ev.graphs
    for ((c0, g0), k0), ((c1, g1), k1) in zip(*runs):
        assert c0 == c1 and np.array_equal(g0, g1) and k0 == k1


# LeNet's layers on 28 x 28 digits, with a smaller fully connected layer
LENET_SHAPES = (["CONVOLUTIONAL LAYER 20 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
                 "CONVOLUTIONAL LAYER 50 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
                 "FULLY CONNECTED LAYER 30"], 28, 28, 1, 10)


def evaluations(arch, x, c, w, params, options):
    """What the same-bits tests compare: criterion and gradient of one evaluation, then a
    criterion, the outputs and the activations of the first 60 cases."""
    be = _backend(arch, params, options)
    ev = be.evaluator(x, c, 0.01)
    crit, grad = ev.gradient(w)
    return crit, grad, ev.criterion(w), ev.outputs(w), be.activations(w, x[:60])


def _same_bits_problem(lines, rows, cols, bands, ncls, n=701):
    """An architecture, n random cases, weights, and the float64 model's criterion and gradient."""
    arch = Architecture.from_lines(lines, rows, cols, bands, ncls)
    rng = np.random.default_rng(rows)
    x = rng.uniform(-1, 1, (n, bands, rows, cols))
    c = rng.integers(0, ncls, n)
    w = rng.normal(0, 0.3, arch.n_weights)
    crit_ref, grad_ref, _, _ = simulate(ModelPlan(arch), w, x, c, 0.01)
    return arch, x, c, w, crit_ref, grad_ref


def test_fused_first_layer_in_lenet_gradients_gives_the_same_bits():
    """LeNet's first layer and its pooling in one kernel for gradients as well: the same bits as
    the layers one by one, with MAX BATCH all and 256."""
    arch, x, c, w, crit_ref, grad_ref = _same_bits_problem(*LENET_SHAPES)
    runs = []
    for fuse in (True, False):
        for params in (DeviceParams(), DeviceParams(max_batch=256)):
            be = _backend(arch, params, DeviceOptions(fuse=fuse, pooled_grad=False))
            assert be.fused_pool_gradient == fuse
            runs.append(be.evaluator(x, c, 0.01).gradient(w))
    crit, grad = runs[0]
    assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5
    for other in runs[1:]:
        assert other[0] == crit and np.array_equal(other[1], grad)


def test_pool_backward_tiles_gives_the_same_bits():
    """pool_backward_tiles (max pooling whose windows tile the prior layer) against pool_backward:
    the same gradient bit for bit, with MAX BATCH all and 256, on LeNet's shapes and on pooling
    after pooling (no tanh before it) beside overlapping windows."""
    from test_device_emulated import POOL_ARCHS
    specs = [(*LENET_SHAPES, {1, 3})] + POOL_ARCHS
    for lines, rows, cols, bands, ncls, want in specs:
        arch, x, c, w, crit_ref, grad_ref = _same_bits_problem(lines, rows, cols, bands, ncls)
        runs = []
        for tiles in (True, False):
            for params in (DeviceParams(), DeviceParams(max_batch=256)):
                be = _backend(arch, params, DeviceOptions(pool_tiles=tiles, pooled_grad=False))
                assert be.pool_tiles == (want if tiles else set())
                runs.append(be.evaluator(x, c, 0.01).gradient(w))
        crit, grad = runs[0]
        assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5
        for other in runs[1:]:
            assert other[0] == crit and np.array_equal(other[1], grad), lines


def test_pooling_four_slices_a_thread_gives_the_same_bits(monkeypatch):
    """pool.cu's kernels with four slices a thread (16-byte copies, where the depth is a multiple
    of 4) against one slice a thread: the same criterion, gradient and outputs, bit for bit, for
    average pooling, max windows that tile the prior layer and overlapping ones."""
    from convnet.device import launches
    from test_device_emulated import POOL_ARCHS
    lines, rows, cols, bands, ncls, _ = POOL_ARCHS[-1]
    arch, x, c, w, crit_ref, grad_ref = _same_bits_problem(lines, rows, cols, bands, ncls)
    runs = []
    for lanes in (launches.pool_lanes, lambda depth: 1):
        monkeypatch.setattr(launches, "pool_lanes", lanes)
        ev = _backend(arch).evaluator(x, c, 0.01)
        runs.append((*ev.gradient(w), ev.criterion(w), ev.outputs(w)))
    (crit, grad, crit_only, out), one = runs
    assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5
    assert one[0] == crit and np.array_equal(one[1], grad) and one[2] == crit_only
    assert np.array_equal(one[3], out)


def _near_the_model(arch, run, crit_ref, grad_ref):
    """A (criterion, gradient) within the usual tolerances of the float64 model's, the first
    layer's part on its own too."""
    crit, grad = run
    first = arch.layers[0].weight_slice
    assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5
    assert _rel(grad[first], grad_ref[first]) <= 1e-5


def _only_the_first_layer_differs(arch, run, other):
    """Two (criterion, gradient) of one problem by paths that add the first layer's gradient in
    other orders: the same criterion, that layer's part within float32 rounding, the rest bit for
    bit."""
    (crit, grad), (crit_o, grad_o) = run, other
    first = arch.layers[0].weight_slice
    assert crit_o == crit and _rel(grad_o[first], grad[first]) <= 1e-5
    rest = np.ones(arch.n_weights, bool)
    rest[first] = False
    assert np.array_equal(grad_o[rest], grad[rest])


def test_first_layer_gradient_from_pooled_deltas():
    """conv_grad_pooled (the first layer's weight gradient from its max pooling's deltas and
    winners) on LeNet's shapes and the emulated tests' architectures: the same bits for MAX BATCH
    all and 256, the float64 model within the usual tolerances, and the layer by layer path
    (pool_backward_tiles and gemm_tn, which add in another order) to float32 rounding."""
    from test_device_emulated import POOLED_GRAD_ARCHS
    for lines, rows, cols, bands, ncls in [LENET_SHAPES] + POOLED_GRAD_ARCHS:
        arch, x, c, w, crit_ref, grad_ref = _same_bits_problem(lines, rows, cols, bands, ncls)
        runs = []
        for params in (DeviceParams(), DeviceParams(max_batch=256)):
            be = _backend(arch, params)
            assert be.pooled_grad, lines
            runs.append(be.evaluator(x, c, 0.01).gradient(w))
        crit, grad = runs[0]
        _near_the_model(arch, runs[0], crit_ref, grad_ref)
        assert runs[1][0] == crit and np.array_equal(runs[1][1], grad), lines
        layered = _backend(arch, options=DeviceOptions(pooled_grad=False)).evaluator(x, c, 0.01)
        _only_the_first_layer_differs(arch, (crit, grad), layered.gradient(w))


AVGPOOL_DEEP_SHAPES = (["CONVOLUTIONAL LAYER 32 1 1 1 1 1 1", "POOLED AVERAGE LAYER 2 2 2 2",
                        "CONVOLUTIONAL LAYER 16 1 1 1 1 1 1", "FULLY CONNECTED LAYER 8"],
                       28, 28, 1, 10)


def test_first_layer_gradient_from_average_pooling():
    """conv_small_avg and conv_grad_avg (a first layer and its average pooling in one launch, its
    weight gradient from the pooled deltas with the activations computed again), each variant
    forced: the same bits for every variant and for MAX BATCH all and 256, the float64 model
    within the usual tolerances, and the layer by layer path (conv_small, pool_forward,
    pool_backward, gemm_tn) the same criterion and the same gradient bits but the first layer's,
    which add in another order (to float32 rounding)."""
    from test_device_emulated import AVG_GRAD_ARCHS
    for lines, rows, cols, bands, ncls in [AVGPOOL_DEEP_SHAPES] + AVG_GRAD_ARCHS:
        arch, x, c, w, crit_ref, grad_ref = _same_bits_problem(lines, rows, cols, bands, ncls)
        runs = []
        for params in (DeviceParams(), DeviceParams(max_batch=256)):
            be = _backend(arch, params)
            assert be.pooled_grad and be.first_pool.average, lines
            pool, grad = be.first_pool, be.first_pool.gradient
            for forward, gradient in zip(pool.candidates, grad.candidates * 2):
                pool.candidates = pool.value_candidates = [forward]
                grad.candidates = [gradient]
                ev = be.evaluator(x, c, 0.01)
                runs.append((*ev.gradient(w), ev.criterion(w)))
        crit, grad, crit_only = runs[0]
        _near_the_model(arch, (crit, grad), crit_ref, grad_ref)
        for run in runs[1:]:
            assert run[0] == crit and np.array_equal(run[1], grad) and run[2] == crit_only, lines
        layered = _backend(arch, options=DeviceOptions(pooled_grad=False)).evaluator(x, c, 0.01)
        _only_the_first_layer_differs(arch, (crit, grad), layered.gradient(w))


def test_first_layer_gradient_from_its_deltas():
    """conv_grad_first (a conv_small first layer's weight gradient a position a thread), each
    variant forced: the same bits for every variant and for MAX BATCH all and 256, the float64
    model within the usual tolerances, and the products (first_grad=False) the same criterion and
    the same gradient bits but the first layer's, which add in another order."""
    from test_device_emulated import FIRST_GRAD_ARCHS
    for lines, rows, cols, bands, ncls in FIRST_GRAD_ARCHS:
        arch, x, c, w, crit_ref, grad_ref = _same_bits_problem(lines, rows, cols, bands, ncls)
        runs = []
        for params in (DeviceParams(), DeviceParams(max_batch=256)):
            be = _backend(arch, params, DeviceOptions(first_grad=True))
            candidates = list(be.first_grad.candidates)
            for variant in candidates:
                be.first_grad.candidates = [variant]
                runs.append(be.evaluator(x, c, 0.01).gradient(w))
        crit, grad = runs[0]
        _near_the_model(arch, runs[0], crit_ref, grad_ref)
        for run in runs[1:]:
            assert run[0] == crit and np.array_equal(run[1], grad), lines
        products = _backend(arch, options=DeviceOptions(first_grad=False)).evaluator(x, c, 0.01)
        _only_the_first_layer_differs(arch, (crit, grad), products.gradient(w))


# first layers with max pooling that tiles them: LeNet's, one with padding and three bands, and
# strides of 2 with 3 x 3 windows (conv_small_pool_fixed)
FIRST_POOL_SPECS = [LENET_SHAPES,
                    (["CONVOLUTIONAL LAYER 8 1 1 1 1 1 1", "POOLED MAX LAYER 2 2 2 2",
                      "FULLY CONNECTED LAYER 5"], 10, 12, 3, 4),
                    (["CONVOLUTIONAL LAYER 6 1 1 0 1 2 2", "POOLED MAX LAYER 3 3 3 3",
                      "CONVOLUTIONAL LAYER 4 1 1 1 1 1 1"], 13, 11, 1, 4)]


def test_fixed_first_layer_variants_give_the_same_bits():
    """conv_small_pool_fixed (the first layer and its pooling compiled for the layer's shape),
    each variant forced in turn: the same criterion, gradient and outputs, bit for bit, as
    conv_small_pool, MAX BATCH all and 256, also with weights large enough that tanh saturates
    (ties in the pooling windows, where the first maximum must win)."""
    for lines, rows, cols, bands, ncls in FIRST_POOL_SPECS:
        arch, x, c, w, crit_ref, grad_ref = _same_bits_problem(lines, rows, cols, bands, ncls)
        first = _backend(arch).first_pool
        variants = list(zip(first.candidates, first.value_candidates))
        assert variants[0] == ("generic", "generic") and len(variants) == 4, lines
        for scale in (1.0, 8.0):
            ws = w * scale
            results = {}
            for variant, values in variants:
                for params in (DeviceParams(), DeviceParams(max_batch=256)):
                    be = _backend(arch, params)
                    be.first_pool.candidates = [variant]
                    be.first_pool.value_candidates = [values]
                    ev = be.evaluator(x, c, 0.01)
                    results[variant, str(params)] = (ev.criterion(ws), ev.gradient(ws), ev.outputs(ws))
            crit0, (gcrit0, grad0), out0 = results["generic", str(DeviceParams())]
            if scale == 1.0:
                assert abs(gcrit0 - crit_ref) <= 1e-6 * crit_ref and _rel(grad0, grad_ref) <= 1e-5
            for key, (crit, (gcrit, grad), out) in results.items():
                assert crit == crit0 and gcrit == gcrit0, (lines, scale, key)
                assert np.array_equal(grad, grad0) and np.array_equal(out, out0), (lines, scale, key)


def test_tanhf_rises_outside_the_dip():
    """What conv_small_pool_values relies on (common.cuh, near_tanh_dip), checked over every float
    with the kernels' own build options: tanhf is odd, it never falls from one float to the next
    outside TANH_DIP_LO..TANH_DIP_HI, and every value inside lies between the tanhf of the floats
    just outside. Then the largest of any net inputs has the largest tanhf unless it is near the
    dip."""
    from convnet.device.kernel_cache import CompileJob
    from convnet.device.runtime import Runtime, kernel_source
    rt = Runtime.get()
    common = kernel_source("output.cu")         # common.cuh inlined, with the dip's bounds
    lo = int(common.split("#define TANH_DIP_LO ")[1].split("u")[0], 16)
    hi = int(common.split("#define TANH_DIP_HI ")[1].split("u")[0], 16)
    text = common + r"""
extern "C" __global__ void tanh_scan(unsigned base, unsigned n, unsigned* bad)
{
    const unsigned i = base + blockIdx.x * blockDim.x + threadIdx.x;
    if (i - base >= n) return;
    const float a = __uint_as_float(i), b = __uint_as_float(i + 1);    // a < b, b finite or inf
    const float ta = tanhf(a), tb = tanhf(b);
    if (__float_as_uint(tanhf(-a)) != (__float_as_uint(ta) ^ 0x80000000u)) atomicAdd(bad, 1u);
    const bool inside = i + 1 >= TANH_DIP_LO && i <= TANH_DIP_HI;
    if (tb < ta && !inside) atomicAdd(bad + 1, 1u);
    if (inside && (ta < tanhf(__uint_as_float(TANH_DIP_LO - 1)) ||
                   ta > tanhf(__uint_as_float(TANH_DIP_HI + 1)))) atomicAdd(bad + 2, 1u);
    if (tb < ta) atomicAdd(bad + 3, 1u);
}
"""
    with rt.active():
        job = CompileJob(text, ("-O3",), rt.arch, "tanh_scan")
        f = rt._module(job, rt.cache.build([job])[0]).get_function("tanh_scan")
        bad = rt.alloc(16)
        rt.cuda.memset_d32(bad, 0, 4)
        step = 1 << 30
        for base in range(0, 0x7f800000, step):         # every finite float >= 0 and its successor
            n = min(step, 0x7f800000 - base)
            f(np.uint32(base), np.uint32(n), bad, block=(256, 1, 1), grid=(-(-n // 256), 1))
        counts = np.zeros(4, np.uint32)
        rt.cuda.memcpy_dtoh(counts, bad)
    assert lo < hi < 0x3f800000
    odd, falls_outside, outside_bounds, falls = (int(v) for v in counts)
    assert odd == 0 and falls_outside == 0 and outside_bounds == 0
    assert falls >= 1            # the dip is real: without it the bounds would not be needed


def _dip_problem(lines, rows, cols, bands, signs):
    """Cases whose first layer's net inputs sit on either side of tanhf's dip (and its mirror
    image): 1 x 1 filters reading band 0 alone, slice s weighing it by signs[s % len(signs)], no
    bias, so each net input is a pixel or its negative, exactly."""
    import struct
    arch = Architecture.from_lines(lines, rows, cols, bands, 3)
    f32 = lambda bits: struct.unpack("<f", struct.pack("<I", bits))[0]
    near = [f32(0x3f199999 + d) for d in range(-3, 5)]      # around tanhf's dip at 0.6
    rng = np.random.default_rng(5)
    n = 300
    x = rng.choice(near + [-v for v in near] + [0.1, -0.9], size=(n, bands, rows, cols))
    c = rng.integers(0, 3, n)
    w = rng.normal(0, 0.3, arch.n_weights)
    L = arch.layers[0]
    first = np.zeros((L.depth, L.n_prior_weights))
    first[:, 0] = [signs[s % len(signs)] for s in range(L.depth)]
    w[L.weight_slice] = first.ravel()
    return arch, x, c, w


def _pooled_activation(be, ev, arch, n):
    h = np.empty(arch.layers[1].n_neurons * n, np.float32)
    with be.rt.active():
        be.rt.cuda.memcpy_dtoh(h, ev.ws.acts[1])
    return h.view(np.uint32)


def test_pooled_values_at_tanhf_dip_give_the_same_bits(monkeypatch):
    """Net inputs on either side of tanhf's dip in the same pooling windows: the pooled values of
    forward-only evaluations (one tanhf of each window's largest net input, or near the dip the
    window one by one) equal those that gradients compute with their winners, bit for bit, for a
    conv_small first layer (each variant with and without winners) and a tiled one (each forward
    variant with the pooling in its epilogue)."""
    from convnet.device import tuning
    arch, x, c, w = _dip_problem(["CONVOLUTIONAL LAYER 4 0 0 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
                                  "FULLY CONNECTED LAYER 3"], 8, 8, 1, (1.0, -1.0))
    pooled = {}
    for variant, values in (("fixed_b4", "fixed_b4_v"), ("rolled_b4", "rolled_b4_v"),
                            ("generic", "generic")):
        be = _backend(arch)
        be.first_pool.candidates = [variant]
        be.first_pool.value_candidates = [values]
        ev = be.evaluator(x, c, 0.01)
        for kind in ("criterion", "gradient"):
            getattr(ev, kind)(w)
            pooled[variant, kind] = _pooled_activation(be, ev, arch, len(c))
        assert ev.criterion(w) == ev.gradient(w)[0], variant
    ref = pooled["fixed_b4", "gradient"]
    for key, h in pooled.items():
        assert np.array_equal(h, ref), key
    # 36 slices: too many for conv_small, so the first layer takes the tiled forward variants
    # (with the tensor cores off: its 4 bands, runs of four, would take them there)
    arch, x, c, w = _dip_problem(["CONVOLUTIONAL LAYER 36 0 0 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
                                  "FULLY CONNECTED LAYER 3"], 8, 8, 4, (1.0, -1.0, 0.5))
    float32 = DeviceOptions(tensor_cores=False)
    be = _backend(arch, options=float32)
    assert be.conv_pool == {1} and be.first_pool is None
    gather = tuning.nn_candidates
    ref = None
    for tile in [None] + sorted(be.conv_tiled[0].fwd):
        monkeypatch.setattr(tuning, "nn_candidates",
                            lambda M, N, conv=(), dense=False, direct=False, t=tile: [t] if t in conv else gather(M, N)[:1])
        be = _backend(arch, options=float32)
        ev = be.evaluator(x, c, 0.01)
        for kind in ("criterion", "gradient"):
            getattr(ev, kind)(w)
            h = _pooled_activation(be, ev, arch, len(c))
            ref = h if ref is None else ref
            assert np.array_equal(h, ref), (tile, kind)
        assert ev.criterion(w) == ev.gradient(w)[0], tile


def test_dense_products_give_the_same_bits(monkeypatch):
    """gemm_nn's variants for dense rows (fully connected layers' activations and deltas, 16-byte
    copies; the output layer's activation, a thread an output), each forced where it is allowed:
    the same criterion, gradient and outputs, bit for bit, as the gather tiles, MAX BATCH all and
    256; 500 columns as in LeNet, and a layer of 68 whose last block of 128 columns is mostly
    past the end; 10 and 3 classes."""
    from convnet.device import tuning
    gather = tuning.nn_candidates
    specs = [(["CONVOLUTIONAL LAYER 12 1 1 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
               "FULLY CONNECTED LAYER 500"], 12, 12, 1, 10),
             (["CONVOLUTIONAL LAYER 8 1 1 1 1 1 1", "FULLY CONNECTED LAYER 72",
               "FULLY CONNECTED LAYER 68"], 6, 6, 2, 3)]
    for spec in specs:
        arch, x, c, w, crit_ref, grad_ref = _same_bits_problem(*spec, n=1301)
        out = {}
        for tile, narrow in zip([None] + tuning.NN_DENSE, [None] + tuning.NN_NARROW * 3):
            monkeypatch.setattr(tuning, "nn_candidates", lambda M, N, conv=(), dense=False, direct=False, t=tile,
                                nt=narrow: [t if N > 16 else nt] if dense and t
                                else gather(M, N, conv)[:1])
            for params in (DeviceParams(), DeviceParams(max_batch=256)):
                be = _backend(arch, params, FLOAT32)
                ev = be.evaluator(x, c, 0.01)
                out[tile, str(params)] = (*ev.gradient(w), ev.criterion(w), ev.outputs(w))
                chosen = set(ev.tuner.choice.values())
                assert (tile in chosen) == (narrow in chosen) == (tile is not None), (tile, chosen)
        crit, grad, crit_only, probs = out[None, str(DeviceParams())]
        assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5
        assert crit_only == crit
        for key, (cr, g, co, p) in out.items():
            assert cr == crit and co == crit_only and np.array_equal(g, grad), (spec[0], key)
            assert np.array_equal(p, probs), (spec[0], key)


def test_pooling_in_the_forward_epilogue_gives_the_same_bits(monkeypatch):
    """The max pooling after a tiled CONV layer in each forward variant's epilogue
    (conv_fwd_pool), each variant forced in turn, and after the gather product: the same
    criterion, gradient and outputs, bit for bit, as with the pooling on its own
    (pool_epilogue=False), MAX BATCH all and 256, on LeNet's shapes and 3 x 1 windows."""
    from convnet.device import tuning
    from test_device_emulated import POOL_EPILOGUE_ARCHS
    gather = tuning.nn_candidates
    specs = [(*LENET_SHAPES, {3})] + POOL_EPILOGUE_ARCHS[1:]
    for lines, rows, cols, bands, ncls, pooled in specs:
        arch, x, c, w, crit_ref, grad_ref = _same_bits_problem(lines, rows, cols, bands, ncls)
        plain = _backend(arch, options=DeviceOptions(pool_epilogue=False, tensor_cores=False)).evaluator(x, c, 0.01)
        (crit0, grad0), out0 = plain.gradient(w), plain.outputs(w)
        assert abs(crit0 - crit_ref) <= 1e-6 * crit_ref and _rel(grad0, grad_ref) <= 1e-5
        be = _backend(arch, options=FLOAT32)
        assert be.conv_pool == pooled
        tiles = sorted({t for i in pooled for t in be.conv_tiled[i - 1].fwd})
        for tile in [None] + tiles:
            monkeypatch.setattr(tuning, "nn_candidates",
                                lambda M, N, conv=(), dense=False, direct=False, t=tile: [t] if t in conv else gather(M, N)[:1])
            for params in (DeviceParams(), DeviceParams(max_batch=256)):
                ev = _backend(arch, params, FLOAT32).evaluator(x, c, 0.01)
                crit, grad = ev.gradient(w)
                assert crit == crit0 and np.array_equal(grad, grad0), (lines, tile, params)
                assert ev.criterion(w) == crit0 and np.array_equal(ev.outputs(w), out0)


def test_tiled_convolution_gives_the_same_bits(monkeypatch):
    """conv_tiled.cu's variants (and conv_small.cu's direct kernel of a later small layer) against
    the gather product, each forced as the only candidate of the convolutional layers'
    activations and delta backpropagations (and conv_grad's variants against each other, where
    conv_grad takes a layer's weight gradient): the same criterion,
    gradient, outputs and activations, bit for bit, on LeNet's shapes and on padded, strided,
    odd-depth layers (and the float64 model within the usual tolerances). The device is said to
    have 5 multiprocessors, so that each block of a delta variant that takes group after group of
    cases (AHEAD) takes many."""
    from convnet.device import runtime, tuning
    from test_device_emulated import TILED_ARCHS
    gather = tuning.nn_candidates
    monkeypatch.setattr(runtime.Runtime.get(), "multiprocessors", 5)
    # and tiles of whole warps whose slices leave 2 (22 slices: 6 a thread) and 3 (43: 11) over
    # the groups of 4 (ct_slice), the first followed by pooling in its epilogue
    odd = (["CONVOLUTIONAL LAYER 6 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 22 1 1 1 1 1 1",
            "POOLED MAX LAYER 2 2 2 2", "CONVOLUTIONAL LAYER 43 1 1 1 1 1 1",
            "FULLY CONNECTED LAYER 5"], 8, 8, 1, 3)
    # and a delta whose case takes 52,752 bytes of shared memory (28 x 28 x 16, opted in), its
    # rows of 28 columns also in 4 runs of their own threads
    opted = (["CONVOLUTIONAL LAYER 16 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 16 1 1 1 1 1 1",
              "FULLY CONNECTED LAYER 3"], 28, 28, 1, 3)
    specs = [LENET_SHAPES] + TILED_ARCHS[1:] + [odd, opted]
    for lines, rows, cols, bands, ncls in specs:
        arch, x, c, w, crit_ref, grad_ref = _same_bits_problem(lines, rows, cols, bands, ncls)
        variants = sorted({t for ct in _backend(arch, options=FLOAT32).conv_tiled.values()
                           for t in [*ct.fwd, *ct.bwd, *ct.grad]})
        assert variants, lines
        is_opted = (lines, rows, cols) == opted[:3]
        if is_opted:
            assert {"tiled_c1", "tiled_c1_p4"} <= set(variants)
        runs = {}
        # and the direct kernel of a conv_small layer after the first (the odd net's second)
        small = [tuning.DIRECT] if any(i > 0 for i in _backend(arch).conv_small) else []
        assert small or lines != odd[0]
        for tile in [None] + variants + small:
            monkeypatch.setattr(tuning, "nn_candidates",
                                lambda M, N, conv=(), dense=False, direct=False, t=tile:
                                [t] if t in conv or direct and t == tuning.DIRECT else gather(M, N)[:1])
            monkeypatch.setattr(tuning, "grad_candidates",
                                lambda grad, t=tile: [t] if t in grad else list(grad)[:1])
            for params in (DeviceParams(), DeviceParams(max_batch=256)):
                runs[tile, params.max_batch] = evaluations(arch, x, c, w, params, FLOAT32)
        first = runs[None, None]
        # the one-stage conv_grad net (TILED_ARCHS[5]) sums 600 taps over 256 positions for each
        # case: on an H100 its float32 gradient is 1.7e-5 from the float64 model's
        wide = 2e-5 if lines == TILED_ARCHS[5][0] else 1e-5
        # the 28 x 28 x 16 net's gradient (12,544 inputs to its output layer): 2.0e-5 on an H200
        wide = 4e-5 if is_opted else wide
        assert abs(first[0] - crit_ref) <= 1e-6 * crit_ref and _rel(first[1], grad_ref) <= wide
        for key, run in runs.items():
            assert run[0] == first[0] and np.array_equal(run[1], first[1]), (lines, key)
            assert run[2] == first[2] and np.array_equal(run[3], first[3]), (lines, key)
            for a, b in zip(run[4], first[4]):
                assert np.array_equal(a, b), (lines, key)


def test_line_points_on_the_device_give_the_host_points_gradients():
    """The line search's trial points formed on the device: the gradient of the weights the host
    would send, bit for bit, and the criterion and slope to the last bits of their sums; then
    refinements with them, and with all the refinement's vectors on the device, against one with
    the host's points (LeNet's shapes)."""
    from convnet.train.conjgrad import conjugate_gradients
    arch, x, c, w, _, _ = _same_bits_problem(*LENET_SHAPES)
    ev = _backend(arch).evaluator(x, c, 0.01)
    d = np.random.default_rng(3).normal(0, 0.02, arch.n_weights)
    line = ev.line(w, d)
    for t in (0.0, 0.7, 3.0):
        f, s, handle = line.evaluate(t)
        g = line.gradient(handle)
        f_host, g_host = ev.gradient(w + t * d)
        assert np.array_equal(g, g_host)
        assert abs(f - f_host) <= 1e-14 * abs(f_host)
        assert abs(s - float(g_host @ d)) <= 1e-12 * np.linalg.norm(g_host) * np.linalg.norm(d)
        line = ev.line(w, d)            # the host gradient took the latest one's buffer
    host = conjugate_gradients(ev.criterion, ev.gradient, w, max_iters=8, tol=0.0)
    for kw in ({"line": ev.line}, {"line": ev.line, "vectors": ev.vectors}):
        device = conjugate_gradients(ev.criterion, ev.gradient, w, max_iters=8, tol=0.0, **kw)
        assert device.iterations == host.iterations and device.n_grad == host.n_grad
        assert abs(device.criterion - host.criterion) <= 1e-9 * host.criterion
        assert _rel(device.weights, host.weights) <= 1e-6


SPLIT_SPECS = [LENET_SHAPES,
               (["CONVOLUTIONAL LAYER 37 1 2 1 1 1 1", "LOCAL LAYER 22 1 1 1 0 1 1",
                 "FULLY CONNECTED LAYER 40"], 12, 11, 2, 5),
               (["FULLY CONNECTED LAYER 300", "FULLY CONNECTED LAYER 70"], 16, 16, 1, 10),
               # a first layer's wide window (7 x 7 x 3) of stride 2: its activation too
               (["CONVOLUTIONAL LAYER 24 3 3 0 0 2 2", "FULLY CONNECTED LAYER 30"], 19, 21, 3, 4)]
SPLIT_IDS = ["lenet", "local", "wide", "first"]


@pytest.mark.parametrize("spec", SPLIT_SPECS, ids=SPLIT_IDS)
def test_split_tf32_products_give_the_same_bits_at_float32_accuracy(spec, monkeypatch):
    """Every product on the tensor cores (split TF32): every variant of the gather products and
    of the weight gradients, MAX BATCH all and 256, gives the same bits, and those are as close
    to the float64 model as the golden vectors' tolerances ask (criterion 1e-6, gradient 1e-5)
    and within twice the float32 kernels' own distance from it."""
    from convnet.device import tuning
    arch, x, c, w, crit_ref, grad_ref = _same_bits_problem(*spec)
    split = DeviceOptions(tensor_cores=True)
    runs = {}
    nns, tns = list(tuning.NN_SPLIT), list(tuning.TN_SPLIT)
    first = tuning.nn_split_candidates
    for i in range(max(len(nns), len(tns))):                # every variant at least once
        nn, tn = nns[i % len(nns)], tns[i % len(tns)]
        # (a variant for dense rows where the launch allows it, else the first gather one)
        monkeypatch.setattr(tuning, "nn_split_candidates", lambda M, N, dense=False, t=nn, **_:
                            [t] if dense or t not in tuning.NN_SPLIT_DENSE else first(M, N)[:1])
        monkeypatch.setattr(tuning, "tn_split_candidates", lambda R, N, t=tn: [t])
        for params in (DeviceParams(), DeviceParams(max_batch=256)):
            runs[nn, tn, params.max_batch] = _backend(arch, params, split).evaluator(
                x, c, 0.01).gradient(w)
    crit, grad = next(iter(runs.values()))
    for key, (cr, gr) in runs.items():
        assert cr == crit and np.array_equal(gr, grad), key
    _, grad32 = _backend(arch, options=DeviceOptions(tensor_cores=False)).evaluator(
        x, c, 0.01).gradient(w)
    assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5
    assert _rel(grad, grad_ref) <= 2 * _rel(grad32, grad_ref) + 1e-7


@pytest.mark.parametrize("spec", SPLIT_SPECS, ids=SPLIT_IDS)
def test_tf32_products_give_the_same_bits(spec, monkeypatch):
    """CUDA PRECISION = TF32 (tensor cores wherever they serve): every one-product variant, MAX
    BATCH all and 256, gives the same bits; the gradient is TF32's distance from the float64
    model (far more than split TF32's, under 2 %). Each variant against its TF32 reference:
    benchmarks/kernel.py gemm_nn_tf32 and gemm_tn_tf32."""
    from convnet.device import tuning
    arch, x, c, w, crit_ref, grad_ref = _same_bits_problem(*spec)
    every = DeviceOptions(tensor_cores=True)
    tf32 = DeviceParams(precision="TF32")
    runs = {}
    nns, tns = list(tuning.NN_SPLIT), list(tuning.TN_SPLIT)
    first = tuning.nn_split_candidates
    for i in range(max(len(nns), len(tns))):
        nn, tn = nns[i % len(nns)], tns[i % len(tns)]
        monkeypatch.setattr(tuning, "nn_split_candidates", lambda M, N, dense=False, t=nn, **_:
                            [t] if dense or t not in tuning.NN_SPLIT_DENSE else first(M, N)[:1])
        monkeypatch.setattr(tuning, "tn_split_candidates", lambda R, N, t=tn: [t])
        for params in (tf32, dataclasses.replace(tf32, max_batch=256)):
            runs[nn, tn, params.max_batch] = _backend(arch, params, every).evaluator(
                x, c, 0.01).gradient(w)
    crit, grad = next(iter(runs.values()))
    for key, (cr, gr) in runs.items():
        assert cr == crit and np.array_equal(gr, grad), key
    _, grad_split = _backend(arch, options=every).evaluator(x, c, 0.01).gradient(w)
    assert 10 * _rel(grad_split, grad_ref) < _rel(grad, grad_ref) < 2e-2
    assert abs(crit - crit_ref) <= 1e-3 * crit_ref


def test_whole_column_gradients_give_the_same_bits(monkeypatch):
    """The whole-column weight-gradient variants (gemm_tn_cols) against the tile shapes, on
    LeNet's shapes (26 x 20 and 501 x 50 weight rows x slices) and on a LOCAL layer, MAX BATCH
    all and 256: the same gradient bit for bit."""
    from convnet.device import tuning
    specs = [LENET_SHAPES,
             (["CONVOLUTIONAL LAYER 37 1 2 1 1 1 1", "LOCAL LAYER 22 1 1 1 0 1 1",
               "FULLY CONNECTED LAYER 40"], 12, 11, 2, 5)]
    for spec in specs:
        arch, x, c, w, crit_ref, grad_ref = _same_bits_problem(*spec)
        runs = {}
        for tile in ["32x32_4x4", "128x64_8x4", *tuning.TN_COLS]:
            monkeypatch.setattr(tuning, "tn_candidates", lambda R, N, t=tile: [_tn_fitting(t, R, N)])
            for params in (DeviceParams(), DeviceParams(max_batch=256)):
                runs[tile, params.max_batch] = _backend(arch, params, FLOAT32).evaluator(
                    x, c, 0.01).gradient(w)
        crit, grad = runs["32x32_4x4", None]
        assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5
        for key, (cr, gr) in runs.items():
            assert cr == crit and np.array_equal(gr, grad), key
