"""The CUDA compute path: PyCUDA kernels (kernels/*.cu), float32 on the device.

    backend = DeviceBackend(arch, DeviceParams(max_batch=...), DeviceOptions(device=0))
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
    MAX HID GRAD  most neurons of one layer in one gradient launch.
    MAX MEM GRAD  most megabytes of gradient partial-sum scratch.
(Their defaults: convnet/params.py. The switches of tests and benchmarks: options.py. Which
kernel computes what, and every device byte: kernel_plan.py.)
None of the three changes the result (plan.py says how), except that MAX BATCH below 256
cases rounds the float32 partial sums differently.

PyCUDA is imported only when a backend is made, so ``import convnet.device`` works without it.
The evaluator (evaluator.py) sequences the launches (launches.py) over a Workspace
(workspace.py); the runtime (runtime.py) owns the context, the stream and the compiled kernels.
"""

import numpy as np

from ..errors import ConvnetError
from ..params import DeviceParams
from . import collect
from .beside import GradientStream
from .conv_patch import ConvPatch
from .conv_tiled_launch import ConvTiled
from .evaluator import DeviceEvaluator, UploadSplit
from .handback import HandBack
from .hostcopy import copy_into
from .kernel_plan import plan_kernels
from .first_layer import FirstGradient, FirstLayerPool
from .launches import (LINE_BLOCK, line_parts, line_point, vec_finish,
                       weights_scatter)
from .options import DeviceOptions, device_params
from .plan import CHUNK, ModelPlan
from .runtime import NULL, DeviceUnavailable, Runtime, device_available, device_report, ptr  # noqa: F401
from .timers import EventTimer

# Share of the free device memory an automatic MAX BATCH may take.
AUTO_BATCH_MEMORY_SHARE = 0.25
# Fewest weights behind the split of a host-weights upload (upload_split): below this the copy
# the split hides costs less than its extra launches and stream synchronisation.
UPLOAD_SPLIT_MIN_TAIL = 65536


def upload_split(arch):
    """Where an evaluation from host weights splits their upload, or None (UploadSplit).

    The weights go up in host order, layer after layer, and a net's largest layer is usually
    near its end (LeNet's fully connected layer holds 93 % of its weights). So the host copies
    and sends the weights before that layer first, the device starts on the first batch's layers
    that need only those, and meanwhile the host copies the rest and a second stream sends,
    rounds and scatters them. The split falls on a whole block of line_point (LINE_BLOCK
    weights), so that the penalty's partial sums, and with them every result, are those of one
    upload."""
    best = None
    for layer in arch.all_layers[1:]:
        if layer.n_weights and (best is None or layer.n_weights > best.n_weights):
            best = layer
    if best is None:
        return None
    weight = -(-best.weight_offset // LINE_BLOCK) * LINE_BLOCK
    if arch.n_weights - weight < UPLOAD_SPLIT_MIN_TAIL:
        return None
    return UploadSplit(best.index, weight)


class DeviceBackend:
    """See the module docstring."""

    def __init__(self, arch, params=DeviceParams(), options=DeviceOptions()):
        params = device_params(params)
        if params.max_batch is not None and params.max_batch < 1:
            raise ConvnetError(f"MAX BATCH must be at least 1, not {params.max_batch}")
        if params.max_hid_grad < 1 or params.max_mem_grad < 1:
            raise ConvnetError("MAX HID GRAD and MAX MEM GRAD must be at least 1")
        self.rt = Runtime.get(options.device)
        self.arch = arch
        self.params = params
        self.options = options
        self.max_batch = params.max_batch
        self.max_hid_grad = params.max_hid_grad
        self.max_mem_grad = params.max_mem_grad
        self.graphs = options.graphs    # replay each evaluation's launches as a CUDA graph
        self.tune = options.tune        # time the candidates of each launch site once
        self.poison = options.poison    # fill new work buffers with NaN (tests)
        # host weights sent in two parts, the second behind the first layers' work (upload_split)
        self.upload_split = upload_split(arch) if options.split_upload else None
        self.plan = ModelPlan(arch)
        self.kernels = plan_kernels(arch, options, self.rt.shared_optin, params.precision)
        self.labels = list(self.kernels.labels)
        self.conv_tiled = {index: ConvTiled(self.rt, variants)
                           for index, variants in self.kernels.tiled.items() if variants.float32}
        passes = 1 if self.kernels.tf32 else 3
        self.conv_patch = {index: ConvPatch(self.rt, v.shape, v.patch, v.patch_delta, passes,
                                            v.pool if index + 1 in self.kernels.conv_pool else None)
                           for index, v in self.kernels.tiled.items()
                           if v.patch or v.patch_delta}
        self.first_pool = (FirstLayerPool(self.rt, arch.layers[0], arch.layers[1],
                                          self.kernels.conv_small[0], self.kernels.pooled_grad)
                           if self.kernels.fused_pool else None)
        self.first_grad = (FirstGradient(self.rt, arch.layers[0]) if self.kernels.first_grad
                           else None)
        self._build_kernels()
        with self.rt.active():
            self.timer = EventTimer(self.rt.cuda, enabled=options.timing,
                                    new_event=getattr(self.rt, "new_event", None))
            self._upload_tables()
            self._allocate_weights()
            for patch in self.conv_patch.values():
                patch.allocate()
            self.gradient_stream = GradientStream(self.rt)
        self.static_bytes = self.kernels.own_bytes()
        self.weight_uploads = 0
        self.last_allocation = None     # lines for CUDA.LOG section 3, from the last evaluator

    def _build_kernels(self):
        """Every kernel this net may launch, built (or read from the cache) in one batch, so
        that the compilations run side by side instead of one by one at first launches."""
        special = [tiled.build_request() for tiled in self.conv_tiled.values()]
        special += [patch.build_request() for patch in self.conv_patch.values()]
        if self.first_pool is not None:
            special += self.first_pool.build_requests()
        if self.first_grad is not None:
            special.append(self.first_grad.build_request())
        self.rt.prepare(self.kernels.kernel_files(), special)

    # the plan's choices, by the names the evaluator and CUDA.LOG read
    conv_small = property(lambda self: self.kernels.conv_small)
    pool_tiles = property(lambda self: self.kernels.pool_tiles)
    conv_pool = property(lambda self: self.kernels.conv_pool)
    fused_pool = property(lambda self: self.kernels.fused_pool)
    fused_pool_gradient = property(lambda self: self.kernels.fused_pool_gradient)
    pooled_grad = property(lambda self: self.kernels.pooled_grad)

    def _upload_tables(self):
        """The descriptors of every gemm_nn launch (one int32 array), the index tables and the
        maps between the host order and the device layouts."""
        rt, lay = self.rt, self.plan.layout
        descs, self.fwd_desc, self.bwd_desc = [], {}, {}
        position = 0
        for lp in self.plan.layers:
            for groups, where in ((lp.fwd, self.fwd_desc), (lp.bwd, self.bwd_desc)):
                if groups is not None:
                    where[lp.index] = position
                    descs.append(groups.desc.ravel())
                    position += groups.desc.size
        desc_arr = np.concatenate(descs).astype(np.int32) if descs else np.zeros(1, np.int32)
        self.d_desc = rt.upload(desc_arr)
        self.d_tables = rt.upload(self.plan.tables)
        self.d_fwd_index = rt.upload(lay.fwd_index.astype(np.int32))
        self.d_bwd_index = rt.upload(lay.bwd_index.astype(np.int32))
        self.d_dev2host = rt.upload(lay.dev_to_host.astype(np.int32))
        self.d_mask = rt.upload(self.arch.penalty_mask().astype(np.uint8))

    def _allocate_weights(self):
        """The weights on the device: float32 in host order and in the two layouts; float64 in
        host order, sent from one page-locked staging buffer (the device rounds them and sums
        their penalty: stage_weights, queue_upload); and the penalty's partial sums."""
        rt, lay = self.rt, self.plan.layout
        self.n_weights = self.arch.n_weights
        self.d_w32 = rt.alloc(4 * self.n_weights)
        self.d_wfwd = rt.alloc(4 * lay.n_fwd)
        self.d_wbwd = rt.alloc(4 * max(lay.n_bwd, 1))
        rt.cuda.memset_d32(self.d_wfwd, 0, lay.n_fwd)
        rt.cuda.memset_d32(self.d_wbwd, 0, max(lay.n_bwd, 1))
        self.h_w64 = rt.cuda.pagelocked_empty(self.n_weights, np.float64)
        self.h_w32 = rt.cuda.pagelocked_empty(self.n_weights, np.float32)
        # the page-locked buffers of gradients handed to the callers of every evaluator here
        # (the gradient, then the scalars fetched with it)
        self.handback = HandBack(lambda size: rt.cuda.pagelocked_empty(size, np.float64),
                                 self.n_weights + 3)
        self.d_w64 = rt.alloc(8 * self.n_weights)
        self.d_pen_part = rt.alloc(8 * line_parts(self.n_weights))
        if self.upload_split is not None:
            # the second part's stream, and the events that order it against the first
            flags = rt.cuda.event_flags.DISABLE_TIMING
            self.upload_stream = rt.cuda.Stream()
            self.before_tail = rt.cuda.Event(flags)
            self.tail_sent = rt.cuda.Event(flags)

    def share_staging(self, buffer):
        """Send the weights from ``buffer`` (page-locked for every context) instead of this
        device's own staging buffer, so that several devices take one host copy."""
        assert buffer.shape == self.h_w64.shape and buffer.dtype == self.h_w64.dtype
        self.h_w64 = buffer

    # ------------------------------------------------------------------ public interface
    def evaluator(self, inputs, classes, wpen=0.0):
        return DeviceEvaluator(self, inputs, classes, wpen)

    def activations(self, weights, inputs):
        ev = DeviceEvaluator(self, inputs, None, 0.0)
        return collect.activations(ev, weights)

    def poolmax_winners(self, weights, inputs):
        ev = DeviceEvaluator(self, inputs, None, 0.0)
        return collect.winners(ev, weights)

    def timings(self):
        return self.timer.table()

    def reset_timings(self):
        self.timer.reset()

    # ------------------------------------------------------------------ internals
    def batch_limit(self, n_cases):
        """The MAX BATCH in force for a data set of n_cases."""
        if self.max_batch is not None:
            return self.max_batch
        per_case = self.kernels.bytes_per_case()
        with self.rt.active():
            free, _ = self.rt.free_memory()
        budget = AUTO_BATCH_MEMORY_SHARE * free
        fit = int(budget // max(per_case, 1))
        if fit >= n_cases:
            return n_cases
        return max(CHUNK, fit // CHUNK * CHUNK)

    def batch_plan(self, n_cases):
        """The batches, launch splits and device buffers of an evaluator of n_cases cases
        (kernel_plan.BatchPlan)."""
        return self.kernels.batch_plan(n_cases, self.batch_limit(n_cases), self.params)

    def _set_weights(self, weights):
        """Send the weights to the device (asynchronous)."""
        self.stage_weights(weights)
        self.queue_upload()

    def stage_weights(self, weights, lo=0, hi=None, rounded=False):
        """Copy the weights (float64, the book's host order; those in lo:hi) into the page-locked
        staging buffer for queue_upload: as they are, or with `rounded` already rounded to
        float32 (numpy rounds to nearest as the device's __double2float_rn does: the same
        bits), half the bytes to write and to send, where no penalty needs them in float64.

        Otherwise the device rounds them and sums their penalty (queue_upload). Either way the
        host makes one copy (in threads when large: hostcopy.py) and no compiled pass, so a GPU
        run never starts the compiler. weights None: the caller staged them already (one buffer
        for several devices: share_staging); only counted."""
        if weights is None:
            self.weight_uploads += lo == 0
            return
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (self.n_weights,):
            raise ConvnetError(f"this model has {self.n_weights} weights; got an array of shape {w.shape}")
        hi = self.n_weights if hi is None else hi
        copy_into((self.h_w32 if rounded else self.h_w64)[lo:hi], w[lo:hi])
        if lo == 0:
            self.weight_uploads += 1

    def queue_upload(self, pen_out=NULL, lo=0, hi=None, mark=True, rounded=False):
        """Send the staged weights (those in lo:hi, lo a multiple of LINE_BLOCK), round them to
        float32 (unless staged `rounded`) and scatter them into the device layouts (asynchronous,
        on rt.stream); pen_out, a device double, receives the sum of the penalised weights'
        squares (line_point's blocks of LINE_BLOCK, then the blocks in order) when given: only
        with every weight sent as float64."""
        rt = self.rt
        hi = self.n_weights if hi is None else hi
        whole = lo == 0 and hi == self.n_weights
        assert lo % LINE_BLOCK == 0 and (whole and not rounded or not int(pen_out))
        if rounded:
            rt.cuda.memcpy_htod_async(int(self.d_w32) + 4 * lo, self.h_w32[lo:hi], rt.stream)
        else:
            rt.cuda.memcpy_htod_async(int(self.d_w64) + 8 * lo, self.h_w64[lo:hi], rt.stream)
            line_point(rt, x=ptr(self.d_w64, lo, 8), d=ptr(self.d_w64, lo, 8), t=NULL, n=hi - lo,
                       mask=ptr(self.d_mask, lo, 1), w32=ptr(self.d_w32, lo),
                       pen_part=ptr(self.d_pen_part, lo // LINE_BLOCK, 8))
        self.queue_scatter(lo, hi, mark)
        self.queue_penalty(pen_out)

    def queue_penalty(self, pen_out):
        """pen_out (a device double, or NULL: nothing) = the penalised weights' sum of squares
        from line_point's partial sums."""
        if int(pen_out):
            vec_finish(self.rt, part=self.d_pen_part, n_parts=line_parts(self.n_weights), k=1,
                       out=pen_out)

    def queue_scatter(self, lo=0, hi=None, mark=True):
        """Scatter the float32 weights in d_w32 (those in lo:hi) into the device layouts
        (asynchronous)."""
        rt = self.rt
        hi = self.n_weights if hi is None else hi
        weights_scatter(rt, w=ptr(self.d_w32, lo), n=hi - lo, fwd_index=ptr(self.d_fwd_index, lo),
                        bwd_index=ptr(self.d_bwd_index, lo), fwd=self.d_wfwd, bwd=self.d_wbwd)
        if mark:
            self.timer.mark(rt.stream, "Device", "weight copy", 1)

    def alloc(self, nbytes):
        """A device buffer for per-evaluator work (NaN-filled when poisoning)."""
        buf = self.rt.alloc(nbytes)
        if self.poison:
            self.rt.cuda.memset_d32(buf, 0x7FC00001, max(int(nbytes), 16) // 4)
        return buf
