"""The device backend's host-side logic, run against a numpy emulation of the CUDA runtime.

No GPU is needed: device memory is emulated by byte arrays with bounds checks, and every kernel
by its numpy reference, kept beside its source (convnet/device/kernels/*_reference.py; the grid
must cover the work the way the CUDA kernel's tiles would). This catches argument-order, pointer-offset,
batching and launch-split mistakes in backend.py; the kernels themselves are held to the same
results on a GPU by test_device_backend.py.
"""

import contextlib
import os
import threading

import numpy as np
import pytest

from convnet.architecture import Architecture
from convnet.errors import ConvnetError
from convnet.evaluator import WeightPenalty
from convnet.device import backend as dbe
from convnet.device import kernel_args, launches, runtime, tuning
from convnet.device.plan import ModelPlan, simulate
from convnet.device.kernels.host_memory import HostMemory
from convnet.device.kernels.reference import ReferenceKernels, specializations
from convnet.device.options import DeviceOptions
from convnet.params import DeviceParams, Params

_HERE = os.path.dirname(os.path.abspath(__file__))
# the float32 kernels' variants (the tests of those), not the tensor cores' (split TF32)
FLOAT32 = DeviceOptions(tensor_cores=False)


# ---------------------------------------------------------------------------- the emulated runtime
# The device memory is a HostMemory and every kernel runs its numpy reference, beside its
# source (convnet/device/kernels/*_reference.py).
class _Event:
    def __init__(self, flags=0):
        self.flags = flags
        self.recorded_on = None     # the stream of the last record()

    def record(self, stream=None):
        self.recorded_on = stream
        if _FakeCuda.capturing is not None:
            _FakeCuda.capturing.append((stream, ("record", self)))

    def time_since(self, other):
        return 0.001

    def synchronize(self):
        pass


class _Stream:
    def __init__(self):
        self.waits = []             # the events this stream was told to wait for, in order

    def synchronize(self):
        pass

    def wait_for_event(self, event):
        self.waits.append(event)
        if _FakeCuda.capturing is not None:
            _FakeCuda.capturing.append((self, ("wait", event)))


class _EventFlags:
    DISABLE_TIMING = 2


class _FakeCuda:
    Event = _Event
    Stream = _Stream
    event_flags = _EventFlags

    # while a graph is captured: (stream, work) in the order queued, work an operation or an
    # event's ("record" | "wait", event); launches and copies on the capturing stream have None
    capturing = None

    def __init__(self, mem):
        self.mem = mem
        self.recording = None       # a list while a graph is being captured: async work is kept
        self.depth = 0              # Runtime.active() nesting: the real context is current inside

    @staticmethod
    def device_address(a, what):
        """Like PyCUDA's copies: a device address is an allocation or a Python int (a numpy
        integer such as runtime.ptr's is refused there)."""
        if isinstance(a, np.generic):
            raise AssertionError(f"{what}: a numpy integer as a device address (PyCUDA wants int())")
        return a

    def need_context(self, what):
        """Like the driver: memory and launches need the device's context (Runtime.active())."""
        if self.depth <= 0:
            raise AssertionError(f"{what} outside Runtime.active(): no current CUDA context")

    def _queue(self, op):
        self.need_context("an asynchronous copy")
        if self.recording is not None:
            self.recording.append((None, op))
        else:
            op()

    def memcpy_htod(self, dst, src):
        self.need_context("memcpy_htod")
        self.device_address(dst, "memcpy_htod")
        src = np.ascontiguousarray(src)
        self.mem.view(dst, np.uint8, src.nbytes)[:] = src.view(np.uint8).ravel()

    def memcpy_htod_async(self, dst, src, stream=None):
        self._queue(lambda: self.memcpy_htod(dst, src))

    def memcpy_dtoh(self, dst, src):
        self.need_context("memcpy_dtoh")
        self.device_address(src, "memcpy_dtoh")
        assert dst.flags.c_contiguous
        dst.view(np.uint8).ravel()[:] = self.mem.view(src, np.uint8, dst.nbytes)

    def memcpy_dtoh_async(self, dst, src, stream=None):
        self._queue(lambda: self.memcpy_dtoh(dst, src))

    def memcpy_dtod_async(self, dst, src, size, stream=None):
        self.device_address(dst, "memcpy_dtod")
        self.device_address(src, "memcpy_dtod")
        def copy():
            self.mem.view(dst, np.uint8, size)[:] = self.mem.view(src, np.uint8, size)
        self._queue(copy)

    def memset_d32(self, dst, value, count):
        self.need_context("memset_d32")
        self.device_address(dst, "memset_d32")
        self.mem.view(dst, np.uint32, count)[:] = value

    def memset_d32_async(self, dst, value, count, stream=None):
        self._queue(lambda: self.memset_d32(dst, value, count))

    def pagelocked_empty(self, shape, dtype):
        self.need_context("pagelocked_empty")
        return np.empty(shape, dtype)

    def mem_get_info(self):
        return 8 << 30, 16 << 30



class FakeRuntime:
    """Stands in for runtime.Runtime."""

    def __init__(self):
        self.mem = HostMemory()
        self.cuda = _FakeCuda(self.mem)
        self.kernels = ReferenceKernels(self.mem)
        self.lock = threading.RLock()
        self.stream = _Stream()
        self.pycuda_version = "emulated"
        self.trace = None
        self.launches = []
        self.launch_streams = []    # the stream of each launch in self.launches
        self.captures = 0
        self.graph_launches = 0
        self.specialized = {}       # function name -> (family, CT_* constants, tile variant)
        self.shared_allowed = {}    # function name -> dynamic shared bytes it opted in to

    @contextlib.contextmanager
    def active(self):
        with self.lock:
            self.cuda.depth += 1
            try:
                yield
            finally:
                self.cuda.depth -= 1

    def alloc(self, nbytes):
        self.cuda.need_context("alloc")
        return self.mem.alloc(max(int(nbytes), 16))

    def pinned_for_all(self, n, dtype):
        with self.active():
            return self.cuda.pagelocked_empty(n, dtype)

    def upload(self, array):
        a = np.ascontiguousarray(array)
        buf = self.alloc(a.nbytes)
        if a.nbytes:
            self.cuda.memcpy_htod(buf, a)
        return buf

    def prepare(self, files=(), specialized=()):
        """Like Runtime.prepare: the files asked for are kept (tests read them), and each
        specialisation is made as specialize makes it."""
        self.prepared_files = tuple(files)
        for name, defines, kernels in specialized:
            self.specialize(name, defines, kernels)

    def specialize(self, name, defines, kernels):
        """Like Runtime.specialize: the emulation of each function gets the constants and the
        variant of its instantiation line ("CONV_FWD(name, cases, tm, tn, minb)")."""
        assert name in ("conv_tiled.cu", "conv_small.cu", "conv_patch.cu")
        self.specialized.update(specializations(defines, kernels))

    shared_optin = 227 * 1024     # Hopper's
    multiprocessors = 3           # few, so that a block of an AHEAD delta takes several groups

    def allow_shared(self, name, nbytes):
        assert name in self.specialized and 48 * 1024 < nbytes <= self.shared_optin
        self.shared_allowed[name] = nbytes

    can_capture = True
    on_stream = runtime.Runtime.on_stream

    def capture(self, record):
        """Like a CUDA graph: the launches and async copies record() makes are kept with their
        arguments, not run, and run again at each launch(): those of the capturing stream in
        order, those of another stream (forked from it by an event) as late as the events
        allow, so that a missing wait gives other results than plain launches."""
        main = self.stream
        ops = self.cuda.recording = _FakeCuda.capturing = []
        try:
            record()
        finally:
            self.cuda.recording = _FakeCuda.capturing = None
        self.captures += 1
        rt = self

        class Graph:
            def launch(self, stream):
                rt.graph_launches += 1
                rt.replay(main, ops)
        return Graph()

    def replay(self, main, ops):
        """Run a captured graph: the other streams' work held until the main stream waits for
        an event recorded after it."""
        held = {}
        for stream, work in ops:
            if stream is None or stream is main:
                if not isinstance(work, tuple):
                    work()
                elif work[0] == "wait":
                    for works in held.values():
                        self._run_held(works, work[1])
            else:
                held.setdefault(stream, []).append(work)
        left = [w for works in held.values() for w in works if not isinstance(w, tuple)]
        assert not left, "work on another stream that the captured stream never waited for"

    @staticmethod
    def _run_held(works, event):
        """Run (and drop) a stream's held work up to its last record of `event`, if any."""
        marks = [i for i, work in enumerate(works) if work == ("record", event)]
        if marks:
            ran, works[:] = works[:marks[-1] + 1], works[marks[-1] + 1:]
            for work in ran:
                if not isinstance(work, tuple):
                    work()

    def launch(self, name, grid, block, *args, shared=0):
        self.cuda.need_context(f"launch of {name}")
        if self.cuda.recording is not None:
            stream = self.stream
            self.cuda.recording.append((stream, lambda: self._launch_on(
                stream, name, grid, block, *args, shared=shared)))
            return
        self.launches.append(name)
        self.launch_streams.append(self.stream)
        # (the runtime opts in the gemm_nn variants of tuning.NN_SHARED when it loads them)
        built = tuning.NN_SHARED.get(name[8:], 0) if name.startswith("gemm_nn_") else 0
        assert shared <= max(48 * 1024, self.shared_allowed.get(name, 0), built), name
        if name.startswith("gemm_nn_"):
            assert shared == built, name
        self.kernels.launch(name, grid, block, args, shared, self.specialized)

    def _launch_on(self, stream, name, grid, block, *args, shared=0):
        with self.on_stream(stream):
            self.launch(name, grid, block, *args, shared=shared)

    def free_memory(self):
        return self.cuda.mem_get_info()

    def report(self):
        return ["Device 0: emulated"]


def _pooled(launches, kernel):
    """Whether pooling kernel `kernel` ran, with one slice a thread or four (its _x4 twin)."""
    return kernel in launches or kernel + kernel_args.POOL_FOUR in launches


@pytest.fixture
def fake_runtime(monkeypatch):
    rt = FakeRuntime()
    monkeypatch.setattr(runtime.Runtime, "_instances", {0: rt})
    return rt


def _rel(a, b):
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / max(np.linalg.norm(b), 1e-300))


# ---------------------------------------------------------------------------- tests
def test_emulated_backend_matches_reference(fake_runtime, reference_case):
    z, arch = reference_case.arrays, reference_case.arch
    be = dbe.DeviceBackend(arch)
    ev = be.evaluator(z["inputs"], z["classes"], float(z["wpen"]))
    crit, grad = ev.gradient(z["weights"])
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
    wins = be.poolmax_winners(z["weights"], z["inputs"])
    for i, a in wins.items():
        for c in range(a.shape[0]):
            key = f"poolmax_id_L{i}_case{c}"
            if key in z:
                assert np.array_equal(a[c], z[key])


def test_weights_rounded_by_the_host_without_a_penalty(fake_runtime):
    """Without a penalty the host rounds the weights to float32 as it stages them and the device
    takes them as they come (no line_point); with one, they go as float64 and the device rounds
    them and sums the penalty. The device weights are the same either way."""
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 2 1 1 1 1 1 1"], 5, 5, 1, 3)
    be = dbe.DeviceBackend(arch)
    rng = np.random.default_rng(1)
    x = rng.random((7, 1, 5, 5))
    c = rng.integers(0, 3, 7)
    ev = be.evaluator(x, c)
    w = rng.normal(0, 0.3, arch.n_weights)
    k = len(fake_runtime.launches)
    c1 = ev.criterion(w)
    c2, g2 = ev.gradient(w)
    assert "line_point" not in fake_runtime.launches[k:]
    ev.outputs(w.copy())
    assert be.weight_uploads == 3 and c1 == c2       # every evaluation sends its weights
    w[3] = np.nextafter(w[3], 10.0)       # below float32 resolution: the device weights are the same
    assert np.array_equal(ev.gradient(w)[1], g2)
    w[:3] = [1e-40, -1e-46, 1 + 2.0 ** -24]      # a float32 subnormal, an underflow, a tie
    ev.gradient(w)
    assert np.array_equal(be.h_w32, w.astype(np.float32))
    assert np.array_equal(fake_runtime.mem.view(be.d_w32, np.float32, w.size), w.astype(np.float32))
    with pytest.raises(ConvnetError):
        ev.criterion(w[:-1])
    # with a penalty: float64 as given, rounded and summed on the device (the host's value to
    # rounding), the same device weights
    w = rng.normal(0, 0.3, arch.n_weights)
    k = len(fake_runtime.launches)
    c_pen = be.evaluator(x, c, 0.4).criterion(w)
    assert "line_point" in fake_runtime.launches[k:] and np.array_equal(be.h_w64, w)
    assert np.array_equal(fake_runtime.mem.view(be.d_w32, np.float32, w.size), w.astype(np.float32))
    assert (c_pen - ev.criterion(w)) == pytest.approx(WeightPenalty(arch, 0.4).value(w), rel=1e-10)


RANDOM_ARCHS = [
    (["CONVOLUTIONAL LAYER 3 1 2 1 0 2 1", "POOLED MAX LAYER 2 2 1 2", "LOCAL LAYER 2 1 1 0 1 1 2",
      "FULLY CONNECTED LAYER 5"], 11, 13, 2, 4),
    (["LOCAL LAYER 3 2 1 2 1 1 1", "POOLED AVERAGE LAYER 3 2 2 1", "CONVOLUTIONAL LAYER 4 1 1 1 1 1 1"],
     9, 8, 3, 3),
    (["FULLY CONNECTED LAYER 6", "FULLY CONNECTED LAYER 4"], 4, 5, 2, 5),
    (["POOLED MAX LAYER 2 2 2 2", "CONVOLUTIONAL LAYER 5 1 1 1 1 1 1", "POOLED MAX LAYER 2 3 1 2"],
     10, 12, 1, 2),
]


@pytest.mark.slow
@pytest.mark.parametrize("spec", RANDOM_ARCHS, ids=range(len(RANDOM_ARCHS)))
def test_emulated_launch_splits_change_nothing(fake_runtime, spec):
    lines, rows, cols, bands, ncls = spec
    arch = Architecture.from_lines(lines, rows, cols, bands, ncls)
    rng = np.random.default_rng(len(lines) + rows)
    n = 600
    x = rng.random((n, bands, rows, cols))
    c = rng.integers(0, ncls, n)
    w = rng.normal(0, 0.4, arch.n_weights)
    crit_ref, grad_ref, _, _ = simulate(ModelPlan(arch), w, x, c, 0.01)
    results = []
    for params in (DeviceParams(), DeviceParams(max_batch=256), DeviceParams(max_batch=512, max_hid_grad=1),
                   DeviceParams(max_batch=100, max_mem_grad=1), DeviceParams(max_batch=7)):
        be = dbe.DeviceBackend(arch, params)
        crit, grad = be.evaluator(x, c, 0.01).gradient(w)
        assert abs(crit - crit_ref) <= 1e-6 * crit_ref
        assert _rel(grad, grad_ref) <= 1e-5
        results.append(grad)


def test_split_plan_follows_the_limits(fake_runtime):
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 20 2 2 0 0 1 1", "FULLY CONNECTED LAYER 30"],
                                   16, 16, 1, 10)
    be = dbe.DeviceBackend(arch, DeviceParams(max_batch=1000, max_hid_grad=1000, max_mem_grad=1))
    x = np.random.default_rng(0).random((1000, 1, 16, 16))
    ev = be.evaluator(x, np.zeros(1000, int))
    split = ev.ws.splits[0]
    per = split.slices_per_launch
    assert per * 144 <= 1000 and split.launches == -(-20 // per)
    assert 4 * split.scratch_floats <= 1 << 20
    assert any("launch" in line for line in ev.allocation)


def _random_arch(seed):
    import importlib.util
    spec = importlib.util.spec_from_file_location("tdb", os.path.join(_HERE, "test_device_backend.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.random_architecture(np.random.default_rng(1000 + seed))


@pytest.mark.parametrize("seed", range(10))
def test_emulated_random_architectures(fake_runtime, seed):
    arch = _random_arch(seed)
    rng = np.random.default_rng(seed)
    n = 300
    x = rng.random((n, arch.bands, arch.rows, arch.cols))
    c = rng.integers(0, arch.n_classes, n)
    w = rng.normal(0, 0.5, arch.n_weights)
    crit_ref, grad_ref, _, _ = simulate(ModelPlan(arch), w, x, c, 0.01)
    for params in (DeviceParams(), DeviceParams(max_batch=256, max_hid_grad=3), DeviceParams(max_batch=64, max_mem_grad=1)):
        crit, grad = dbe.DeviceBackend(arch, params).evaluator(x, c, 0.01).gradient(w)
        assert abs(crit - crit_ref) <= 1e-6 * crit_ref
        assert _rel(grad, grad_ref) <= 1e-5


def test_emulated_cuda_log(fake_runtime, tmp_path):
    from convnet.device.cuda_log import write_cuda_log
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 4 1 1 1 1 1 1", "POOLED MAX LAYER 2 2 2 2",
                                    "FULLY CONNECTED LAYER 6"], 8, 8, 1, 3)
    rng = np.random.default_rng(5)
    be = dbe.DeviceBackend(arch, DeviceParams(max_batch=100), DeviceOptions(fuse=False))
    ev = be.evaluator(rng.random((250, 1, 8, 8)), rng.integers(0, 3, 250))
    ev.gradient(rng.normal(0, 0.3, arch.n_weights))
    ev.criterion(rng.normal(0, 0.3, arch.n_weights))
    text = open(write_cuda_log(str(tmp_path / "sub" / "CUDA.LOG"), be, arch,
                               Params.from_phrases({"WPEN": 0.5, "RANDOM SEED": 3}))).read()
    for title in ("1. Device and capabilities", "2. Architecture and training parameters",
                  "3. Device memory allocations", "4. Device time by layer and activity"):
        assert title in text
    assert "MAX BATCH = 100" in text and "WPEN = 0.5" in text and "RANDOM SEED = 3" in text
    assert "CUDA DEVICES" not in text and "CUDA PRECISION = FLOAT32" in text
    assert "Batch size 84 cases, 3 batch(es)" in text
    assert "Layer 1 is convolutional" in text and "Evaluations timed: 2" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("Layer 1 CONV")]
    assert {ln.split()[3] for ln in rows} == {"forward", "delta", "gradient"}


def test_emulated_fused_first_layer(fake_runtime):
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 5 1 1 1 0 1 1", "POOLED MAX LAYER 2 2 2 2",
                                    "FULLY CONNECTED LAYER 7"], 9, 8, 2, 3)
    rng = np.random.default_rng(9)
    x, c = rng.random((300, 2, 9, 8)), rng.integers(0, 3, 300)
    w = rng.normal(0, 0.5, arch.n_weights)
    crit_ref, grad_ref, _, _ = simulate(ModelPlan(arch), w, x, c, 0.01)
    be = dbe.DeviceBackend(arch)
    assert be.fused_pool
    ev = be.evaluator(x, c, 0.01)
    crit = ev.criterion(w)
    assert "conv_small_pool_8" in fake_runtime.launches and not _pooled(fake_runtime.launches, "pool_forward")
    assert abs(crit - crit_ref) <= 1e-6 * crit_ref
    # 9 rows are not a whole number of windows: gradients compute the layers one by one
    assert not be.fused_pool_gradient
    crit, grad = ev.gradient(w)
    assert _pooled(fake_runtime.launches, "pool_forward")
    assert _pooled(fake_runtime.launches, "pool_backward")
    assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5
    assert not dbe.DeviceBackend(arch, options=DeviceOptions(fuse=False)).fused_pool


def test_emulated_fused_first_layer_in_gradients(fake_runtime):
    """Windows that tile the first layer: the gradient's forward pass is fused as well, and the
    first layer's weight gradient comes from the pooled deltas and winners alone (conv_grad_pooled;
    with pooled_grad=False the pooling layer backpropagates them with pool_backward_tiles)."""
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 5 1 1 1 0 1 1", "POOLED MAX LAYER 2 2 2 2",
                                    "FULLY CONNECTED LAYER 7"], 10, 8, 2, 3)
    rng = np.random.default_rng(19)
    x, c = rng.uniform(-1, 1, (300, 2, 10, 8)), rng.integers(0, 3, 300)
    w = rng.normal(0, 0.5, arch.n_weights)
    crit_ref, grad_ref, _, _ = simulate(ModelPlan(arch), w, x, c, 0.01)
    for pooled_grad in (True, False):
        for params in (DeviceParams(), DeviceParams(max_batch=256)):
            be = dbe.DeviceBackend(arch, params, DeviceOptions(pooled_grad=pooled_grad))
            assert be.fused_pool_gradient and be.pooled_grad == pooled_grad
            fake_runtime.launches.clear()
            crit, grad = be.evaluator(x, c, 0.01).gradient(w)
            launched = fake_runtime.launches
            assert "conv_small_pool_8" in launched
            assert not _pooled(launched, "pool_forward") and "conv_small_8" not in launched
            assert _pooled(launched, "pool_backward_tiles") != pooled_grad
            assert ("conv_grad_pooled" in launched) == pooled_grad
            assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5
    assert not dbe.DeviceBackend(arch, options=DeviceOptions(pool_tiles=False)).fused_pool_gradient
    assert not dbe.DeviceBackend(arch, options=DeviceOptions(fuse=False)).fused_pool_gradient
    assert not dbe.DeviceBackend(arch, options=DeviceOptions(fuse=False)).pooled_grad


@pytest.mark.slow
def test_emulated_fixed_first_layer_variants(fake_runtime):
    """The first layer and its pooling compiled for the layer's shape (conv_small_pool_fixed):
    each variant, forced, is built with the layer's constants (checked against the launch's
    shape) and gives the generic kernel's results; a window too large for the registers gets
    the generic kernel alone."""
    from convnet.device.first_layer import FirstLayerPool
    specs = [(["CONVOLUTIONAL LAYER 5 1 1 1 0 1 1", "POOLED MAX LAYER 2 2 2 2",
               "FULLY CONNECTED LAYER 7"], 10, 8, 2, 3),
             (["CONVOLUTIONAL LAYER 6 1 1 0 1 2 2", "POOLED MAX LAYER 3 3 3 3",
               "CONVOLUTIONAL LAYER 4 1 1 1 1 1 1"], 13, 11, 1, 4)]
    for lines, rows, cols, bands, ncls in specs:
        arch = Architecture.from_lines(lines, rows, cols, bands, ncls)
        rng = np.random.default_rng(rows)
        x, c = rng.uniform(-1, 1, (300, bands, rows, cols)), rng.integers(0, ncls, 300)
        w = rng.normal(0, 0.5, arch.n_weights)
        crit_ref, grad_ref, _, _ = simulate(ModelPlan(arch), w, x, c, 0.01)
        for variant, values in (("generic", "generic"), ("fixed_b4", "fixed_b4_v"),
                                ("fixed_b3", "fixed_b3_v"), ("rolled_b4", "rolled_b4_v")):
            be = dbe.DeviceBackend(arch)
            assert be.first_pool.candidates == ["generic", "fixed_b4", "fixed_b3", "rolled_b4"]
            assert be.first_pool.value_candidates == ["generic", "fixed_b4_v", "fixed_b3_v",
                                                      "rolled_b4_v"]
            be.first_pool.candidates = [variant]
            be.first_pool.value_candidates = [values]
            ev = be.evaluator(x, c, 0.01)
            fake_runtime.launches.clear()
            crit, grad = ev.gradient(w)
            assert be.first_pool.function(variant) in fake_runtime.launches
            assert (be.first_pool.function(variant) in fake_runtime.specialized) == (variant != "generic")
            assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5
            # a criterion alone takes the variant that writes no winners
            fake_runtime.launches.clear()
            assert abs(ev.criterion(w) - crit_ref) <= 1e-6 * crit_ref
            assert be.first_pool.function(values) in fake_runtime.launches
            family = fake_runtime.specialized.get(be.first_pool.function(values), ("generic",))[0]
            assert family == ("generic" if values == "generic" else "conv_small_pool_values")
    # 3 x 3 windows of 16 slices: 144 accumulators, more than a thread may keep
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 16 1 1 0 0 1 1", "POOLED MAX LAYER 3 3 3 3",
                                    "FULLY CONNECTED LAYER 3"], 9, 9, 1, 3)
    first = dbe.DeviceBackend(arch).first_pool
    assert 9 * 16 > FirstLayerPool.MAX_ACCUMULATORS and first.candidates == ["generic"]


# conv_grad_pooled: first layers whose max pooling tiles them (lines, rows, cols, bands, classes)
POOLED_GRAD_ARCHS = [
    # 32 slices of 5 x 5 x 4 weights: 4 runs of 5 weight rows a filter row, 672 (run, slice)
    # pairs, two blocks across them
    (["CONVOLUTIONAL LAYER 32 2 2 1 1 1 1", "POOLED MAX LAYER 2 2 2 2", "FULLY CONNECTED LAYER 6"],
     12, 12, 4, 3),
    # strides of 2, 3 x 3 pooling windows, padding on the columns only, then another CONV layer;
    # filter rows of 3 weight rows (a run shorter than 5)
    (["CONVOLUTIONAL LAYER 6 1 1 0 1 2 2", "POOLED MAX LAYER 3 3 3 3",
      "CONVOLUTIONAL LAYER 4 1 1 1 1 1 1"], 13, 11, 1, 4),
]


@pytest.mark.slow
@pytest.mark.parametrize("spec", POOLED_GRAD_ARCHS, ids=range(len(POOLED_GRAD_ARCHS)))
def test_emulated_first_layer_gradient_from_pooled_deltas(fake_runtime, spec):
    """conv_grad_pooled against the float64 model, with the weights' slices in one launch and
    split over several (MAX HID GRAD), and MAX BATCH all and 256."""
    lines, rows, cols, bands, ncls = spec
    arch = Architecture.from_lines(lines, rows, cols, bands, ncls)
    rng = np.random.default_rng(rows * cols)
    x, c = rng.uniform(-1, 1, (300, bands, rows, cols)), rng.integers(0, ncls, 300)
    w = rng.normal(0, 0.5, arch.n_weights)
    crit_ref, grad_ref, _, _ = simulate(ModelPlan(arch), w, x, c, 0.01)
    for params in (DeviceParams(), DeviceParams(max_batch=256), DeviceParams(max_hid_grad=2 * arch.layers[0].height)):
        be = dbe.DeviceBackend(arch, params)
        assert be.pooled_grad
        fake_runtime.launches.clear()
        crit, grad = be.evaluator(x, c, 0.01).gradient(w)
        n = fake_runtime.launches.count("conv_grad_pooled")
        assert n >= (2 if params.max_hid_grad != DeviceParams().max_hid_grad else 1)
        assert not _pooled(fake_runtime.launches, "pool_backward_tiles")
        assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5
        first = arch.layers[0].weight_slice         # the first layer's own part, on its own
        assert _rel(grad[first], grad_ref[first]) <= 1e-5


# conv_grad_avg: first layers whose average pooling tiles them (lines, rows, cols, bands, classes)
AVG_GRAD_ARCHS = [
    # 3 x 3 windows with padding on 12 slices (8 and 4 a thread group), then a CONV layer
    (["CONVOLUTIONAL LAYER 12 1 1 1 1 1 1", "POOLED AVERAGE LAYER 2 2 2 2",
      "CONVOLUTIONAL LAYER 8 1 1 1 1 1 1", "FULLY CONNECTED LAYER 6"], 10, 12, 1, 3),
    # 3 x 3 windows on two bands, strides of 2, padding on the columns, 3 x 3 pooling, 6 slices
    (["CONVOLUTIONAL LAYER 6 1 1 0 1 2 2", "POOLED AVERAGE LAYER 3 3 3 3",
      "FULLY CONNECTED LAYER 5"], 19, 17, 2, 4),
]


def _first_layer_problem(spec):
    """_problem for a first-layer test (300 cases, weights of spread 0.5), and the DeviceParams
    whose MAX HID GRAD splits the first layer's slices over several launches."""
    lines, rows, cols, bands, ncls = spec
    arch, x, c, w, crit_ref, grad_ref, _ = _problem(lines, rows, cols, bands, ncls, 300,
                                                     rows * cols, spread=0.5)
    split = DeviceParams(max_hid_grad=2 * arch.layers[0].height * arch.layers[0].width)
    return arch, x, c, w, crit_ref, grad_ref, split


def _assert_near_the_model(arch, crit, grad, crit_ref, grad_ref):
    """The golden vectors' tolerances, for the whole gradient and for the first layer's part."""
    assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5
    layer0 = arch.layers[0].weight_slice
    assert _rel(grad[layer0], grad_ref[layer0]) <= 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("spec", AVG_GRAD_ARCHS, ids=range(len(AVG_GRAD_ARCHS)))
def test_emulated_first_layer_gradient_from_average_pooling(fake_runtime, spec):
    """A first layer with its average pooling in one launch (conv_small_avg, generic and fixed)
    and its weight gradient from the pooled deltas (conv_grad_avg, each variant): against the
    float64 model, with the weights' slices in one launch and split over several (MAX HID
    GRAD), and MAX BATCH all and 256; nothing of the first layer's size is backpropagated."""
    arch, x, c, w, crit_ref, grad_ref, split = _first_layer_problem(spec)
    for params in (DeviceParams(), DeviceParams(max_batch=256), split):
        be = dbe.DeviceBackend(arch, params)
        assert be.fused_pool and be.fused_pool_gradient and be.pooled_grad
        first = be.first_pool
        assert first.average and len(first.gradient.candidates) == 3
        for forward, gradient in zip(first.candidates, first.gradient.candidates * 2):
            first.candidates = first.value_candidates = [forward]
            first.gradient.candidates = [gradient]
            fake_runtime.launches.clear()
            ev = be.evaluator(x, c, 0.01)
            crit, grad = ev.gradient(w)
            assert first.function(forward) in fake_runtime.launches
            assert first.gradient.function(gradient) in fake_runtime.launches
            n = fake_runtime.launches.count(first.gradient.function(gradient))
            assert n >= (2 if params is split else 1)
            assert not _pooled(fake_runtime.launches, "pool_backward")
            assert f"conv_small_{first.width}" not in fake_runtime.launches
            _assert_near_the_model(arch, crit, grad, crit_ref, grad_ref)
            assert abs(ev.criterion(w) - crit_ref) <= 1e-6 * crit_ref
    # without the gradient from the pooled deltas, a gradient computes every layer on its own
    be = dbe.DeviceBackend(arch, options=DeviceOptions(pooled_grad=False))
    assert be.fused_pool and not be.fused_pool_gradient and not be.pooled_grad


# conv_grad_first: first layers whose gradient comes from their own deltas
FIRST_GRAD_ARCHS = [
    # 3 x 3 windows with padding on 12 slices, a CONV layer after them (vgg-mnist's shape)
    (["CONVOLUTIONAL LAYER 12 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 8 1 1 1 1 1 1",
      "POOLED MAX LAYER 2 2 2 2", "FULLY CONNECTED LAYER 6"], 10, 12, 1, 3),
    # 3 x 3 windows of stride 2 on three bands (strided-rgb's shape), 28 weight rows
    (["CONVOLUTIONAL LAYER 10 1 1 0 0 2 2", "FULLY CONNECTED LAYER 5"], 13, 11, 3, 4),
]


@pytest.mark.slow
@pytest.mark.parametrize("spec", FIRST_GRAD_ARCHS, ids=range(len(FIRST_GRAD_ARCHS)))
def test_emulated_first_layer_gradient_from_its_deltas(fake_runtime, spec):
    """conv_grad_first (a conv_small first layer's weight gradient a position a thread), each
    variant: against the float64 model, with the weights' slices in one launch and split over
    several (MAX HID GRAD), and MAX BATCH all and 256; first_grad=False puts it back on the
    products."""
    arch, x, c, w, crit_ref, grad_ref, split = _first_layer_problem(spec)
    options = DeviceOptions(first_grad=True)
    for params in (DeviceParams(), DeviceParams(max_batch=256), split):
        be = dbe.DeviceBackend(arch, params, options)
        assert be.kernels.first_grad and not be.pooled_grad
        first = be.first_grad
        for variant in list(first.candidates):
            first.candidates = [variant]
            fake_runtime.launches.clear()
            crit, grad = be.evaluator(x, c, 0.01).gradient(w)
            n = fake_runtime.launches.count(first.function(variant))
            assert n >= (2 if params is split else 1)
            _assert_near_the_model(arch, crit, grad, crit_ref, grad_ref)
    be = dbe.DeviceBackend(arch, options=DeviceOptions(first_grad=False))
    assert not be.kernels.first_grad and be.first_grad is None


@pytest.mark.slow
@pytest.mark.parametrize("spec", RANDOM_ARCHS[:2], ids=range(2))
def test_graph_replay_gives_the_eager_results(fake_runtime, spec):
    """From the second evaluation of a kind on, the launches are captured once and replayed;
    the results, bit for bit, and the timing table's entries are those of plain launches."""
    lines, rows, cols, bands, ncls = spec
    arch = Architecture.from_lines(lines, rows, cols, bands, ncls)
    rng = np.random.default_rng(5)
    n = 300
    x = rng.random((n, bands, rows, cols))
    c = rng.integers(0, ncls, n)
    ws = [rng.normal(0, 0.4, arch.n_weights) for _ in range(3)]
    runs = {}
    for graphs in (False, True):
        be = dbe.DeviceBackend(arch, DeviceParams(max_batch=128), DeviceOptions(graphs=graphs))
        ev = be.evaluator(x, c, 0.01)
        out = []
        for i in range(5):
            w = ws[i % 3]
            out.append(ev.gradient(w))
            out.append(ev.criterion(w))
        runs[graphs] = (out, [row[:3] for row in be.timings()], be.timer.evaluations)
    # a graph for gradients and one for criteria, each sending the staged weights
    assert fake_runtime.captures == 2
    assert fake_runtime.graph_launches == 8             # evaluations 2-5 of each kind
    (eager, eager_table, eager_n), (graphed, graph_table, graph_n) = runs[False], runs[True]
    for a, b in zip(eager, graphed):
        if isinstance(a, tuple):
            assert a[0] == b[0] and np.array_equal(a[1], b[1])
        else:
            assert a == b
    assert eager_table == graph_table and eager_n == graph_n == 10


def test_upload_split_choice():
    """Host weights are split before the largest layer after the first, on a whole line_point
    block, and only when what follows is large enough to be worth a second stream."""
    lenet = Architecture.from_lines(
        ["CONVOLUTIONAL LAYER 20 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
         "CONVOLUTIONAL LAYER 50 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
         "FULLY CONNECTED LAYER 500"], 28, 28, 1, 10)
    split = dbe.upload_split(lenet)
    assert split.layer == 4                                  # the fully connected layer
    assert lenet.layers[4].weight_offset == 25570
    assert split.weight == 28672 == 7 * kernel_args.LINE_BLOCK
    assert lenet.n_weights - split.weight >= dbe.UPLOAD_SPLIT_MIN_TAIL
    small = Architecture.from_lines(["CONVOLUTIONAL LAYER 8 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
                                     "FULLY CONNECTED LAYER 32"], 28, 28, 1, 10)
    assert dbe.upload_split(small) is None                   # 37,226 weights: one upload
    single = Architecture.from_lines(["FULLY CONNECTED LAYER 300"], 20, 20, 1, 3)
    assert dbe.upload_split(single) is None                  # the output layer is small
    # a last layer whose offset is already a whole block is split right there
    wide = Architecture.from_lines(["FULLY CONNECTED LAYER 9", "FULLY CONNECTED LAYER 9000"],
                                   kernel_args.LINE_BLOCK // 9 - 1, 9, 1, 2)
    w0 = wide.layers[1].weight_offset
    assert dbe.upload_split(wide).weight == -(-w0 // kernel_args.LINE_BLOCK) * kernel_args.LINE_BLOCK


SPLIT_ARCH = (["CONVOLUTIONAL LAYER 4 1 1 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
               "FULLY CONNECTED LAYER 700"], 12, 12, 1, 3)


@pytest.mark.slow
@pytest.mark.parametrize("max_batch, wpen", [(None, 0.01), (128, 0.01), (128, 0.0)])
def test_emulated_split_upload_gives_the_same_bits(fake_runtime, max_batch, wpen):
    """Host weights sent in two parts (the second on its own stream, behind the first batch's
    first layers) give the criterion, the penalty and the gradient of one upload, bit for bit,
    eager and replayed as graphs; the second part's copy, rounding (by the host without a
    penalty) and scatter run on the upload stream, and the main stream waits for it before
    anything reads those weights."""
    lines, rows, cols, bands, ncls = SPLIT_ARCH
    arch = Architecture.from_lines(lines, rows, cols, bands, ncls)
    rng = np.random.default_rng(8)
    n = 300
    x = rng.random((n, bands, rows, cols)) * 2 - 1
    c = rng.integers(0, ncls, n)
    ws = [rng.normal(0, 0.2, arch.n_weights) for _ in range(3)]
    params = DeviceParams() if max_batch is None else DeviceParams(max_batch=max_batch)
    runs = {}
    for split in (False, True):
        be = dbe.DeviceBackend(arch, params, DeviceOptions(split_upload=split))
        assert (be.upload_split is not None) == split
        ev = be.evaluator(x, c, wpen)
        out = []
        for i in range(4):
            w = ws[i % 3]
            out.append(ev.gradient(w))
            k = len(fake_runtime.launches)
            out.append(ev.criterion(w))
        runs[split] = out
        assert be.weight_uploads == 8
    for a, b in zip(runs[False], runs[True]):
        if isinstance(a, tuple):
            assert a[0] == b[0] and np.array_equal(a[1], b[1])
        else:
            assert a == b
    # the last evaluation (a criterion replayed from graphs): its tail on the upload stream,
    # and every layer from the fully connected one on after it, on the main stream
    side = be.upload_stream
    assert be.before_tail in side.waits and be.tail_sent.recorded_on is side
    assert be.tail_sent in fake_runtime.stream.waits
    names, streams = fake_runtime.launches[k:], fake_runtime.launch_streams[k:]
    on_side = [i for i, st in enumerate(streams) if st is side]
    upload = ["line_point", "weights_scatter"] if wpen else ["weights_scatter"]
    assert [names[i] for i in on_side] == upload
    assert names[:len(upload)] == upload and streams[0] is fake_runtime.stream
    head = names[len(upload):on_side[0]]
    assert head and not any(nm.startswith(("gemm", "softmax")) for nm in head)
    assert all(st is fake_runtime.stream for st in streams[on_side[-1] + 1:])
    assert ("vec_finish" in names[on_side[-1] + 1:]) == bool(wpen)
    assert fake_runtime.graph_launches > 0


# launches of a weight gradient (partial sums, their slots' sum, flattening into acc)
GRADIENT_LAUNCHES = ("gemm_tn", "conv_grad", "grad_slot_sum", "grad_flatten")


def _gradients_beside(arch, graphs, x, c, ws):
    """Three gradients on an evaluator without timing (so that its graphs put gradients beside
    the deltas), and the streams of the last one's launches."""
    be = dbe.DeviceBackend(arch, DeviceParams(max_batch=128),
                           DeviceOptions(graphs=graphs, timing=False))
    ev = be.evaluator(x, c, 0.01)
    rt = runtime.Runtime._instances[0]
    out = []
    for i in range(3):
        k = len(rt.launches)
        out.append(ev.gradient(ws[i]))
    return be, out, list(zip(rt.launches[k:], rt.launch_streams[k:]))


@pytest.mark.parametrize("spec", [RANDOM_ARCHS[0], SPLIT_ARCH], ids=["local", "lenet"])
def test_gradients_beside_the_deltas_give_the_same_bits(fake_runtime, spec):
    """In a replayed, untimed gradient each layer's weight gradient with a delta after it runs
    on the gradient stream, and the main stream waits for it before the next delta overwrites
    the deltas it reads. The emulated replay runs that stream's work as late as the events
    allow, and the results are bit for bit those of plain launches on one stream."""
    lines, rows, cols, bands, ncls = spec
    arch = Architecture.from_lines(lines, rows, cols, bands, ncls)
    rng = np.random.default_rng(6)
    x = rng.random((300, bands, rows, cols)) * 2 - 1
    c = rng.integers(0, ncls, 300)
    ws = [rng.normal(0, 0.4, arch.n_weights) for _ in range(3)]
    _, plain, _ = _gradients_beside(arch, False, x, c, ws)
    be, graphed, streams = _gradients_beside(arch, True, x, c, ws)
    for a, b in zip(plain, graphed):
        assert a[0] == b[0] and np.array_equal(a[1], b[1])
    side = be.gradient_stream.stream
    beside = [name for name, st in streams if st is side]
    assert beside and all(name.startswith(GRADIENT_LAUNCHES) for name in beside)
    on_main = [name for name, st in streams if st is fake_runtime.stream]
    assert not any(name.startswith("gemm_nn") or "pool" in name for name in beside)
    assert on_main[-2:] == ["grad_finish", "ll_sum"]
    assert be.gradient_stream.done in fake_runtime.stream.waits


def test_a_gradient_never_waited_for_is_refused(fake_runtime, monkeypatch):
    """The emulation holds the gradient stream's work until the main stream waits for it: with
    no wait the replay refuses (as a real capture would)."""
    from convnet.device.beside import GradientStream
    monkeypatch.setattr(GradientStream, "join", lambda self, rt: None)
    lines, rows, cols, bands, ncls = SPLIT_ARCH
    arch = Architecture.from_lines(lines, rows, cols, bands, ncls)
    rng = np.random.default_rng(6)
    x = rng.random((300, bands, rows, cols)) * 2 - 1
    ws = [rng.normal(0, 0.4, arch.n_weights) for _ in range(3)]
    with pytest.raises(AssertionError, match="never waited for"):
        _gradients_beside(arch, True, x, rng.integers(0, ncls, 300), ws)


@pytest.mark.slow
def test_emulated_dense_products(fake_runtime, monkeypatch):
    """The fully connected layers' activations and deltas take gemm_nn's dense variants where
    they are timed, and the output layer's activation the narrow ones (launches.dense_allowed;
    the emulation checks the tables' form, one group and the alignment): the float64 model's
    results, with and without batches of 256 cases, and never such a variant for rows that are
    not dense."""
    lines = ["CONVOLUTIONAL LAYER 8 1 1 1 1 1 1", "FULLY CONNECTED LAYER 72", "FULLY CONNECTED LAYER 68"]
    arch, x, c, w, crit_ref, grad_ref, p_ref = _problem(lines, 6, 6, 1, 3, n=300, seed=6)
    plan = ModelPlan(arch)
    fc = [lp for lp in plan.layers if lp.kind.whole_prior]
    assert len(fc) == 3 and all(lp.fwd.dense is not None for lp in fc)
    assert all(lp.bwd.dense is not None for lp in fc) and plan.layers[0].fwd.dense is None
    gather = tuning.nn_candidates
    for tile, narrow in zip(tuning.NN_DENSE, tuning.NN_NARROW * len(tuning.NN_DENSE)):
        monkeypatch.setattr(tuning, "nn_candidates", lambda M, N, conv=(), dense=False, direct=False, t=tile,
                            nt=narrow: [t if N > 16 else nt] if dense else gather(M, N, conv)[:1])
        for params in (DeviceParams(), DeviceParams(max_batch=256)):
            fake_runtime.launches.clear()
            ev = dbe.DeviceBackend(arch, params, FLOAT32).evaluator(x, c, 0.01)
            crit, grad = ev.gradient(w)
            assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5
            assert abs(ev.criterion(w) - crit_ref) <= 1e-6 * crit_ref
            assert np.abs(ev.outputs(w) - p_ref).max() < 1e-6
            # FC 72 and FC 68 forward (72 and 68 columns), the deltas into the 288 neurons of
            # the convolutional layer and into FC 72; the output layer's 3 columns are too few
            dense = [nm for nm in fake_runtime.launches if nm == f"gemm_nn_{tile}"]
            assert len(dense) >= 4, fake_runtime.launches
            # and the output layer's 3 columns, the narrow variant
            assert f"gemm_nn_{narrow}" in fake_runtime.launches
    # rows that do not start on 16-byte boundaries keep the gather tiles
    lp = fc[0]
    assert launches.dense_allowed(lp.fwd, src=1 << 20, lda=288, B=1 << 20, b_ld=96)
    assert not launches.dense_allowed(lp.fwd, src=1 << 20, lda=290, B=1 << 20, b_ld=96)
    assert not launches.dense_allowed(lp.fwd, src=(1 << 20) + 4, lda=288, B=1 << 20, b_ld=96)
    assert not launches.dense_allowed(lp.bwd, src=1 << 20, lda=72, B=(1 << 20) + 8, b_ld=0)
    assert not launches.dense_allowed(plan.layers[0].fwd, src=1 << 20, lda=36, B=1 << 20, b_ld=32)
    special = set(tuning.NN_DENSE) | set(tuning.NN_NARROW)
    assert gather(1000, 72, (), True)[-len(tuning.NN_DENSE):] == tuning.NN_DENSE
    assert gather(1000, 10, (), True)[:len(tuning.NN_NARROW)] == tuning.NN_NARROW
    assert not set(gather(1000, 64, (), True)) & special
    assert not set(gather(1000, 72)) & special and not set(gather(1000, 10)) & special
    assert tuning.nn_rows("narrow_w8", 10) == 24 and tuning.nn_rows("narrow_w4", 16) == 8


# convolutional layers for the tiled kernels: LeNet's second layer, padding, strides, prior
# depths that are not a multiple of 4, depths that are not a multiple of the thread tile
TILED_ARCHS = [
    (["CONVOLUTIONAL LAYER 20 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
      "CONVOLUTIONAL LAYER 50 2 2 0 0 1 1", "FULLY CONNECTED LAYER 7"], 20, 20, 1, 4),
    (["CONVOLUTIONAL LAYER 6 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 41 2 1 1 0 2 1"], 11, 9, 3, 3),
    (["CONVOLUTIONAL LAYER 37 1 2 1 1 1 1", "POOLED MAX LAYER 2 2 2 2",
      "CONVOLUTIONAL LAYER 9 0 1 0 1 1 2"], 12, 11, 2, 5),
    # the delta into a tanh layer (times 1 - a^2), through padding, 37 slices (padded to 40)
    (["CONVOLUTIONAL LAYER 8 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 37 2 1 2 1 1 1",
      "FULLY CONNECTED LAYER 5"], 9, 7, 2, 3),
    # conv_grad through padding with strides 2 x 3 (which window columns serve which taps), 30
    # columns (15 threads of 2, 8 of 4 with 2 padded), 3 filter rows (every row in one block)
    (["CONVOLUTIONAL LAYER 16 1 1 0 0 1 1", "CONVOLUTIONAL LAYER 30 1 2 1 1 2 3"], 13, 16, 1, 3),
    # conv_grad with one stage: a case and its deltas take 87.5 KB, so two stages would not fit
    (["CONVOLUTIONAL LAYER 24 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 48 2 2 2 2 1 1",
      "FULLY CONNECTED LAYER 3"], 16, 16, 3, 3),
    # a small layer after the first with max pooling after it (the pooling epilogue of its site)
    (["CONVOLUTIONAL LAYER 6 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 12 1 1 1 1 1 1",
      "POOLED MAX LAYER 2 2 2 2", "FULLY CONNECTED LAYER 5"], 8, 8, 2, 3),
    # the delta into prior rows of over 16 columns (21: 4 x 21 accumulators a thread)
    (["CONVOLUTIONAL LAYER 12 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 8 1 1 1 1 1 1",
      "FULLY CONNECTED LAYER 3"], 5, 21, 1, 3),
    # conv_grad_warp beside conv_grad's other variants (24 slices on 8: 18 lanes of a window of
    # 3 x 3), its bands of 4 rows on 7 (the last one of 3)
    (["CONVOLUTIONAL LAYER 8 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 24 1 1 1 1 1 1",
      "FULLY CONNECTED LAYER 3"], 7, 9, 1, 3),
    # 16 slices on 16 (36 groups of 4 prior slices: no warp variant), whose gradient conv_grad's
    # other variants take with 64 partial sums a chunk
    (["CONVOLUTIONAL LAYER 16 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 16 1 1 1 1 1 1",
      "FULLY CONNECTED LAYER 3"], 6, 9, 1, 3),
    # conv_grad_warp alone, strides 2, padding above only, 10 slices (deltas copied 4 bytes at a
    # time into rows of 12)
    (["CONVOLUTIONAL LAYER 12 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 10 1 1 1 0 2 2",
      "FULLY CONNECTED LAYER 3"], 9, 8, 2, 3),
]


def _problem(lines, rows, cols, bands, ncls, n, seed, spread=0.3):
    """An architecture, n random cases in -1..1, weights (normal, this spread), and the float64
    model's criterion, gradient and probabilities (WPEN 0.01)."""
    arch = Architecture.from_lines(lines, rows, cols, bands, ncls)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, bands, rows, cols))
    c = rng.integers(0, ncls, n)
    w = rng.normal(0, spread, arch.n_weights)
    crit_ref, grad_ref, p_ref, _ = simulate(ModelPlan(arch), w, x, c, 0.01)
    return arch, x, c, w, crit_ref, grad_ref, p_ref


@pytest.mark.slow
@pytest.mark.parametrize("spec", TILED_ARCHS, ids=range(len(TILED_ARCHS)))
def test_emulated_tiled_convolution(fake_runtime, monkeypatch, spec):
    """Every tiled variant of every convolutional layer, forced as the only candidate, gives the
    float64 model's results; the modules of the layer's shape are built with the backend, before
    its first evaluation (the kernel plan names them)."""
    from convnet.device import conv_tiled
    arch, x, c, w, crit_ref, grad_ref, p_ref = _problem(*spec, n=70, seed=4)
    be = dbe.DeviceBackend(arch, options=FLOAT32)
    assert be.conv_tiled
    # a conv_small first layer's activation has the direct kernel and the gather tiles only; a
    # later one's has tiled variants too, and the direct kernel is forced as they are
    assert not (0 in be.conv_small and 0 in be.conv_tiled and be.conv_tiled[0].fwd)
    later = [i for i in be.conv_small if i > 0]
    assert all(be.conv_tiled[i].fwd for i in later)
    variants = sorted({t for ct in be.conv_tiled.values() for t in [*ct.fwd, *ct.bwd, *ct.grad]})
    variants += [tuning.DIRECT] if later else []
    assert {ct.function(t, k) for ct in be.conv_tiled.values() for k in ("fwd", "bwd", "grad")
            for t in getattr(ct, k)} <= set(fake_runtime.specialized)
    gather_first = tuning.nn_candidates
    for tile in variants:
        monkeypatch.setattr(tuning, "nn_candidates",
                            lambda M, N, conv=(), dense=False, direct=False, t=tile:
                            [t] if t in conv or direct and t == tuning.DIRECT else gather_first(M, N)[:1])
        monkeypatch.setattr(tuning, "grad_candidates",
                            lambda grad, t=tile: [t] if t in grad else list(grad)[:1])
        fake_runtime.launches.clear()
        ev = dbe.DeviceBackend(arch, options=FLOAT32).evaluator(x, c, 0.01)
        crit, grad = ev.gradient(w)
        assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5
        assert abs(ev.criterion(w) - crit_ref) <= 1e-6 * crit_ref
        assert np.abs(ev.outputs(w) - p_ref).max() < 1e-6
        if tile == tuning.DIRECT:
            assert any(name.startswith("conv_small_") for name in fake_runtime.launches)
        kinds = [k for k in ("fwd", "bwd", "grad") if any(tile in getattr(ct, k) for ct in be.conv_tiled.values())]
        for k in kinds:
            assert any(name.startswith(f"conv_{k}_") for name in fake_runtime.launches), tile
    for ct in be.conv_tiled.values():
        optin = fake_runtime.shared_optin
        for v in ct.fwd.values():
            assert v.fits(ct.shape, optin) and v in conv_tiled.forward_variants(ct.shape, optin)
        for v in ct.bwd.values():
            assert v.fits(ct.shape, optin) and v in conv_tiled.delta_variants(ct.shape, True, optin)
        assert list(ct.grad.values()) == conv_tiled.grad_variants(ct.shape, optin)
    # kernels above 48 KB of shared memory opted in before their launch (FakeRuntime.launch)
    large = {ct.function(t, k) for ct in be.conv_tiled.values()
             for k in ("fwd", "fwd_pool", "bwd", "grad")
             for t, v in ct.variants(k).items() if v.smem(ct.shape) > 48 * 1024}
    small = TILED_ARCHS[2:5:2] + TILED_ARCHS[7:]         # nets with no variant over 48 KB
    assert set(fake_runtime.shared_allowed) == large and (large or spec in small)
    assert any(ct.bwd for ct in be.conv_tiled.values()) == (
        spec in (TILED_ARCHS[0], TILED_ARCHS[3], TILED_ARCHS[5], TILED_ARCHS[7], TILED_ARCHS[8],
                 TILED_ARCHS[9]))
    stages = {v.stages for ct in be.conv_tiled.values() for v in ct.grad.values()}
    assert stages == ({1} if spec is TILED_ARCHS[5] else {2} if stages else set())


def test_conv_grad_takes_one_stage_only_where_two_do_not_fit():
    """A layer whose case and deltas fit twice in the shared memory a block may take keeps its
    two-stage variants (LeNet's second layer); one whose two stages would not fit gets the same
    variants with one stage (the suite's CIFAR-sized net's second CONV layer), the same sums."""
    from convnet.device import conv_tiled
    optin = 227 * 1024
    lenet = conv_tiled.ConvShape(12, 12, 20, 8, 8, 50, 5, 5, 0, 0, 1, 1, 0)
    cifar = conv_tiled.ConvShape(16, 16, 24, 16, 16, 48, 5, 5, 2, 2, 1, 1, 0)
    two = conv_tiled.grad_variants(lenet, optin)
    assert [v.suffix for v in two] == ["n4_r", "n2_r", "n4_r5", "n4"]
    one = conv_tiled.grad_variants(cifar, optin)
    assert [v.suffix for v in one] == ["n4_r_s1", "n2_r_s1", "n4_r5_s1", "n4_s1"]
    for v in one:
        assert v.smem(cifar) <= conv_tiled.SMEM_SHARE < 2 * v.smem(cifar)
    assert conv_tiled.grad_variants(cifar, 48 * 1024) == []      # no opt-in: gemm_tn


def test_spread_twins_where_window_loads_conflict():
    """A forward variant whose warps' window loads meet bank conflicts (the CIFAR-sized net's
    16 x 16 x 48 layer on 24 slices: 4 positions a thread, lanes 4 positions apart, 16
    wavefronts a load) gets a spread twin (lanes a position apart, positions 28 floats apart:
    4 wavefronts, conflict-free); LeNet's second layer (4 wavefronts) gets none."""
    from convnet.device import conv_tiled
    optin = 227 * 1024
    cifar = conv_tiled.ConvShape(16, 16, 24, 16, 16, 48, 5, 5, 2, 2, 1, 1, 64)
    found = conv_tiled.forward_variants(cifar, optin)
    plain = [v for v in found if not v.spread]
    assert [v.suffix for v in found if v.spread] == [v.suffix + "_sp" for v in plain]
    for v in plain:
        twin = conv_tiled.ForwardVariant(v.cases, v.tm, v.tn, v.minb, v.tps, True)
        assert v.wavefronts(cifar) == 16 and twin.wavefronts(cifar) == 4
        assert twin.smem(cifar) > v.smem(cifar) and cifar.column_floats(True) == 28
    lenet = conv_tiled.ConvShape(12, 12, 20, 8, 8, 50, 5, 5, 0, 0, 1, 1, 64)
    found = conv_tiled.forward_variants(lenet, optin)
    assert found and not any(v.spread for v in found)
    assert all(v.wavefronts(lenet) == 4 for v in found)


def test_conv_grad_warp_serves_narrow_layers():
    """conv_grad_warp (a warp a partial sum) where a layer's window has fewer than 32 groups of 4
    prior slices and the layer at most 24 slices; such a layer's conv_grad variants then take 64
    partial sums a chunk of cases, others GRAD_SUBS; rows too long for the usual bands get one
    variant of a row a band."""
    from convnet.device import conv_tiled
    optin = 227 * 1024
    vgg = conv_tiled.ConvShape(28, 28, 12, 28, 28, 12, 3, 3, 1, 1, 1, 1, 32)
    found = conv_tiled.grad_variants(vgg, optin)
    assert [v.suffix for v in found] == ["w4_b2", "w2_b4", "w4_b4"]
    assert conv_tiled.grad_subs(vgg, found) == conv_tiled.WARP_GRAD_SUBS == 64
    lenet = conv_tiled.ConvShape(12, 12, 20, 8, 8, 50, 5, 5, 0, 0, 1, 1, 0)
    lenet_variants = conv_tiled.grad_variants(lenet, optin)
    assert conv_tiled.grad_subs(lenet, lenet_variants) == conv_tiled.GRAD_SUBS
    # a padded 5 x 5 window over 16 x 16 positions of 48 slices: conv_grad's own variants pay
    cifar = conv_tiled.ConvShape(16, 16, 24, 16, 16, 48, 5, 5, 2, 2, 1, 1, 64)
    assert conv_tiled.grad_pays(cifar, conv_tiled.grad_variants(cifar, optin))
    assert not conv_tiled.grad_pays(lenet, lenet_variants)
    long_rows = conv_tiled.ConvShape(100, 100, 12, 100, 100, 12, 3, 3, 1, 1, 1, 1, 32)
    assert [v.suffix for v in conv_tiled.grad_variants(long_rows, optin)] == ["w2_b1"]
    # 36 groups: no warp variant, but conv_grad's others pay there (16 slices at most)
    sixteen = conv_tiled.ConvShape(14, 14, 16, 14, 14, 16, 3, 3, 1, 1, 1, 1, 32)
    found = conv_tiled.grad_variants(sixteen, optin)
    assert found and not any(isinstance(v, conv_tiled.GradWarpVariant) for v in found)
    assert conv_tiled.grad_subs(sixteen, found) == 64
    wider = conv_tiled.ConvShape(14, 14, 16, 14, 14, 24, 3, 3, 1, 1, 1, 1, 32)   # 24 slices
    assert not conv_tiled.grad_pays(wider, conv_tiled.grad_variants(wider, optin))
    for shape in (conv_tiled.ConvShape(14, 14, 24, 14, 14, 24, 3, 3, 1, 1, 1, 1, 32),  # 54 groups
                  conv_tiled.ConvShape(14, 14, 12, 14, 14, 28, 3, 3, 1, 1, 1, 1, 32)):  # 28 slices
        assert not any(isinstance(v, conv_tiled.GradWarpVariant)
                       for v in conv_tiled.grad_variants(shape, optin))


# a tiled CONV layer followed by max pooling whose windows tile it: (lines, rows, cols, bands,
# classes, the pooling layers computed in the CONV layer's epilogue)
POOL_EPILOGUE_ARCHS = [
    # LeNet's pattern
    (["CONVOLUTIONAL LAYER 20 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
      "CONVOLUTIONAL LAYER 50 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2", "FULLY CONNECTED LAYER 7"],
     16, 16, 1, 4, {3}),
    # 3 x 1 windows after a padded layer of 36 slices, the output layer straight after them
    (["CONVOLUTIONAL LAYER 8 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 36 1 1 1 1 1 1",
      "POOLED MAX LAYER 3 1 3 1"], 9, 8, 2, 4, {2}),
]


@pytest.mark.slow
@pytest.mark.parametrize("spec", POOL_EPILOGUE_ARCHS, ids=range(len(POOL_EPILOGUE_ARCHS)))
def test_emulated_pooling_in_the_forward_epilogue(fake_runtime, monkeypatch, spec):
    """The max pooling after a tiled CONV layer, computed in its forward variants' epilogue
    (conv_fwd_pool) or after the gather product (pool_forward), whichever the tuner takes: the
    float64 model's results, and the same as with the pooling always on its own; the activations
    read back are still every layer's."""
    *shape, pooled = spec
    arch, x, c, w, crit_ref, grad_ref, p_ref = _problem(*shape, n=90, seed=8)
    on_its_own = DeviceOptions(pool_epilogue=False, tensor_cores=False)
    assert dbe.DeviceBackend(arch, options=FLOAT32).conv_pool == pooled
    assert not dbe.DeviceBackend(arch, options=on_its_own).conv_pool
    assert not dbe.DeviceBackend(arch, options=DeviceOptions(pool_tiles=False,
                                                             tensor_cores=False)).conv_pool
    plain = dbe.DeviceBackend(arch, options=on_its_own).evaluator(x, c, 0.01)
    want = plain.gradient(w), plain.criterion(w), plain.outputs(w)
    acts = dbe.DeviceBackend(arch, options=on_its_own).activations(w, x[:40])
    gather_first = tuning.nn_candidates
    # (every variant's epilogue is the same code; the GPU test forces each of them)
    tiled = dbe.DeviceBackend(arch, options=FLOAT32).conv_tiled
    tiles = sorted({t for i in pooled for t in tiled[i - 1].fwd})[:2]
    for tile in [None] + tiles:
        monkeypatch.setattr(tuning, "nn_candidates",
                            lambda M, N, conv=(), dense=False, direct=False, t=tile: [t] if t in conv else gather_first(M, N)[:1])
        for params in (DeviceParams(), DeviceParams(max_batch=40)) if tile == tiles[0] else (DeviceParams(),):
            fake_runtime.launches.clear()
            be = dbe.DeviceBackend(arch, params, FLOAT32)
            ev = be.evaluator(x, c, 0.01)
            crit, grad = ev.gradient(w)
            assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5
            if not params:      # (batches of 40 cases add the gradient's partial sums otherwise)
                assert crit == want[0][0] and np.array_equal(grad, want[0][1])
            assert ev.criterion(w) == want[1] and np.array_equal(ev.outputs(w), want[2])
            assert np.abs(want[2] - p_ref).max() < 1e-6
            fused = [nm for nm in fake_runtime.launches if nm.startswith("conv_fwd_pool_")]
            assert bool(fused) == (tile is not None)
            assert _pooled(fake_runtime.launches, "pool_forward") == (tile is None)
            for a, b in zip(be.activations(w, x[:40]), acts):
                assert np.array_equal(a, b)


def test_tiled_variants_follow_the_limits():
    from convnet.device.conv_tiled import (ConvShape, DeltaVariant, ForwardVariant, delta_variants,
                                           forward_variants)
    lenet = ConvShape(12, 12, 20, 8, 8, 50, 5, 5, 0, 0, 1, 1, 64)
    got = forward_variants(lenet)
    assert [(v.cases, v.tm, v.tn) for v in got][:2] == [(3, 8, 8), (2, 8, 8)]
    assert ForwardVariant(2, 8, 8, 1).threads(lenet) == 112
    assert ForwardVariant(2, 8, 8, 1).smem(lenet) == 34560          # ptxas reports the same
    assert ForwardVariant(3, 8, 8, 1).smem(lenet) == 47360
    assert not ForwardVariant(4, 8, 8, 1).fits(lenet)
    huge = ConvShape(60, 60, 64, 56, 56, 64, 5, 5, 0, 0, 1, 1, 64)     # a case is 900 KB
    assert forward_variants(huge) == [] and delta_variants(huge, True) == []
    assert [v.cases for v in delta_variants(lenet, True)] == [3, 2]
    assert DeltaVariant(3).threads(lenet) == 180 and DeltaVariant(3).smem(lenet) == 48784
    assert DeltaVariant(2).smem(lenet) == 35264                         # ptxas reports the same
    assert delta_variants(lenet, False) == []                           # no delta into the image
    strided = ConvShape(12, 12, 20, 4, 4, 50, 5, 5, 0, 0, 2, 2, 64)
    assert delta_variants(strided, True) == [] and forward_variants(strided)
    # with Hopper's opt-in to 227 KB: each forward variant again with a filter row of taps per
    # stage, and delta variants whose prior rows take whole warps (6 cases x 5 slice groups
    # in 32 threads) or half warps (3 x 5 in 16), capped at two blocks per multiprocessor
    optin = 227 * 1024
    wide = forward_variants(lenet, optin)
    staged = [v for v in wide if v.tps == 5]
    # and the 8 x 8 tile with 4 cases, whose 224 threads are 7 whole warps (4 x 3200 floats of
    # outputs staged, two stages of a tap's weights), opted in to 59 KB
    whole = [v for v in wide if v.tps == 1 and v not in got]
    assert [(v.cases, v.tm, v.tn, v.minb) for v in whole] == [(4, 8, 8, 2), (4, 4, 13, 2)]
    assert whole[0].threads(lenet) == 224 and whole[0].smem(lenet) == 4 * (4 * 3200 + 2 * 20 * 56)
    # the tiles of whole warps a scheduler: 4 threads across the 50 slices, 13 each, 4 positions
    # (128 threads a block for 2 cases, within 48 KB; 256 for 4, opted in), 128 registers
    assert [(v.cases, v.tm, v.tn, v.minb) for v in got if v.tn == 13] == [(2, 4, 13, 4)]
    assert ForwardVariant(2, 4, 13, 4).threads(lenet) == 128 and whole[1].threads(lenet) == 256
    assert whole[1].smem(lenet) == 4 * (4 * 3200 + 2 * 20 * 52)
    assert all(v.threads(s) % 128 == 0 for s in (lenet,) for v in wide if v.tn == 13)
    assert [(v.cases, v.tm, v.tn) for v in staged] == [(v.cases, v.tm, v.tn) for v in wide if v.tps == 1]
    assert sorted(wide[:len(wide) // 2], key=str) == sorted(got + whole, key=str)
    assert ForwardVariant(2, 8, 4, 1, 5).smem(lenet) == 33920 + 4 * 2 * 4 * 20 * 52
    assert [(v.cases, v.pad, v.tps, v.ahead) for v in delta_variants(lenet, True, optin)] == [
        (3, False, 1, False), (2, False, 1, False), (6, True, 1, False), (3, True, 1, False),
        (3, True, 5, False), (6, True, 1, True)]
    # the one variant of one block a multiprocessor (its registers), a tap a stage, again taking
    # group after group of 6 cases with two copies of them: a block a multiprocessor
    ahead = DeltaVariant(6, True, ahead=True)
    assert DeltaVariant(6, True).minb(lenet) == 1 and ahead.minb(lenet) == 1
    assert ahead.smem(lenet) == 4 * (2 * 6 * 3364 + 2 * 52 * 20) > 114 * 1024
    assert ahead.blocks(10000, 132) == 132 and ahead.blocks(500, 132) == 84
    assert DeltaVariant(6, True).blocks(10000, 132) == 1667
    assert not any(v.ahead for v in delta_variants(lenet, True))     # no opt-in, no room
    assert DeltaVariant(6, True).threads(lenet) == 12 * 32 and DeltaVariant(3, True).threads(lenet) == 12 * 16
    assert DeltaVariant(6, True, 5).smem(lenet) > 114 * 1024         # one block per multiprocessor
    assert [DeltaVariant(c).minb(lenet) for c in (2, 3)] == [5, 2]
    deep = ConvShape(8, 8, 160, 8, 8, 16, 3, 3, 1, 1, 1, 1, 32)      # 40 slice groups: 64 threads a row
    assert DeltaVariant(1, True).threads(deep) == 64 * 8
    # rows wider than 16 columns: each variant again with its columns in 4 runs of their own
    # threads (7 columns of 28, 6 of 21 with the last run 3); a case's copy over 48 KB (28 x 28
    # x 16: 52,752 bytes) gives variants only where the device lets a block opt in
    wide12 = ConvShape(28, 28, 12, 28, 28, 12, 3, 3, 1, 1, 1, 1, 112)
    assert [v.suffix for v in delta_variants(wide12, True)] == ["c1", "c1_p4"]
    quarter = DeltaVariant(1, parts=4)
    assert quarter.threads(wide12) == 4 * 3 * 28 and quarter.columns(wide12) == 7
    assert quarter.minb(wide12) == 1 and DeltaVariant(1).minb(wide12) == 3
    assert quarter.columns(ConvShape(5, 21, 12, 5, 21, 8, 3, 3, 1, 1, 1, 1, 112)) == 6
    wide16 = ConvShape(28, 28, 16, 28, 28, 16, 3, 3, 1, 1, 1, 1, 160)
    assert delta_variants(wide16, True) == [] and DeltaVariant(1).smem(wide16) == 52752
    assert [v.suffix for v in delta_variants(wide16, True, optin)] == ["c2", "c1", "c1_p4", "c2_a"]


def test_whole_column_gradient_shapes():
    """The whole-column gemm_tn blocks: LeNet's first layer (26 weight rows x 20 slices) in one
    block of 130 threads, its second (501 x 50) in 27 blocks of 19 rows x 52 columns; no block
    where the loaders would miss rows or the shared stages do not fit."""
    shape = tuning.tn_cols_shape
    assert shape("cols_1x4_c32_s3", 26, 20) == (130, 1, 1, 4 * 3 * 32 * (28 + 20))
    assert shape("cols_1x4_c32_s3", 501, 50) == (247, 27, 1, 4 * 3 * 32 * (20 + 52))
    assert shape("cols_1x4_c32_s3", 3201, 500) == (256, 201, 8, 4 * 3 * 32 * (16 + 64))
    assert shape("cols_1x4_c32_s3", 10, 3) is None                     # too few threads to load
    for R, N, timed in [(26, 20, True), (501, 50, False), (5, 1, False), (3201, 500, False),
                        (61, 7, True), (300, 10, False), (200, 8, True)]:
        assert (set(tuning.tn_candidates(R, N)) & set(tuning.TN_COLS) != set()) == timed
        assert not timed or shape("cols_1x4_c32_s3", R, N)[1] <= 2


COLS_ARCHS = [
    (["CONVOLUTIONAL LAYER 20 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
      "CONVOLUTIONAL LAYER 50 2 2 0 0 1 1", "FULLY CONNECTED LAYER 30"], 20, 20, 1, 10),
    (["CONVOLUTIONAL LAYER 37 1 2 1 1 1 1", "LOCAL LAYER 22 1 1 1 0 1 1",
      "FULLY CONNECTED LAYER 70"], 12, 11, 2, 5),
]


@pytest.mark.slow
@pytest.mark.parametrize("spec", COLS_ARCHS, ids=range(len(COLS_ARCHS)))
def test_emulated_whole_column_gradients(fake_runtime, monkeypatch, spec):
    """Each whole-column gemm_tn variant, forced wherever it fits, gives the float64 model's
    gradient (the launches' grids, blocks and shared sizes checked by the emulation)."""
    arch, x, c, w, crit_ref, grad_ref, _ = _problem(*spec, n=300, seed=8)
    first = tuning.tn_candidates
    for tile in tuning.TN_COLS:
        monkeypatch.setattr(tuning, "tn_candidates",
                            lambda R, N, t=tile: [t] if t in first(R, N) else first(R, N)[:1])
        fake_runtime.launches.clear()
        crit, grad = dbe.DeviceBackend(arch, options=FLOAT32).evaluator(x, c, 0.01).gradient(w)
        assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5
        assert f"gemm_tn_{tile}" in fake_runtime.launches


def test_emulated_split_tf32_products(fake_runtime, monkeypatch):  # noqa: F811
    """Each tensor-core variant (split TF32) of the gather products and the weight gradients,
    forced at every site of a net with CONV, LOCAL and FC layers, launches with a grid that
    covers its outputs and gives the float64 model's gradient; no float32 product runs."""
    arch, x, c, w, crit_ref, grad_ref, _ = _problem(*COLS_ARCHS[1], n=90, seed=9)
    split = DeviceOptions(tensor_cores=True)
    nns, tns = list(tuning.NN_SPLIT), list(tuning.TN_SPLIT)
    first = tuning.nn_split_candidates
    gather = [t for t in nns if t not in tuning.NN_SPLIT_DENSE]
    for i in range(max(len(nns), len(tns))):
        nn, tn = nns[i % len(nns)], tns[i % len(tns)]
        # (a variant for dense rows where the launch allows it: the FC layer's products)
        monkeypatch.setattr(tuning, "nn_split_candidates", lambda M, N, dense=False, t=nn, **_:
                            [t] if dense or t not in tuning.NN_SPLIT_DENSE else first(M, N)[:1])
        monkeypatch.setattr(tuning, "tn_split_candidates", lambda R, N, t=tn: [t])
        fake_runtime.launches.clear()
        crit, grad = dbe.DeviceBackend(arch, options=split).evaluator(x, c, 0.01).gradient(w)
        assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5
        products = {name for name in fake_runtime.launches if name.startswith("gemm_")}
        assert f"gemm_nn_{nn}" in products and f"gemm_tn_{tn}" in products, products
        others = products - {f"gemm_nn_{nn}", f"gemm_tn_{tn}"}
        assert others <= {f"gemm_nn_{t}" for t in gather}, products


def test_emulated_tf32_products(fake_runtime):  # noqa: F811
    """CUDA PRECISION = TF32: the tensor-core sites launch the one-product variants only, whose
    reference rounds both operands to TF32, so the gradient moves off the float64 model by
    about TF32's rounding (far more than float32's, under 2 %), the criterion far less."""
    arch, x, c, w, crit_ref, grad_ref, _ = _problem(*COLS_ARCHS[1], n=90, seed=9)
    every = DeviceOptions(tensor_cores=True)
    fake_runtime.launches.clear()
    be = dbe.DeviceBackend(arch, DeviceParams(precision="TF32"), every)
    assert be.kernels.tf32
    crit, grad = be.evaluator(x, c, 0.01).gradient(w)
    products = {name for name in fake_runtime.launches if name.startswith("gemm_")}
    assert products and all(name.startswith(("gemm_nn_tf", "gemm_tn_tf")) for name in products)
    assert 1e-5 < _rel(grad, grad_ref) < 2e-2
    assert abs(crit - crit_ref) < 1e-3 * crit_ref
    # the same net at FLOAT32: split TF32 at the same sites, float32 accuracy
    fake_runtime.launches.clear()
    _, grad_split = dbe.DeviceBackend(arch, options=every).evaluator(x, c, 0.01).gradient(w)
    assert not any(name.startswith(("gemm_nn_tf", "gemm_tn_tf")) for name in fake_runtime.launches)
    assert _rel(grad_split, grad_ref) <= 1e-5


POOL_ARCHS = [
    # LeNet's pattern: both max-pooling layers tile a tanh layer
    (["CONVOLUTIONAL LAYER 6 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
      "CONVOLUTIONAL LAYER 5 1 1 0 0 1 1", "POOLED MAX LAYER 2 2 2 2", "FULLY CONNECTED LAYER 4"],
     16, 16, 1, 3, {1, 3}),
    # pooling after pooling (no tanh before the second), 3 x 1 windows, and overlapping windows
    (["CONVOLUTIONAL LAYER 3 1 1 1 1 1 1", "POOLED MAX LAYER 3 1 3 1", "POOLED MAX LAYER 1 2 1 2",
      "POOLED MAX LAYER 2 2 1 1"], 9, 8, 2, 4, {1, 2}),
    # depths of 8 and 12: four slices a thread (pool.cu's vec), average pooling, tiling and
    # overlapping max windows
    (["CONVOLUTIONAL LAYER 8 1 1 1 1 1 1", "POOLED AVERAGE LAYER 2 2 2 2",
      "CONVOLUTIONAL LAYER 12 1 1 1 1 1 1", "POOLED MAX LAYER 2 2 2 2", "POOLED MAX LAYER 2 2 1 1"],
     12, 12, 1, 3, {3}),
]


@pytest.mark.slow
@pytest.mark.parametrize("spec", POOL_ARCHS, ids=range(len(POOL_ARCHS)))
def test_emulated_pool_backward_tiles(fake_runtime, spec):
    """Max pooling whose windows tile its prior layer backpropagates with pool_backward_tiles: the
    same gradient as pool_backward, whatever MAX BATCH; other pooling keeps pool_backward."""
    lines, rows, cols, bands, ncls, want = spec
    arch = Architecture.from_lines(lines, rows, cols, bands, ncls)
    rng = np.random.default_rng(rows)
    n = 300
    x, c = rng.uniform(-1, 1, (n, bands, rows, cols)), rng.integers(0, ncls, n)
    w = rng.normal(0, 0.5, arch.n_weights)
    crit_ref, grad_ref, _, _ = simulate(ModelPlan(arch), w, x, c, 0.01)
    pooling = {i for i, L in enumerate(arch.layers) if not L.kind.has_weights}
    grads = []
    for tiles in (True, False):
        for params in (DeviceParams(), DeviceParams(max_batch=256)):
            fake_runtime.launches.clear()
            be = dbe.DeviceBackend(arch, params, DeviceOptions(pool_tiles=tiles, pooled_grad=False))
            assert be.pool_tiles == (want if tiles else set())
            crit, grad = be.evaluator(x, c, 0.01).gradient(w)
            assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5
            assert _pooled(fake_runtime.launches, "pool_backward_tiles") == tiles
            assert _pooled(fake_runtime.launches, "pool_backward") == (not tiles or want != pooling)
            grads.append(grad)
    for g in grads[1:]:
        assert np.array_equal(g, grads[0])



LINE_ARCH = (["CONVOLUTIONAL LAYER 5 1 1 1 0 1 1", "POOLED MAX LAYER 2 2 2 2",
              "FULLY CONNECTED LAYER 7"], 10, 8, 2, 3)


def _line_problem(wpen, n=300):
    lines, rows, cols, bands, ncls = LINE_ARCH
    arch = Architecture.from_lines(lines, rows, cols, bands, ncls)
    rng = np.random.default_rng(23)
    x = rng.uniform(-1, 1, (n, bands, rows, cols))
    c = rng.integers(0, ncls, n)
    w = rng.normal(0, 0.4, arch.n_weights)
    d = rng.normal(0, 0.05, arch.n_weights)
    return dbe.DeviceBackend(arch).evaluator(x, c, wpen), w, d


@pytest.mark.slow
@pytest.mark.parametrize("wpen", [0.0, 0.3])
def test_emulated_line_points_are_the_host_points(fake_runtime, wpen):
    """A trial point formed on the device gives the gradient of the same weights sent from the
    host, bit for bit, and the criterion and slope up to the order of the penalty's and the slope's
    sums; the gradient comes back for the latest and for the lowest evaluation of a line."""
    ev, w, d = _line_problem(wpen)
    line = ev.line(w, d)
    results = [line.evaluate(t) for t in (0.5, 2.0, 0.0)]
    g_latest = line.gradient(results[2][2])
    lowest = min(range(3), key=lambda i: results[i][0])
    g_lowest = line.gradient(results[lowest][2]) if lowest != 2 else g_latest
    with pytest.raises(RuntimeError):
        line.gradient(next(r[2] for i, r in enumerate(results) if i not in (2, lowest)))
    for i, t in enumerate((0.5, 2.0, 0.0)):
        f_host, g_host = ev.gradient(w + t * d)
        f, s, _ = results[i]
        assert abs(f - f_host) <= 1e-14 * abs(f_host)
        assert abs(s - float(g_host @ d)) <= 1e-12 * np.linalg.norm(g_host) * np.linalg.norm(d)
        if i == 2:
            assert np.array_equal(g_latest, g_host)
        if i == lowest:
            assert np.array_equal(g_lowest, g_host)
    # the host gradient overwrote the device's latest one (the lowest keeps its own copy), and a
    # later line takes the buffers
    if lowest != 2:
        with pytest.raises(RuntimeError):
            line.gradient(results[2][2])
    else:
        assert np.array_equal(line.gradient(results[2][2]), g_latest)
    ev.line(w, d)
    with pytest.raises(RuntimeError):
        line.evaluate(1.0)


@pytest.mark.slow
def test_emulated_line_search_follows_the_host_search(fake_runtime):
    """conjugate_gradients with the device's trial points against the host's: the same gradients
    at the same points, so the same path up to the last bits of the sums done in another order."""
    from convnet.train.conjgrad import conjugate_gradients
    ev, w, _ = _line_problem(0.01)
    host = conjugate_gradients(ev.criterion, ev.gradient, w, max_iters=6, tol=0.0)
    device = conjugate_gradients(ev.criterion, ev.gradient, w, max_iters=6, tol=0.0, line=ev.line)
    assert device.iterations == host.iterations == 6
    assert device.n_grad == host.n_grad
    assert abs(device.criterion - host.criterion) <= 1e-9 * host.criterion
    assert _rel(device.weights, host.weights) <= 1e-7
    assert ev.backend.timer.line_points >= device.n_grad - 1
    # the refinement's vectors kept on the device as well (DeviceVectors: no numpy arithmetic on
    # them could run here), and the weights handed to on_iter are host arrays
    seen = []
    resident = conjugate_gradients(ev.criterion, ev.gradient, w, max_iters=6, tol=0.0,
                                   line=ev.line, vectors=ev.vectors,
                                   on_iter=lambda it, f, step, x: seen.append(np.array(x)))
    assert resident.iterations == 6 and resident.n_grad == host.n_grad
    assert abs(resident.criterion - host.criterion) <= 1e-9 * host.criterion
    assert isinstance(resident.weights, np.ndarray) and _rel(resident.weights, host.weights) <= 1e-7
    assert len(seen) == 6 and np.array_equal(seen[-1], resident.weights)
    # the host's weights are sent again after the device formed its own
    before = ev.backend.weight_uploads
    f, _ = ev.gradient(device.weights)
    assert ev.backend.weight_uploads == before + 1
    assert abs(f - device.criterion) <= 1e-12 * f


def test_emulated_device_vectors_are_the_host_passes(fake_runtime):
    """DeviceVectors' element operations give the host passes' values bit for bit; their sums
    agree to rounding (blocks of 4096, then the blocks in order)."""
    from convnet import vectors as hv
    ev, w, d = _line_problem(0.0)
    V = ev.vectors
    rng = np.random.default_rng(4)
    g = rng.normal(size=w.size)
    xv, dv, gv = V.array(w), V.array(d), V.array(g)
    V.step_into(xv, xv, 0.37, dv)
    want = w.copy()
    hv.step_into(want, w, 0.37, d)
    assert np.array_equal(V.host(xv), want)
    V.new_direction(dv, 0.6, gv)
    want_d = d.copy()
    hv.new_direction(want_d, 0.6, g)
    assert np.array_equal(V.host(dv), want_d)
    assert np.array_equal(V.host(V.neg(gv)), -g)
    assert np.array_equal(V.host(V.copy(gv)), g) and V.array(gv) is gv
    assert V.dot(gv, dv) == pytest.approx(float(g @ want_d), rel=1e-12)
    assert V.norm(gv) == pytest.approx(float(np.linalg.norm(g)), rel=1e-12)
    s0, s1 = V.dot_and_change(gv, dv)
    h0, h1 = hv.dot_and_change(g, want_d)
    assert s0 == pytest.approx(h0, rel=1e-12) and s1 == pytest.approx(h1, rel=1e-12)
    with pytest.raises(ValueError):
        V.array(np.zeros(3))


def test_emulated_device_vectors_reuse_memory_and_keep_host_arrays(fake_runtime):
    """A dropped DeviceVector's memory serves the next one (no allocation per iteration), and
    host() hands over two page-locked arrays in turn, each left as it is until the call after
    next."""
    ev, w, d = _line_problem(0.0)
    V = ev.vectors
    allocs = []
    alloc = ev.backend.alloc
    ev.backend.alloc = lambda nbytes: allocs.append(nbytes) or alloc(nbytes)
    xv, gv = V.array(w), V.array(d)
    assert len(allocs) == 2
    buf = int(gv.buf)
    del gv
    nv = V.neg(xv)
    assert len(allocs) == 2 and int(nv.buf) == buf
    assert np.array_equal(V.host(nv), -w)
    line = ev.line(xv, nv)              # the first line allocates the line search's buffers
    line.evaluate(0.1)
    g = line.gradient(1)
    n = len(allocs)
    del g
    line = ev.line(xv, nv)
    line.evaluate(0.2)
    g = line.gradient(1)                # an iteration's gradient: in the memory dropped above
    assert len(allocs) == n
    a = V.host(xv)
    b = V.host(g)
    assert a is not b and np.array_equal(a, w)
    assert V.host(nv) is a and np.array_equal(b, V.host(g)) and V.host(xv) is a


def _emulated_gpu_train(monkeypatch, tmp_path, maxiters):
    """A small TRAIN and TEST with CUDA = YES on the emulated device, run to the end; returns
    its output folder."""
    import json
    from convnet.session import run
    monkeypatch.setattr("convnet.devices.cuda_status", lambda: (True, "emulated device"))
    ctl = tmp_path / "gpu.ctl"
    ctl.write_text("MAKE IMAGE 8 8 1 3 120\nCONVOLUTIONAL LAYER 4 1 1 1 1 1 1\n"
                   "POOLED MAX LAYER 2 2 2 2\nFULLY CONNECTED LAYER 5\nANNEAL ITERS = 5\n"
                   f"MAXITERS = {maxiters}\nWPEN = 0.01\nCUDA = YES\nTRAIN\nTEST\n")
    out = tmp_path / "out"
    run([str(ctl)], out=str(out), seed=2)
    assert json.loads((out / "results.json").read_text())["status"] == "done"
    return out


@pytest.mark.slow
def test_emulated_gpu_training_keeps_the_device_arrays(fake_runtime, monkeypatch, tmp_path):
    """A TRAIN on one GPU lets the model hold the arrays DeviceVectors.host hands over, without
    a copy: each is left unchanged while the model holds it, and after the refinement the model
    is back on its own array, holding the best weights."""
    from convnet import model as model_module
    kept = []
    keep = model_module.Model.keep_weights

    def checked_keep(self, value):
        if kept:
            held, copy = kept[-1]
            assert self.weights is held and np.array_equal(held, copy)
        kept.append((value, np.array(value)))
        keep(self, value)

    finals = []
    setter = model_module.Model.weights.fset

    def checked_set(self, value):
        setter(self, value)
        assert self.weights is self._own_weights
        finals.append(self)

    monkeypatch.setattr(model_module.Model, "keep_weights", checked_keep)
    monkeypatch.setattr(model_module.Model, "weights",
                        property(model_module.Model.weights.fget, checked_set))
    _emulated_gpu_train(monkeypatch, tmp_path, maxiters=6)
    assert len(kept) >= 3 and len({id(v) for v, _ in kept}) == 2
    held, copy = kept[-1]
    assert np.array_equal(finals[-1].weights, copy) and finals[-1].weights is not held


@pytest.mark.slow
def test_emulated_gpu_training_runs_no_compiled_host_pass(fake_runtime, monkeypatch, tmp_path):
    """A TRAIN on one GPU keeps the refinement's vectors on the device and rounds and penalises
    the annealing's weights with numpy: none of convnet/vectors.py's compiled passes runs, so a GPU
    run never pays for starting the compiler."""
    from convnet import vectors
    from convnet.train import linesearch

    def refuse(*args, **kwargs):
        raise AssertionError("a compiled host pass ran")

    for name in ("step_into", "new_direction", "dot_and_change"):
        monkeypatch.setattr(vectors.HostVectors, name, staticmethod(refuse))
    monkeypatch.setattr(vectors, "selected_sum_of_squares", refuse)
    monkeypatch.setattr(linesearch, "step_into", refuse)
    out = _emulated_gpu_train(monkeypatch, tmp_path, maxiters=4)
    assert "Line search trial points formed on the device" in (out / "CUDA.LOG").read_text()
    with pytest.raises(AssertionError):             # the refusal itself works
        vectors.HostVectors().step_into(None, None, 0.0, None)


SUBSET_ARCH = (["CONVOLUTIONAL LAYER 6 1 1 1 1 1 1", "POOLED MAX LAYER 2 2 2 2",
                "CONVOLUTIONAL LAYER 36 1 1 1 1 1 1", "FULLY CONNECTED LAYER 7"], 8, 8, 2, 4)


@pytest.mark.parametrize("max_batch", [None, 256, 100])
def test_emulated_subset_is_a_fresh_evaluator_on_those_cases(fake_runtime, monkeypatch,
                                                             max_batch):
    """evaluator.subset(indices): the same criterion, gradient and outputs, bit for bit, as a
    fresh evaluator over those cases (the same batches, kernels and order of additions), with
    nothing uploaded again and nothing timed."""
    arch = Architecture.from_lines(*SUBSET_ARCH)
    rng = np.random.default_rng(12)
    n = 700
    x, c = rng.uniform(-1, 1, (n, 2, 8, 8)), rng.integers(0, 4, n)
    w = rng.normal(0, 0.4, arch.n_weights)
    params = DeviceParams(max_batch=max_batch)
    whole = dbe.DeviceBackend(arch, params).evaluator(x, c, 0.01)
    whole.gradient(w)
    # runs of consecutive cases, a case out of order, one repeated
    indices = np.concatenate([np.arange(5, 290), [600, 3, 4, 4], np.arange(400, 690)])
    uploads = []
    with monkeypatch.context() as patch:
        patch.setattr(fake_runtime, "upload", lambda array: uploads.append(array))
        patch.setattr(tuning.Tuner, "_time", lambda *args: pytest.fail("a subset timed"))
        part = whole.subset(indices)
        crit, grad = part.gradient(w)
        crit_only, outputs = part.criterion(w), part.outputs(w)
    assert uploads == [] and part.n_cases == indices.size
    fresh = dbe.DeviceBackend(arch, params).evaluator(x[indices], c[indices], 0.01)
    crit_f, grad_f = fresh.gradient(w)
    assert crit == crit_f and np.array_equal(grad, grad_f)
    assert crit_only == fresh.criterion(w) and np.array_equal(outputs, fresh.outputs(w))
    assert part.batches == fresh.batches
    # and the subset's results are the float64 model's on those cases
    crit_ref, grad_ref, _, _ = simulate(ModelPlan(arch), w, x[indices], c[indices], 0.01)
    assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5


def test_emulated_subset_takes_the_tuners_choices(fake_runtime):
    """A subset's launch sites take the tile its evaluator's tuner chose at the same site."""
    arch = Architecture.from_lines(*SUBSET_ARCH)
    rng = np.random.default_rng(3)
    x, c = rng.uniform(-1, 1, (300, 2, 8, 8)), rng.integers(0, 4, 300)
    w = rng.normal(0, 0.4, arch.n_weights)
    whole = dbe.DeviceBackend(arch).evaluator(x, c)
    whole.gradient(w)
    site = next(s for s in whole.tuner.choice if s[0] == "gradient" and s[1] == 4)
    candidates = whole.tuner.sites[site][0]
    whole.tuner.choice[site] = candidates[1]            # as if the second had been faster
    part = whole.subset(np.arange(100))
    fake_runtime.launches.clear()
    part.gradient(w)
    assert part.tuner.choice[site[:-1] + (100,)] == candidates[1]
    assert f"gemm_tn_{candidates[1]}" in fake_runtime.launches


def test_emulated_subset_refusals(fake_runtime):
    arch = Architecture.from_lines(*SUBSET_ARCH)
    x = np.zeros((10, 2, 8, 8))
    ev = dbe.DeviceBackend(arch).evaluator(x, np.zeros(10, int))
    for bad, message in (([], "at least one case"), ([10], "lie in 0..9"), ([-1], "lie in 0..9"),
                         ([0.5], "whole numbers"), ([[0, 1]], "at least one case")):
        with pytest.raises(ConvnetError, match=message):
            ev.subset(bad)
    outputs_only = dbe.DeviceBackend(arch).evaluator(x, None).subset([1, 2])
    assert outputs_only.classes is None and outputs_only.outputs(np.zeros(arch.n_weights)).shape == (2, 4)
