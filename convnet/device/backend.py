"""The CUDA compute path: PyCUDA kernels (kernels/*.cu), float32 on the device.

    backend = DeviceBackend(arch, params={"MAX BATCH": ..., "MAX HID GRAD": ..., "MAX MEM GRAD": ...},
                            device=0)                # the CUDA device's index
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
(Their defaults: the parameter table in convnet/control.py.)
None of the three changes the result (plan.py says how), except that MAX BATCH below 256
cases rounds the float32 partial sums differently.

PyCUDA is imported only when a backend is made, so ``import convnet.device`` works without it.
The evaluator (evaluator.py) sequences the launches (launches.py) over a Workspace
(workspace.py); the runtime (runtime.py) owns the context, the stream and the compiled kernels.
"""

import numpy as np

from ..control import DEFAULT_PARAMETERS
from ..errors import ConvnetError
from .conv_tiled import GRAD_SUBS, SMEM_BYTES, ConvTiled
from .evaluator import DeviceEvaluator, UploadSplit
from .launches import (CONV_SMALL_FLOATS, CONV_SMALL_SLICES, CONV_SMALL_THREADS, LINE_BLOCK,
                       POOLED_GRAD_SUBS, FirstLayerPool, conv_grad_pooled_shape, line_parts,
                       line_point, vec_finish, weights_scatter, windows_tile)
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

    def __init__(self, arch, params=None, timing=True, poison=False, tune=True, fuse=True, device=0,
                 graphs=True, tiled=True, pool_tiles=True, pooled_grad=True, pool_epilogue=True,
                 split_upload=True):
        self.rt = Runtime.get(device)
        self.graphs = graphs        # replay each evaluation's launches as a CUDA graph (evaluator.py)
        # host weights sent in two parts, the second behind the first layers' work (upload_split)
        self.upload_split = upload_split(arch) if split_upload else None
        self.tune = tune            # time the tile shapes of each product once per evaluator
        self.poison = poison        # tests: fill new work buffers with NaN to catch unwritten outputs
        self.arch = arch
        params = dict(params or {})
        mb = params.get("MAX BATCH")
        self.max_batch = None if mb is None else int(mb)
        self.max_hid_grad = int(params.get("MAX HID GRAD") or DEFAULT_PARAMETERS["MAX HID GRAD"])
        self.max_mem_grad = int(params.get("MAX MEM GRAD") or DEFAULT_PARAMETERS["MAX MEM GRAD"])
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
            if lp.kind.shares_weights and lp.depth <= CONV_SMALL_SLICES:
                width = -(-lp.depth // 4) * 4
                if lp.rows * width <= CONV_SMALL_FLOATS:
                    self.conv_small[lp.index] = width
        # Max-pooling layers whose windows tile their prior layer backpropagate with
        # pool_backward_tiles (a thread per pooled neuron); pool_tiles=False keeps pool_backward.
        self.pool_tiles = {lp.index for lp in self.plan.hidden
                           if pool_tiles and not lp.kind.has_weights
                           and windows_tile(lp.layer, lp.kind)}
        # Convolutional layers whose activation or delta backpropagation conv_tiled.cu can also
        # compute (the tuner chooses; tiled=False keeps them with the gather product alone). A
        # conv_small layer's activation stays with conv_small. A layer conv_grad fits takes its
        # weight gradient from conv_grad alone (its own order of additions; grad_slots).
        # Such a pooling layer after a tiled CONV layer is also computed in the epilogue of the
        # layer's forward variants, timed against the gather product followed by pool_forward
        # (conv_pool; pool_epilogue=False: never), since its activation and winners are all that
        # the rest of an evaluation reads.
        self.conv_tiled = {}
        self.conv_pool = set()
        for lp in self.plan.hidden:
            if tiled and lp.kind.shares_weights:
                nxt = lp.index + 1
                pool = None
                if pool_epilogue and nxt in self.pool_tiles:
                    spec = arch.layers[nxt].spec
                    pool = (spec.width_v, spec.width_h)
                ct = ConvTiled(self.rt, lp.layer, lp.lay.cols, pool=pool)
                if lp.index in self.conv_small:
                    ct.fwd = {}
                if ct.fwd or ct.bwd or ct.grad:
                    self.conv_tiled[lp.index] = ct
                if ct.fwd and pool:
                    self.conv_pool.add(nxt)
        # A conv_small first layer followed by max pooling with stride = width is computed
        # together with the pooling in forward-only evaluations (criterion, outputs): only the
        # pooled values and winners are written. Gradients use it too when the windows tile the
        # layer exactly (fused_pool_gradient): pool_backward_tiles then needs nothing but the
        # pooled values and winners, so the first layer's full-size activations are never
        # written. Otherwise gradients compute the layers one by one (pool_backward reads the
        # prior activations; a gradient reading its delta from the pooled layer's was tried: the
        # per-element work in its loader cost more than the pooling kernels it saved).
        self.fused_pool = False
        layers = arch.layers
        if fuse and 0 in self.conv_small and len(layers) > 1 and layers[1].kind.keeps_winners:
            s = layers[1].spec
            smem = 4 * (self.plan.layers[0].rows * self.conv_small[0]
                        + 2 * CONV_SMALL_THREADS * layers[0].depth)
            if s.stride_v == s.width_v and s.stride_h == s.width_h and smem <= SMEM_BYTES:
                self.fused_pool = True
        self.first_pool = (FirstLayerPool(self.rt, layers[0], layers[1], self.conv_small[0])
                           if self.fused_pool else None)
        self.fused_pool_gradient = self.fused_pool and 1 in self.pool_tiles
        # Such a first layer then takes its weight gradient straight from the pooling layer's
        # deltas and winners (conv_grad_pooled: only the winners' windows, in its own order of
        # additions), and the pooling layer backpropagates nothing; pooled_grad=False keeps
        # pool_backward_tiles and gemm_tn.
        self.pooled_grad = False
        if pooled_grad and self.fused_pool_gradient:
            lp0 = self.plan.layers[0]
            shape = conv_grad_pooled_shape(lp0.layer, layers[1], lp0.depth)
            self.pooled_grad = shape is not None and shape[2] <= SMEM_BYTES
        rt = self.rt
        with rt.active():
            self.timer = EventTimer(rt.cuda, enabled=timing,
                                    new_event=getattr(rt, "new_event", None))
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
            # the weights go up as they are (float64, one page-locked staging buffer); the device
            # rounds them to float32 and sums their penalty (stage_weights, queue_upload)
            self.h_w64 = rt.cuda.pagelocked_empty(self.n_weights, np.float64)
            self.d_w64 = rt.alloc(8 * self.n_weights)
            self.d_pen_part = rt.alloc(8 * line_parts(self.n_weights))
            if self.upload_split is not None:
                # the second part's stream, and the events that order it against the first
                flags = rt.cuda.event_flags.DISABLE_TIMING
                self.upload_stream = rt.cuda.Stream()
                self.before_tail = rt.cuda.Event(flags)
                self.tail_sent = rt.cuda.Event(flags)
            self.static_bytes = (desc_arr.nbytes + self.plan.tables.nbytes + 4 * 3 * self.n_weights
                                 + 4 * lay.n_fwd + self.n_weights + 16 * self.n_weights
                                 + 8 * line_parts(self.n_weights)
                                 + 4 * lay.n_fwd + 4 * max(lay.n_bwd, 1))
        self.weight_uploads = 0
        self.last_allocation = None     # lines for CUDA.LOG section 3, from the last evaluator

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

    def grad_slots(self, lp, n_total):
        """(positions per partial sum, partial sums per chunk of cases) of a layer's weight
        gradient: conv_grad's or conv_grad_pooled's sub-chunks over every position, or gemm_tn's
        position ranges."""
        ct = self.conv_tiled.get(lp.index)
        if lp.index == 0 and self.pooled_grad:
            return lp.grad.groups, POOLED_GRAD_SUBS
        if ct is not None and ct.grad:
            return lp.grad.groups, GRAD_SUBS
        return lp.grad.slots_for(n_total)

    def bytes_per_case(self):
        """Device bytes per case of a batch: activations, max-pooling winners, delta, scratch."""
        p = self.plan
        floats = sum(lp.nhid for lp in p.layers) + 2 * p.max_nhid + p.n_classes
        ints = sum(lp.nhid for lp in p.layers if lp.kind.keeps_winners)
        scratch = max([lp.grad.scratch_floats(CHUNK, lp.depth, self.grad_slots(lp, CHUNK)[1]) / CHUNK
                       for lp in p.layers if lp.grad is not None] + [0])
        return 4 * (floats + ints + p.n_inputs + scratch) + 8 * (1 + p.n_classes)

    def _set_weights(self, weights):
        """Send the weights to the device (asynchronous)."""
        self.stage_weights(weights)
        self.queue_upload()

    def stage_weights(self, weights, lo=0, hi=None):
        """Copy the weights (float64, the book's host order; those in lo:hi) into the page-locked
        staging buffer for queue_upload.

        The device computes in float32, but the rounding and the penalty's sum happen there
        (queue_upload): the host makes one copy and no compiled pass, so a GPU run never starts
        the compiler."""
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (self.n_weights,):
            raise ConvnetError(f"this model has {self.n_weights} weights; got an array of shape {w.shape}")
        hi = self.n_weights if hi is None else hi
        np.copyto(self.h_w64[lo:hi], w[lo:hi])
        if lo == 0:
            self.weight_uploads += 1

    def queue_upload(self, pen_out=NULL, lo=0, hi=None, mark=True):
        """Send the staged weights (those in lo:hi, lo a multiple of LINE_BLOCK), round them to
        float32 and scatter them into the device layouts (asynchronous, on rt.stream); pen_out, a
        device double, receives the sum of the penalised weights' squares (line_point's blocks of
        LINE_BLOCK, then the blocks in order) when given: only with every weight sent."""
        rt = self.rt
        hi = self.n_weights if hi is None else hi
        assert lo % LINE_BLOCK == 0 and (lo == 0 and hi == self.n_weights or not int(pen_out))
        n = hi - lo
        rt.cuda.memcpy_htod_async(int(self.d_w64) + 8 * lo, self.h_w64[lo:hi], rt.stream)
        line_point(rt, x=ptr(self.d_w64, lo, 8), d=ptr(self.d_w64, lo, 8), t=NULL, n=n,
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
