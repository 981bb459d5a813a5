"""The CUDA compute path: PyCUDA kernels (kernels/*.cu), float32 on the device.

    backend = DeviceBackend(arch, params={"MAX BATCH": ..., "MAX HID GRAD": ..., "MAX MEM GRAD": ...})
    ev = backend.evaluator(inputs, classes, wpen)   # the cases are uploaded once, here
    ev.criterion(w); ev.gradient(w) -> (criterion, TRUE gradient in host order); ev.outputs(w)
    backend.activations(w, inputs); backend.timings(); device_report()

The weights are copied to the device only when they differ from the last copy; the copy is
float64 in host order, and a kernel scatters it into the device's float32 layouts
(see layout.py). The gradient is summed in float64, in host order, on the device.

Parameters (control-file names):
    MAX BATCH     most cases per batch of launches. Not given (or None): as many as fit in a
                  quarter of the free device memory (all of them for every benchmark net).
                  The book's default of 100 only served to keep each launch under the Windows
                  display-driver time limit; a value given is honoured as it is.
    MAX HID GRAD  most neurons of one layer in one gradient launch (default 65535).
    MAX MEM GRAD  most megabytes of gradient partial-sum scratch (default 2047).
None of the three changes the result (plan.py says how), except that MAX BATCH below 256
cases rounds the float32 partial sums differently.

PyCUDA is imported only when a backend is made, so ``import convnet.device`` works without it.
"""

import contextlib
import os
import threading

import numpy as np

from ..architecture import CONV, FC, LOCAL, POOLAVG, POOLMAX
from ..errors import ConvnetError
from .layout import POOL_KINDS, activations_to_host, image_to_device
from .plan import CHUNK, ModelPlan, gradient_launch_slices, split_batches
from .timers import EventTimer

KERNEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")
KERNEL_FILES = ("gemm.cu", "conv_small.cu", "pool.cu", "output.cu", "weights.cu")
COMMON_HEADER = "common.cuh"

DEFAULT_MAX_HID_GRAD = 65535
DEFAULT_MAX_MEM_GRAD = 2047
# Share of the free device memory an automatic MAX BATCH may take.
AUTO_BATCH_MEMORY_SHARE = 0.25

EPI_NONE, EPI_TANH, EPI_DERIV = 0, 1, 2

KIND_NAMES = {FC: "fully connected", LOCAL: "locally connected", CONV: "convolutional",
              POOLAVG: "average pooling", POOLMAX: "max pooling"}

# Tile shapes of gemm.cu, "BMxBN_TMxTN": (BM, BN, threads). gemm_nn: BM cases x BN columns;
# gemm_tn: BM weight rows x BN columns. All shapes give the same bits; for every launch site
# the evaluator times its candidates once on the real data (see _Tuner) and keeps the fastest.
NN_TILES = {"128x64_8x4": (128, 64, 256), "128x64_8x8": (128, 64, 128),
            "256x32_8x4": (256, 32, 256), "256x32_8x8": (256, 32, 128),
            "128x32_4x4": (128, 32, 256), "128x32_8x4": (128, 32, 128),
            "64x16_4x2": (64, 16, 128), "128x16_8x2": (128, 16, 128),
            "128x64_8x4_k16": (128, 64, 256), "256x32_8x4_k16": (256, 32, 256),
            "128x32_8x4_k16": (128, 32, 128)}
TN_TILES = {"128x64_8x4": (128, 64, 256), "128x64_8x8": (128, 64, 128),
            "128x32_4x4": (128, 32, 256), "128x32_8x4": (128, 32, 128),
            "64x32_4x4": (64, 32, 128), "64x16_4x2": (64, 16, 128),
            "32x32_2x4": (32, 32, 128), "32x32_4x4": (32, 32, 64),
            "128x64_8x4_k16": (128, 64, 256), "32x32_4x4_k16": (32, 32, 64)}
# Launches with less work than this (multiply-adds) are not worth timing: first candidate.
TUNE_MIN_WORK = 2e8

_SIGNATURES = {
    "gemm_nn": "PiPPPiiiPiPii",
    "conv_small": "Pi" + "i" * 11 + "PiiPi",
    "gemm_tn": "PiPPPiiiiiiiiiiiPi",
    "conv_small_pool": "Pi" + "i" * 11 + "Pii" + "iiii" + "PPi",
    "pool_forward": "P" + "i" * 10 + "PPi",
    "pool_backward": "PP" + "i" * 10 + "PPi",
    "softmax_ll": "PiiPPPP",
    "ll_sum": "PiP",
    "weights_scatter": "PiPPPP",
    "grad_flatten": "PiiiiiiiiPP",
    "grad_flatten_d": "PiiiiiiiiPP",
    "grad_slot_sum": "PiiiP",
    "grad_finish": "PPPiddP",
}

MAX_GRID_Z = 65535
MAX_GRID_X = 2 ** 31 - 1
# conv_small: CONV layers with at most this many slices and a weight matrix of at most
# CONV_SMALL_FLOATS floats (slices padded to a multiple of 4) compute their activation directly.
CONV_SMALL_SLICES = 32
CONV_SMALL_FLOATS = 8192
CONV_SMALL_THREADS = 128
# Pooling launches: about this many blocks, each thread looping over cases.
POOL_CASES_PER_THREAD = 8
CONV_SMALL_WIDTHS = (4, 8, 12, 16, 20, 24, 28, 32)


class DeviceUnavailable(ConvnetError):
    """No usable CUDA device (PyCUDA missing, no driver, no GPU, or a kernel failed to build)."""


def _kernel_source(name):
    with open(os.path.join(KERNEL_DIR, name), encoding="utf-8") as f:
        src = f.read()
    with open(os.path.join(KERNEL_DIR, COMMON_HEADER), encoding="utf-8") as f:
        common = f.read()
    return src.replace(f'#include "{COMMON_HEADER}"', common)


class _Runtime:
    """The process's one CUDA context (device 0's primary context), stream and compiled kernels."""

    _instance = None
    _failure = None
    _lock = threading.Lock()

    @classmethod
    def get(cls):
        with cls._lock:
            if cls._instance is None:
                if cls._failure is not None:
                    raise DeviceUnavailable(cls._failure)
                try:
                    cls._instance = cls()
                except DeviceUnavailable as e:
                    cls._failure = e.message
                    raise
            return cls._instance

    def __init__(self):
        try:
            import pycuda
            import pycuda.driver as cuda
        except ImportError as e:
            raise DeviceUnavailable(f"PyCUDA is not installed ({e}); install the 'cuda' extra") from None
        try:
            cuda.init()
            n = cuda.Device.count()
        except Exception as e:          # pycuda.driver.Error and friends
            raise DeviceUnavailable(f"the CUDA driver is not usable: {e}") from None
        if n < 1:
            raise DeviceUnavailable("no CUDA device found")
        self.cuda = cuda
        self.pycuda_version = getattr(pycuda, "VERSION_TEXT", "?")
        self.device = cuda.Device(0)
        self.ctx = self.device.retain_primary_context()
        self.lock = threading.RLock()
        self.trace = None
        with self.active():
            self.stream = cuda.Stream()
            self.functions = {}
            self._build()

    @contextlib.contextmanager
    def active(self):
        """Holds the lock and makes this context current for the calling thread."""
        with self.lock:
            self.ctx.push()
            try:
                yield
            finally:
                self.cuda.Context.pop()

    def _module(self, name):
        from pycuda.compiler import SourceModule
        try:
            return SourceModule(_kernel_source(name), no_extern_c=True, options=["-O3"])
        except Exception as e:
            raise DeviceUnavailable(f"kernel file {name} did not build: {e}") from None

    def _build(self):
        self.modules = {name: self._module(name) for name in KERNEL_FILES}
        for kind, tiles in (("nn", NN_TILES), ("tn", TN_TILES)):
            for tile in tiles:
                f = self.modules["gemm.cu"].get_function(f"gemm_{kind}_{tile}")
                f.prepare(_SIGNATURES[f"gemm_{kind}"])
                self.functions[f"gemm_{kind}_{tile}"] = f
        for np_ in CONV_SMALL_WIDTHS:
            for kind in ("conv_small", "conv_small_pool"):
                f = self.modules["conv_small.cu"].get_function(f"{kind}_{np_}")
                f.prepare(_SIGNATURES[kind])
                self.functions[f"{kind}_{np_}"] = f
        for mod_name, names in (("pool.cu", ("pool_forward", "pool_backward")),
                                ("output.cu", ("softmax_ll", "ll_sum")),
                                ("weights.cu", ("weights_scatter", "grad_flatten", "grad_flatten_d",
                                                "grad_slot_sum", "grad_finish"))):
            for fn in names:
                f = self.modules[mod_name].get_function(fn)
                f.prepare(_SIGNATURES[fn])
                self.functions[fn] = f

    # ------------------------------------------------------------------ helpers
    def alloc(self, nbytes):
        return self.cuda.mem_alloc(max(int(nbytes), 16))

    def upload(self, array):
        a = np.ascontiguousarray(array)
        buf = self.alloc(a.nbytes)
        if a.nbytes:
            self.cuda.memcpy_htod(buf, a)
        return buf

    def launch(self, name, grid, block, *args, shared=0):
        if self.trace is not None:          # checks: an event pair around every launch
            e0, e1 = self.cuda.Event(), self.cuda.Event()
            e0.record(self.stream)
            self.functions[name].prepared_async_call(grid, block, self.stream, *args,
                                                     shared_size=shared)
            e1.record(self.stream)
            self.trace.append((name, grid, e0, e1))
            return
        self.functions[name].prepared_async_call(grid, block, self.stream, *args, shared_size=shared)

    def free_memory(self):
        free, total = self.cuda.mem_get_info()
        return free, total

    def report(self):
        d = self.device
        cuda = self.cuda
        at = d.get_attributes()
        A = cuda.device_attribute

        def attr(name, default=None):
            key = getattr(A, name, None)
            return at.get(key, default) if key is not None else default

        major, minor = d.compute_capability()
        with self.active():
            free, total = self.free_memory()
        drv = cuda.get_driver_version()
        lines = [
            f"Device 0: {d.name()}",
            f"   Compute capability {major}.{minor}, {attr('MULTIPROCESSOR_COUNT', '?')} multiprocessors",
            f"   Global memory {total / 2**20:.0f} MiB ({free / 2**20:.0f} MiB free)",
            f"   Clock {attr('CLOCK_RATE', 0) / 1000:.0f} MHz, memory clock "
            f"{attr('MEMORY_CLOCK_RATE', 0) / 1000:.0f} MHz, memory bus {attr('GLOBAL_MEMORY_BUS_WIDTH', '?')} bits",
            f"   L2 cache {attr('L2_CACHE_SIZE', 0) / 2**20:.1f} MiB, shared memory per block "
            f"{attr('MAX_SHARED_MEMORY_PER_BLOCK', 0) // 1024} KiB, registers per block "
            f"{attr('MAX_REGISTERS_PER_BLOCK', '?')}",
            f"   Warp size {attr('WARP_SIZE', '?')}, max threads per block "
            f"{attr('MAX_THREADS_PER_BLOCK', '?')}, max grid {attr('MAX_GRID_DIM_X', '?')} x "
            f"{attr('MAX_GRID_DIM_Y', '?')} x {attr('MAX_GRID_DIM_Z', '?')}",
            f"   Driver CUDA version {drv // 1000}.{drv % 1000 // 10}, PyCUDA {self.pycuda_version}",
        ]
        n = cuda.Device.count()
        for i in range(1, n):
            other = cuda.Device(i)
            lines.append(f"Device {i}: {other.name()} (not used), "
                         f"{other.total_memory() / 2**20:.0f} MiB, compute capability "
                         f"{'.'.join(map(str, other.compute_capability()))}")
        return lines


def device_available():
    """(True, "") when a CUDA device is usable, else (False, why not)."""
    try:
        _Runtime.get()
        return True, ""
    except DeviceUnavailable as e:
        return False, e.message


def device_report():
    """Lines about the CUDA device (name, memory, compute capability, ...); raises
    DeviceUnavailable (a ConvnetError) saying why when there is none."""
    return _Runtime.get().report()


def _same(a, b, first=4096):
    """a == b element for element (two 1-D arrays of one length), cheaply when they differ."""
    if not np.array_equal(a[:first], b[:first]):
        return False
    return bool(np.array_equal(a[first:], b[first:]))


def _ptr(buf, offset_elems=0, itemsize=4):
    return np.uintp(int(buf) + int(offset_elems) * itemsize)


NULL = np.uintp(0)


def _pool_grid(per_case, nb):
    """Grid x covers a case's neurons; each thread does about POOL_CASES_PER_THREAD cases."""
    gx = (per_case + 255) // 256
    return gx, max(1, min(MAX_GRID_Z, -(-nb // POOL_CASES_PER_THREAD))), 1


def _nn_candidates(M, N):
    if N > 32:
        return ["128x64_8x4", "128x64_8x8", "128x64_8x4_k16"]
    if N > 16:
        big = ["256x32_8x4", "256x32_8x8", "256x32_8x4_k16", "128x32_4x4", "128x32_8x4",
               "128x32_8x4_k16"]
        return big if M >= 4096 else big[3:] + big[:3]
    return ["64x16_4x2", "128x16_8x2"]


def _tn_candidates(R, N):
    if R <= 32:
        return ["32x32_2x4", "32x32_4x4", "32x32_4x4_k16"]
    if N > 32:
        return ["128x64_8x4", "128x64_8x8", "128x64_8x4_k16"]
    if N > 16:
        return ["128x32_4x4", "128x32_8x4", "64x32_4x4"]
    return ["64x16_4x2"]


class _Tuner:
    """Picks the tile shape of every gemm launch site: the first time a site runs with enough
    work, each candidate is launched twice, timed with events, and the fastest is kept. The
    launches are idempotent (they overwrite their outputs), so the timed runs also do the work."""

    ROUNDS = 3

    def __init__(self, rt, enabled):
        self.rt = rt
        self.enabled = enabled
        self.choice = {}
        self.times = {}             # site -> {tile: ms} measured when choosing
        self.sites = {}             # site -> (candidates, launch), for measure()

    def run(self, site, candidates, work, launch):
        tile = self.choice.get(site)
        self.sites[site] = (candidates, launch)
        if tile is None:
            if not self.enabled or len(candidates) == 1 or work < TUNE_MIN_WORK:
                tile = candidates[0]
            else:
                self.times[site] = self._time(candidates, launch)
                tile = min(candidates, key=lambda t: self.times[site][t])
            self.choice[site] = tile
        launch(tile)
        return tile

    def _time(self, candidates, launch):
        """Best of ROUNDS launches of each candidate, the candidates taken in turn (so a clock
        still rising after idle time favours none of them)."""
        cuda, stream = self.rt.cuda, self.rt.stream
        best = {}
        for _ in range(self.ROUNDS):
            for tile in candidates:
                e0, e1 = cuda.Event(), cuda.Event()
                e0.record(stream)
                launch(tile)
                e1.record(stream)
                e1.synchronize()
                ms = e1.time_since(e0)
                best[tile] = min(ms, best.get(tile, ms))
        return best

    def measure(self):
        """Times every candidate of every site seen (benchmarks; call between evaluations, as
        it reruns launches whose inputs may since have been overwritten)."""
        return {site: self._time(c, launch) for site, (c, launch) in self.sites.items()}


class DeviceBackend:
    """See the module docstring."""

    def __init__(self, arch, params=None, timing=True, poison=False, tune=True, fuse=True):
        self.rt = _Runtime.get()
        self.tune = tune            # time the tile shapes of each product once per evaluator
        self.poison = poison        # tests: fill new work buffers with NaN to catch unwritten outputs
        self.arch = arch
        params = dict(params or {})
        mb = params.get("MAX BATCH")
        self.max_batch = None if mb is None else int(mb)
        self.max_hid_grad = int(params.get("MAX HID GRAD") or DEFAULT_MAX_HID_GRAD)
        self.max_mem_grad = int(params.get("MAX MEM GRAD") or DEFAULT_MAX_MEM_GRAD)
        if self.max_batch is not None and self.max_batch < 1:
            raise ConvnetError(f"MAX BATCH must be at least 1, not {self.max_batch}")
        if self.max_hid_grad < 1 or self.max_mem_grad < 1:
            raise ConvnetError("MAX HID GRAD and MAX MEM GRAD must be at least 1")
        self.params = params
        self.plan = ModelPlan(arch)
        lay = self.plan.layout
        self.labels = [f"Layer {i + 1} {L.kind}" for i, L in enumerate(arch.layers)] + ["Output"]
        self.conv_small = {}        # layer index -> padded slice count, for conv_small layers
        for lp in self.plan.hidden:
            if lp.kind == CONV and lp.depth <= CONV_SMALL_SLICES:
                width = -(-lp.depth // 4) * 4
                if lp.rows * width <= CONV_SMALL_FLOATS:
                    self.conv_small[lp.index] = width
        # A conv_small first layer followed by max pooling whose windows tile it is computed
        # together with the pooling in forward-only evaluations (criterion, outputs): only the
        # pooled values are written. Gradients need the layer's own activations and compute the
        # layers one by one (a gradient reading its delta from the pooled layer's was tried: the
        # per-element work in its loader cost more than the pooling kernels it saved).
        self.fused_pool = False
        layers = arch.layers
        if fuse and 0 in self.conv_small and len(layers) > 1 and layers[1].kind == POOLMAX:
            s = layers[1].spec
            smem = 4 * (self.plan.layers[0].rows * self.conv_small[0]
                        + 2 * CONV_SMALL_THREADS * layers[0].depth)
            if s.stride_v == s.width_v and s.stride_h == s.width_h and smem <= 48 * 1024:
                self.fused_pool = True
        rt = self.rt
        with rt.active():
            self.timer = EventTimer(rt.cuda, enabled=timing)
            # descriptors of every gemm_nn launch, in one int32 array
            descs, self.fwd_desc, self.bwd_desc = [], {}, {}
            pos = 0
            for lp in self.plan.layers:
                if lp.fwd is not None:
                    self.fwd_desc[lp.index] = pos
                    descs.append(lp.fwd.desc.ravel())
                    pos += lp.fwd.desc.size
                if lp.bwd is not None:
                    self.bwd_desc[lp.index] = pos
                    descs.append(lp.bwd.desc.ravel())
                    pos += lp.bwd.desc.size
            desc_arr = np.concatenate(descs).astype(np.int32) if descs else np.zeros(1, np.int32)
            self.d_desc = rt.upload(desc_arr)
            self.d_tables = rt.upload(self.plan.tables)
            self.d_fwd_index = rt.upload(lay.fwd_index.astype(np.int32))
            self.d_bwd_index = rt.upload(lay.bwd_index.astype(np.int32))
            self.d_dev2host = rt.upload(lay.dev_to_host.astype(np.int32))
            self.d_mask = rt.upload(arch.penalty_mask().astype(np.uint8))
            self.n_weights = arch.n_weights
            self.d_w32 = rt.alloc(4 * self.n_weights)
            self.d_wfwd = rt.alloc(4 * lay.n_fwd)
            self.d_wbwd = rt.alloc(4 * max(lay.n_bwd, 1))
            rt.cuda.memset_d32(self.d_wfwd, 0, lay.n_fwd)
            rt.cuda.memset_d32(self.d_wbwd, 0, max(lay.n_bwd, 1))
            # two page-locked float32 staging buffers, used in turn (see _set_weights)
            self.h_w32 = [rt.cuda.pagelocked_empty(self.n_weights, np.float32) for _ in range(2)]
            self.static_bytes = (desc_arr.nbytes + self.plan.tables.nbytes + 4 * 3 * self.n_weights
                                 + 4 * lay.n_fwd + self.n_weights + 8 * self.n_weights
                                 + 4 * lay.n_fwd + 4 * max(lay.n_bwd, 1))
        self._last_weights = None
        self.weight_uploads = 0
        self.last_allocation = None     # lines for CUDA.LOG section 3, from the last evaluator
        self._penalty_mask = arch.penalty_mask().astype(bool)

    # ------------------------------------------------------------------ public interface
    def evaluator(self, inputs, classes, wpen=0.0):
        return DeviceEvaluator(self, inputs, classes, wpen)

    def activations(self, weights, inputs):
        ev = DeviceEvaluator(self, inputs, None, 0.0)
        return ev._activations(weights)

    def poolmax_winners(self, weights, inputs):
        ev = DeviceEvaluator(self, inputs, None, 0.0)
        return ev._winners(weights)

    def timings(self):
        return self.timer.table()

    def reset_timings(self):
        self.timer.reset()

    # ------------------------------------------------------------------ internals
    def batch_limit(self, n_cases):
        """The MAX BATCH in force for a data set of n_cases."""
        if self.max_batch is not None:
            return self.max_batch
        per_case = self.bytes_per_case()
        with self.rt.active():
            free, _ = self.rt.free_memory()
        budget = AUTO_BATCH_MEMORY_SHARE * free
        fit = int(budget // max(per_case, 1))
        if fit >= n_cases:
            return n_cases
        return max(CHUNK, fit // CHUNK * CHUNK)

    def bytes_per_case(self):
        """Device bytes per case of a batch: activations, max-pooling winners, delta, scratch."""
        p = self.plan
        floats = sum(lp.nhid for lp in p.layers) + 2 * p.max_nhid + p.n_classes
        ints = sum(lp.nhid for lp in p.layers if lp.kind == POOLMAX)
        scratch = max([lp.grad.scratch_floats(CHUNK, lp.depth, lp.grad.slots_for(CHUNK)[1]) / CHUNK
                       for lp in p.layers if lp.grad is not None] + [0])
        return 4 * (floats + ints + p.n_inputs + scratch) + 8 * (1 + p.n_classes)

    def _set_weights(self, weights):
        """Copy the weights to the device if they differ from the last copy (returns True if copied).

        The device computes in float32, so the weights are rounded to float32 into one of two
        page-locked buffers, used in turn, and compared with the last float32 copy sent (in slices,
        so a change is usually found in the first): a change too small to alter any float32 weight
        changes nothing the device computes and is not sent."""
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (self.n_weights,):
            raise ConvnetError(f"this model has {self.n_weights} weights; got an array of shape {w.shape}")
        rt = self.rt
        buf = self.h_w32[self.weight_uploads % 2]
        np.copyto(buf, w, casting="same_kind")
        last = self._last_weights
        if last is not None and _same(buf, last):
            return False
        rt.cuda.memcpy_htod_async(self.d_w32, buf, rt.stream)
        n = self.n_weights
        rt.launch("weights_scatter", ((n + 255) // 256, 1, 1), (256, 1, 1),
                  self.d_w32, np.int32(n), self.d_fwd_index, self.d_bwd_index,
                  self.d_wfwd, self.d_wbwd)
        self.timer.mark(rt.stream, "Device", "weight copy", 1)
        self._last_weights = buf
        self.weight_uploads += 1
        return True

    def alloc(self, nbytes):
        """A device buffer for per-evaluator work (NaN-filled when poisoning)."""
        buf = self.rt.alloc(nbytes)
        if self.poison:
            self.rt.cuda.memset_d32(buf, 0x7FC00001, max(int(nbytes), 16) // 4)
        return buf

    def penalty(self, w, wpen):
        if not wpen:
            return 0.0
        wm = np.asarray(w, dtype=np.float64)[self._penalty_mask]
        return wpen / self.n_weights * float(np.dot(wm, wm))


class _Workspace:
    """Device buffers of one batch size."""

    def __init__(self, backend, nb, n_total):
        rt = backend.rt
        plan = backend.plan
        self.nb = nb
        self.acts = []
        self.ids = {}
        self.sizes = []          # (name, bytes) for CUDA.LOG
        for lp in plan.layers:
            self.acts.append(backend.alloc(4 * nb * lp.nhid))
            self.sizes.append((f"{backend.labels[lp.index]} activations", 4 * nb * lp.nhid))
            if lp.kind == POOLMAX:
                self.ids[lp.index] = backend.alloc(4 * nb * lp.nhid)
                self.sizes.append((f"{backend.labels[lp.index]} max-pooling winners", 4 * nb * lp.nhid))
        self.deltas = [backend.alloc(4 * nb * plan.max_nhid), backend.alloc(4 * nb * plan.max_nhid)]
        self.sizes.append(("delta (two buffers)", 8 * nb * plan.max_nhid))
        # gradient launches and their partial-sum scratch
        self.splits = {}
        scratch = 1
        for lp in plan.layers:
            if lp.grad is None:
                continue
            gps, slots = lp.grad.slots_for(n_total)
            per = gradient_launch_slices(lp.grad, nb, backend.max_hid_grad, backend.max_mem_grad, slots)
            launches = -(-lp.depth // per)
            floats = lp.grad.scratch_floats(nb, per, slots)
            self.splits[lp.index] = (per, launches, floats, gps, slots)
            scratch = max(scratch, floats)
        self.scratch_floats = scratch
        self.scratch = backend.alloc(4 * scratch)
        self.sizes.append(("gradient partial-sum scratch", 4 * scratch))
        # float64 per-chunk totals of convolutional layers' partial sums
        tot = 1
        chunks = -(-nb // CHUNK)
        for lp in plan.layers:
            if lp.grad is not None and lp.kind == CONV:
                per, _, _, _, slots = self.splits[lp.index]
                if slots > 1:
                    tot = max(tot, chunks * lp.grad.rows * per)
        self.chunk_tot = backend.alloc(8 * tot)
        self.sizes.append(("convolution gradient chunk totals (float64)", 8 * tot))


class DeviceEvaluator:
    """A data set on the device: full-batch criterion, gradient and outputs for any weights."""

    def __init__(self, backend, inputs, classes, wpen=0.0):
        from ..host.backend import check_classes, check_inputs
        self.backend = backend
        arch = backend.arch
        x = check_inputs(arch, inputs)
        self.n_cases = x.shape[0]
        self.classes = None if classes is None else check_classes(arch, classes, self.n_cases)
        try:
            self.wpen = float(wpen)
        except (TypeError, ValueError):
            raise ConvnetError(f"the weight penalty must be a number, not {wpen!r}") from None
        if not self.wpen >= 0.0:
            raise ConvnetError(f"the weight penalty must not be negative, not {wpen!r}")
        rt = backend.rt
        plan = backend.plan
        n = self.n_cases
        ncls = plan.n_classes
        self.batches = split_batches(n, backend.batch_limit(n))
        self.nb = max(b - a for a, b in self.batches)
        with rt.active():
            self.d_x = rt.upload(image_to_device(x))
            cls = np.zeros(n, np.int32) if self.classes is None else self.classes.astype(np.int32)
            self.d_classes = rt.upload(cls)
            self.d_probs = backend.alloc(8 * n * ncls)
            self.d_ll = backend.alloc(8 * n)
            self.d_crit = backend.alloc(8)
            self.d_acc = backend.alloc(8 * backend.n_weights)
            self.d_grad = backend.alloc(8 * backend.n_weights)
            self.ws = _Workspace(backend, self.nb, n)
            self.tuner = _Tuner(rt, backend.tune)
            self.h_crit = rt.cuda.pagelocked_empty(1, np.float64)
            self.h_grad = rt.cuda.pagelocked_empty(backend.n_weights, np.float64)
        data_bytes = 4 * n * plan.n_inputs + 4 * n + 8 * n * ncls + 8 * n + 8 + 16 * backend.n_weights
        self.allocation = self._allocation_lines(data_bytes)
        backend.last_allocation = self.allocation

    # ------------------------------------------------------------------ public
    def criterion(self, weights):
        b = self.backend
        self._need_classes()
        with b.rt.active():
            b.timer.start(b.rt.stream)
            b.last_allocation = self.allocation
            b._set_weights(weights)
            for start, stop in self.batches:
                self._forward(start, stop, want_delta=False)
            crit = self._fetch_ll()
            b.timer.resolve()
        return crit / (self.n_cases * b.arch.n_classes) + b.penalty(weights, self.wpen)

    def gradient(self, weights):
        b = self.backend
        rt = b.rt
        self._need_classes()
        with rt.active():
            b.timer.start(rt.stream)
            b.last_allocation = self.allocation
            b._set_weights(weights)
            rt.cuda.memset_d32_async(self.d_acc, 0, 2 * b.n_weights, rt.stream)
            for start, stop in self.batches:
                self._forward(start, stop, want_delta=True, fused=False)
                self._backward(start, stop)
            scale = 1.0 / (self.n_cases * b.arch.n_classes)
            pen2 = 2.0 * self.wpen / b.n_weights
            n = b.n_weights
            rt.launch("grad_finish", ((n + 255) // 256, 1, 1), (256, 1, 1), self.d_acc, b.d_w32,
                      b.d_mask, np.int32(n), np.float64(scale), np.float64(pen2), self.d_grad)
            rt.cuda.memcpy_dtoh_async(self.h_grad, self.d_grad, rt.stream)
            b.timer.mark(rt.stream, "Device", "gradient fetch", 1)
            crit = self._fetch_ll()
            b.timer.resolve()
            grad = np.array(self.h_grad)
        return crit * scale + b.penalty(weights, self.wpen), grad

    def outputs(self, weights):
        b = self.backend
        rt = b.rt
        ncls = b.arch.n_classes
        with rt.active():
            b.timer.start(rt.stream)
            b._set_weights(weights)
            for start, stop in self.batches:
                self._forward(start, stop, want_delta=False)
            out = np.empty((self.n_cases, ncls), np.float64)
            rt.stream.synchronize()
            rt.cuda.memcpy_dtoh(out, self.d_probs)
            b.timer.resolve()
        return out

    # ------------------------------------------------------------------ internals
    def _need_classes(self):
        if self.classes is None:
            raise ConvnetError("the criterion needs the classes of the cases, and there are none")

    def _fetch_ll(self):
        rt = self.backend.rt
        rt.launch("ll_sum", (1, 1, 1), (256, 1, 1), self.d_ll, np.int32(self.n_cases), self.d_crit)
        rt.cuda.memcpy_dtoh_async(self.h_crit, self.d_crit, rt.stream)
        self.backend.timer.mark(rt.stream, "Output", "log likelihood", 1)
        rt.stream.synchronize()
        return float(self.h_crit[0])

    def _src(self, li, start):
        """(pointer, row length) of the activations feeding layer li for the batch at start."""
        plan = self.backend.plan
        if li == 0:
            return _ptr(self.d_x, start * plan.n_inputs), plan.n_inputs
        return _ptr(self.ws.acts[li - 1]), plan.layers[li - 1].nhid

    def _forward(self, start, stop, want_delta, fused=True):
        b = self.backend
        rt = b.rt
        plan = b.plan
        ws = self.ws
        nb = stop - start
        fused = fused and b.fused_pool
        for lp in plan.layers:
            li = lp.index
            src, lda = self._src(li, start)
            layer = lp.layer
            if fused and li == 1:
                continue                        # computed with layer 1 (index 0)
            if fused and li == 0:
                self._conv_small_pool(lp, src, lda, nb)
            elif lp.kind in POOL_KINDS:
                s = layer.spec
                rt.launch("pool_forward", _pool_grid(lp.nhid, nb), (256, 1, 1), src,
                          np.int32(layer.prior_height), np.int32(layer.prior_width),
                          np.int32(layer.prior_depth), np.int32(layer.height), np.int32(layer.width),
                          np.int32(s.width_v), np.int32(s.width_h), np.int32(s.stride_v),
                          np.int32(s.stride_h), np.int32(lp.kind == POOLMAX), ws.acts[li],
                          ws.ids.get(li, NULL), np.int32(nb))
            elif li in b.conv_small:
                self._conv_small(lp, src, lda, nb, ws.acts[li], b.conv_small[li])
            else:
                self._gemm_nn(("forward", li), src, lda, b.fwd_desc[li], lp.fwd, _ptr(b.d_wfwd, lp.lay.fwd_offset),
                              lp.lay.cols, nb, ws.acts[li], lp.nhid, NULL,
                              EPI_NONE if lp.is_output else EPI_TANH)
            b.timer.mark(rt.stream, b.labels[li], "forward", 1)
        ncls = plan.n_classes
        rt.launch("softmax_ll", ((nb + 127) // 128, 1, 1), (128, 1, 1), ws.acts[-1], np.int32(ncls),
                  np.int32(nb), _ptr(self.d_classes, start), _ptr(self.d_probs, start * ncls, 8),
                  _ptr(self.d_ll, start, 8), ws.deltas[0] if want_delta else NULL)
        b.timer.mark(rt.stream, "Output", "softmax", 1)

    def _gemm_nn(self, site, src, lda, desc_pos, groups, B, b_ld, M, out, ldo, prior, epi):
        b = self.backend
        G = groups.n_groups
        N = groups.n_cols

        def launch(tile):
            BM, BN, nt = NN_TILES[tile]
            grid = (min(G, MAX_GRID_X), (M + BM - 1) // BM, (N + BN - 1) // BN)
            b.rt.launch(f"gemm_nn_{tile}", grid, (nt, 1, 1), src, np.int32(lda), b.d_tables,
                        _ptr(b.d_desc, desc_pos), B, np.int32(b_ld), np.int32(M), np.int32(N), out,
                        np.int32(ldo), prior, np.int32(epi), np.int32(G))

        work = float(M) * N * groups.max_k * G
        self.tuner.run(site + (M,), _nn_candidates(M, N), work, launch)

    def _conv_small_pool(self, lp, src, lda, nb):
        b = self.backend
        L = lp.layer
        s = L.spec
        P = b.arch.layers[1]
        ps = P.spec
        width = b.conv_small[0]
        total = nb * P.height * P.width
        nt = CONV_SMALL_THREADS
        b.rt.launch(f"conv_small_pool_{width}", ((total + nt - 1) // nt, 1, 1), (nt, 1, 1), src,
                    np.int32(lda), np.int32(L.prior_height), np.int32(L.prior_width),
                    np.int32(L.prior_depth), np.int32(L.height), np.int32(L.width),
                    np.int32(s.filter_v), np.int32(s.filter_h), np.int32(s.pad_v), np.int32(s.pad_h),
                    np.int32(s.stride_v), np.int32(s.stride_h), _ptr(b.d_wfwd, lp.lay.fwd_offset),
                    np.int32(lp.lay.cols), np.int32(L.depth), np.int32(P.height), np.int32(P.width),
                    np.int32(ps.width_v), np.int32(ps.width_h), self.ws.acts[1], self.ws.ids[1],
                    np.int32(total), shared=4 * (lp.rows * width + 2 * nt * L.depth))

    def _conv_small(self, lp, src, lda, nb, out, width):
        b = self.backend
        L = lp.layer
        s = L.spec
        total = nb * L.height * L.width
        nt = CONV_SMALL_THREADS
        b.rt.launch(f"conv_small_{width}", ((total + nt - 1) // nt, 1, 1), (nt, 1, 1), src,
                    np.int32(lda), np.int32(L.prior_height), np.int32(L.prior_width),
                    np.int32(L.prior_depth), np.int32(L.height), np.int32(L.width),
                    np.int32(s.filter_v), np.int32(s.filter_h), np.int32(s.pad_v), np.int32(s.pad_h),
                    np.int32(s.stride_v), np.int32(s.stride_h), _ptr(b.d_wfwd, lp.lay.fwd_offset),
                    np.int32(lp.lay.cols), np.int32(L.depth), out, np.int32(total),
                    shared=4 * (lp.rows * width + nt * L.depth))

    def _backward(self, start, stop):
        b = self.backend
        rt = b.rt
        plan = b.plan
        ws = self.ws
        nb = stop - start
        cur, other = 0, 1
        for li in range(len(plan.layers) - 1, -1, -1):
            lp = plan.layers[li]
            if lp.grad is not None:
                launches = self._gradient(lp, start, nb, ws.deltas[cur])
                b.timer.mark(rt.stream, b.labels[li], "gradient", launches)
            if li == 0:
                break
            prior = plan.layers[li - 1]
            prior_act = NULL if prior.kind in POOL_KINDS else ws.acts[li - 1]
            if lp.kind in POOL_KINDS:
                layer = lp.layer
                s = layer.spec
                rt.launch("pool_backward", _pool_grid(prior.nhid, nb), (256, 1, 1),
                          ws.deltas[cur],
                          ws.ids.get(li, NULL), np.int32(layer.prior_height),
                          np.int32(layer.prior_width), np.int32(layer.prior_depth),
                          np.int32(layer.height), np.int32(layer.width), np.int32(s.width_v),
                          np.int32(s.width_h), np.int32(s.stride_v), np.int32(s.stride_h),
                          np.int32(lp.kind == POOLMAX), prior_act, ws.deltas[other], np.int32(nb))
            else:
                self._gemm_nn(("delta", li), ws.deltas[cur], lp.nhid, b.bwd_desc[li], lp.bwd,
                              _ptr(b.d_wbwd, lp.lay.bwd_offset), 0, nb, ws.deltas[other], prior.nhid,
                              prior_act, EPI_NONE if prior.kind in POOL_KINDS else EPI_DERIV)
            b.timer.mark(rt.stream, b.labels[li - 1], "delta", 1)    # the layer that receives it
            cur, other = other, cur

    def _gradient(self, lp, start, nb, delta):
        """Weight gradient of one layer for one batch: partial sums, then flatten into acc."""
        b = self.backend
        rt = b.rt
        gp = lp.grad
        per, _, _, gps, slots = self.ws.splits[lp.index]
        src, lda = self._src(lp.index, start)
        R = gp.rows
        chunks = -(-nb // CHUNK)
        nz = chunks * slots
        n_part = chunks if gp.local_cols else nz
        lay = lp.lay
        launches = 0

        for n_lo in range(0, lp.depth, per):
            n_hi = min(lp.depth, n_lo + per)
            NL = n_hi - n_lo

            def launch(tile, n_lo=n_lo, n_hi=n_hi, NL=NL):
                BM, BN, nt = TN_TILES[tile]
                grid = ((NL + BN - 1) // BN, (R + BM - 1) // BM, min(nz, MAX_GRID_Z))
                rt.launch(f"gemm_tn_{tile}", grid, (nt, 1, 1), src, np.int32(lda), b.d_tables,
                          _ptr(b.d_desc, b.fwd_desc[lp.index]), delta, np.int32(lp.nhid),
                          np.int32(lp.depth if lp.kind != FC else 0), np.int32(R), np.int32(n_lo),
                          np.int32(n_hi), np.int32(nb), np.int32(CHUNK), np.int32(gp.groups),
                          np.int32(gps), np.int32(slots), np.int32(gp.local_cols),
                          self.ws.scratch, np.int32(nz))

            work = float(R) * NL * nb * gp.groups
            self.tuner.run(("gradient", lp.index, NL, nb), _tn_candidates(R, NL), work,
                           launch)
            pld = gp.groups * NL if gp.local_cols else NL
            total = R * pld
            part, n_sum, flatten = self.ws.scratch, n_part, "grad_flatten"
            if slots > 1 and not gp.local_cols:
                # a convolutional layer: add each chunk's position ranges first
                rt.launch("grad_slot_sum", ((chunks * total + 255) // 256, 1, 1), (256, 1, 1),
                          self.ws.scratch, np.int32(slots), np.int32(chunks), np.int32(total),
                          self.ws.chunk_tot)
                part, n_sum, flatten = self.ws.chunk_tot, chunks, "grad_flatten_d"
                launches += 1
            rt.launch(flatten, ((total + 255) // 256, 1, 1), (256, 1, 1), part,
                      np.int32(n_sum), np.int32(R), np.int32(pld), np.int32(NL), np.int32(n_lo),
                      np.int32(lp.depth), np.int32(gp.local_cols), np.int32(lay.cols),
                      _ptr(b.d_dev2host, lay.fwd_offset), self.d_acc)
            launches += 2
        return launches

    def _forward_collect(self, weights, collect):
        b = self.backend
        rt = b.rt
        with rt.active():
            b.timer.start(rt.stream)
            b._set_weights(weights)
            for start, stop in self.batches:
                self._forward(start, stop, want_delta=False, fused=False)
                rt.stream.synchronize()
                collect(start, stop)
            b.timer.resolve()

    def _activations(self, weights):
        b = self.backend
        plan = b.plan
        res = [np.empty((self.n_cases, lp.nhid), np.float32) for lp in plan.hidden]

        def collect(start, stop):
            for i, lp in enumerate(plan.hidden):
                b.rt.cuda.memcpy_dtoh(res[i][start:stop], self.ws.acts[i])

        self._forward_collect(weights, collect)
        return [activations_to_host(r, lp.layer.height, lp.layer.width, lp.layer.depth)
                for r, lp in zip(res, plan.hidden)]

    def _winners(self, weights):
        b = self.backend
        plan = b.plan
        res = {lp.index: np.empty((self.n_cases, lp.nhid), np.int32)
               for lp in plan.hidden if lp.kind == POOLMAX}

        def collect(start, stop):
            for i, r in res.items():
                b.rt.cuda.memcpy_dtoh(r[start:stop], self.ws.ids[i])

        self._forward_collect(weights, collect)
        out = {}
        for i, r in res.items():
            L = plan.layers[i].layer
            out[i] = np.ascontiguousarray(r.reshape(-1, L.height, L.width, L.depth)
                                          .transpose(0, 3, 1, 2)).reshape(r.shape[0], -1)
        return out

    def _allocation_lines(self, data_bytes):
        b = self.backend
        ws = self.ws
        mib = 2.0 ** 20
        lines = [f"Training data and per-case results ({self.n_cases} cases): {data_bytes / mib:.2f} MiB",
                 f"Weights, device layouts and index tables: {b.static_bytes / mib:.2f} MiB",
                 f"Batch size {self.nb} cases, {len(self.batches)} batch(es) "
                 f"(MAX BATCH {'automatic' if b.max_batch is None else b.max_batch})"]
        for name, nbytes in ws.sizes:
            lines.append(f"   {name}: {nbytes / mib:.2f} MiB")
        lines.append(f"Gradient partial sums: chunks of {CHUNK} cases; MAX HID GRAD {b.max_hid_grad}, "
                     f"MAX MEM GRAD {b.max_mem_grad} MB")
        for lp in b.plan.layers:
            if lp.index not in ws.splits:
                continue
            per, launches, floats, gps, slots = ws.splits[lp.index]
            gp = lp.grad
            what = ("slices" if lp.kind in (CONV, LOCAL) else "neurons")
            lines.append(f"   {b.labels[lp.index]}: {gp.rows} x {lp.depth} weights"
                         f"{' per position' if lp.kind == LOCAL else ''}, {per} {what} per launch, "
                         f"{launches} launch(es) per batch, scratch {4 * floats / mib:.2f} MiB, "
                         f"{gp.n_partials(self.nb, slots)} partial sums per batch"
                         + (f" ({gps} positions each)" if lp.kind == CONV else ""))
        total = data_bytes + b.static_bytes + sum(n for _, n in ws.sizes)
        lines.append(f"Total device memory allocated: {total / mib:.2f} MiB")
        return lines
