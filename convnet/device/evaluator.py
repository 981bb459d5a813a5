"""A data set on the device: what runs, in which order, for a criterion, a gradient or the outputs.

The kernels are started through launches.py; the backward pass's launches are BackwardPass's
(backward.py); the buffers are a Workspace (workspace.py); the weights and index tables belong to
the DeviceBackend (backend.py)."""

from typing import NamedTuple

import numpy as np

from ..errors import ConvnetError
from ..evaluator import Evaluator
from . import kernel_plan as families
from . import launches
from .backward import BackwardPass
from .graphs import DriverError
from .hostcopy import copied
from .launches import EPI_NONE, EPI_TANH
from .layout import image_to_device
from .line import LINE_POINT, DeviceLine, DeviceVectors
from .runtime import NULL, ptr
from .tensor_rules import pairs_only
from .tuning import Tuner
from .workspace import Workspace, allocation_lines

HOST_WEIGHTS = "host weights"    # _run's weights: sent from the host (DeviceBackend.stage_weights)
ROUNDED = "rounded"              # ... rounded to float32 by the host (no penalty to sum)
# the parts of an evaluation whose host weights go up in two parts (_run_host)
HEAD = "head"                    # the first batch's layers before the split layer
TAIL = "tail"                    # the weights after the split, on the upload stream
REST = "rest"                    # everything after the head


def _runs(indices):
    """(start, stop, position) of each run of consecutive indices: indices[position:position +
    stop - start] == range(start, stop)."""
    breaks = np.flatnonzero(np.diff(indices) != 1) + 1
    bounds = np.concatenate([[0], breaks, [indices.size]])
    return [(int(indices[a]), int(indices[a]) + int(b - a), int(a))
            for a, b in zip(bounds[:-1], bounds[1:])]


class UploadSplit(NamedTuple):
    """Where host weights are split (backend.upload_split): the first batch's layers before
    `layer` need only the weights before `weight`."""
    layer: int
    weight: int


class DeviceEvaluator(BackwardPass, Evaluator):
    """A data set on the device: full-batch criterion, gradient and outputs for any weights
    (the contract in :mod:`convnet.evaluator`)."""

    def __init__(self, backend, inputs, classes, wpen=0.0):
        self.backend = backend
        x = self.bind(backend.arch, inputs, classes, wpen)
        rt = backend.rt
        # (MAX BATCH automatic: from the free memory before the data go up)
        self.batch_plan = backend.batch_plan(self.n_cases)
        with rt.active():
            self.d_x = rt.upload(image_to_device(x))
            cls = np.zeros(self.n_cases, np.int32) if self.classes is None \
                else self.classes.astype(np.int32)
            self.d_classes = rt.upload(cls)
        self._prepare(Tuner(rt, backend.tune))

    def _prepare(self, tuner):
        """The buffers of this evaluator's cases and batches (d_x, d_classes and batch_plan
        made)."""
        backend = self.backend
        rt = backend.rt
        n = self.n_cases
        n_classes = backend.plan.n_classes
        # the criterion's mean is over this many cases: another count when this evaluator holds
        # one device's part of a data set split across devices (multi.py)
        self.mean_over_cases = n
        self.batches = self.batch_plan.batches
        self.nb = self.batch_plan.batch_cases
        with rt.active():
            self.d_probs = backend.alloc(8 * n * n_classes)
            self.d_ll = backend.alloc(8 * n)
            self.d_crit = backend.alloc(8 * 2)                            # and the penalty
            self.d_acc = backend.alloc(8 * backend.n_weights)
            # the gradient, then the log likelihood, the penalty's sum and a line search's slope
            self.d_grad = backend.alloc(8 * (backend.n_weights + 3))
            self.ws = Workspace(backend, self.batch_plan)
            self.tuner = tuner
            self.h_crit = rt.cuda.pagelocked_empty(2, np.float64)
            self.h_grad = rt.cuda.pagelocked_empty(backend.n_weights + 3, np.float64)
        self._handed = None             # the backend's handback buffer of the gradient in flight
        # launch sequences recorded as CUDA graphs, by (evaluation, timed, upload): see _run
        self.graphs = {}
        self.use_graphs = backend.graphs and getattr(rt, "can_capture", False)
        self._ran = set()
        self.line_state = None          # the buffers of line searches on the device, made on first use
        self._vectors = None
        self.allocation = allocation_lines(backend, self.batch_plan)
        backend.last_allocation = self.allocation

    def subset(self, case_indices):
        """An evaluator over some of these cases (indices into them, in the order given), with
        the same weight penalty: the cases are copied on the device (no upload), and its launch
        sites take the tile shapes this evaluator's tuner chose (no timing). Its results are
        those of a fresh evaluator over the same cases, bit for bit: the same batches, kernels
        and order of additions."""
        indices = np.asarray(case_indices)
        if indices.ndim != 1 or indices.size == 0:
            raise ConvnetError("a subset needs a list of at least one case")
        if not np.issubdtype(indices.dtype, np.integer):
            raise ConvnetError("subset case indices must be whole numbers")
        indices = indices.astype(np.int64)
        if indices.min() < 0 or indices.max() >= self.n_cases:
            raise ConvnetError(f"subset case indices must lie in 0..{self.n_cases - 1}")
        part = DeviceEvaluator.__new__(DeviceEvaluator)
        part.backend = backend = self.backend
        part.n_cases = int(indices.size)
        part.classes = None if self.classes is None else self.classes[indices]
        part.wpen = self.wpen
        part.scale = 1.0 / (part.n_cases * backend.arch.n_classes)
        part.penalty = self.penalty
        part.batch_plan = backend.batch_plan(part.n_cases)
        rt = backend.rt
        n_inputs = backend.plan.n_inputs
        with rt.active():
            part.d_x = rt.alloc(4 * part.n_cases * n_inputs)
            part.d_classes = rt.alloc(4 * part.n_cases)
            for start, stop, first in _runs(indices):
                count = stop - start
                # PyCUDA's copies take Python ints as addresses
                rt.cuda.memcpy_dtod_async(int(ptr(part.d_x, first * n_inputs)),
                                          int(ptr(self.d_x, start * n_inputs)),
                                          4 * count * n_inputs, rt.stream)
                rt.cuda.memcpy_dtod_async(int(ptr(part.d_classes, first)),
                                          int(ptr(self.d_classes, start)), 4 * count, rt.stream)
        part._prepare(self.tuner.follower())
        return part

    # ------------------------------------------------------------------ public
    def criterion(self, weights):
        self.queue_criterion(weights)()
        return self.finish_criterion()

    def queue_criterion(self, weights):
        """Queue a criterion at host weights without waiting for it (finish_criterion waits);
        returns the callable that queues its second part (_run_host_head: weights None, staged
        by the caller)."""
        b = self.backend
        self.need_classes()
        with b.rt.active():
            b.timer.start(b.rt.stream)
            b.last_allocation = self.allocation
            return self._run_host_head("criterion", weights, self._criterion_launches,
                                       pen_out=ptr(self.d_crit, 1, 8))

    def finish_criterion(self):
        b = self.backend
        with b.rt.active():
            crit = self._read(self.h_crit, 0)
            pen = float(self.h_crit[1])
            b.timer.resolve()
        return crit / (self.mean_over_cases * b.arch.n_classes) + self._penalty(pen)

    def gradient(self, weights):
        """(criterion, gradient), the gradient a page-locked buffer handed over as it is
        (handback.py), or a copy while the caller holds every such buffer."""
        self.queue_gradient(weights, hand_back=True)()
        crit, grad = self.finish_gradient()
        buffer, self._handed = self._handed, None
        if buffer is None:
            return crit, copied(grad)
        return crit, self.backend.handback.hand_out(buffer, self.backend.n_weights)

    def queue_gradient(self, weights, hand_back=False):
        """Queue a gradient at host weights without waiting for it (finish_gradient waits);
        returns the callable that queues its second part (as queue_criterion) and the fetch,
        into one of the handback's buffers when hand_back and one is free."""
        b = self.backend
        rt = b.rt
        self.need_classes()
        with rt.active():
            b.timer.start(rt.stream)
            b.last_allocation = self.allocation
            if self.line_state is not None:
                self.line_state.latest = None           # d_grad is about to change
            if self._handed is not None:                # taken by an evaluation that failed
                self.backend.handback.give_back(self._handed)
            self._handed = self.backend.handback.take() if hand_back else None
            rest = self._run_host_head("gradient", weights, self._gradient_sums,
                                       pen_out=ptr(self.d_grad, b.n_weights + 1, 8))

        def rest_and_fetch():
            rest()
            with rt.active():
                rt.cuda.memcpy_dtoh_async(self._fetched_into, self.d_grad, rt.stream)
                b.timer.mark(rt.stream, "Device", "gradient fetch", 1)
        return rest_and_fetch

    @property
    def _fetched_into(self):
        """The page-locked buffer the queued gradient is fetched into."""
        return self.h_grad if self._handed is None else self._handed

    def mean_over(self, n_cases):
        """Divide the criterion and the gradient by ``n_cases`` cases (and the classes) instead of
        this evaluator's own count: one device's part of a data set split across devices."""
        self.mean_over_cases = n_cases
        self.scale = 1.0 / (n_cases * self.backend.arch.n_classes)

    def finish_gradient(self):
        """Wait for the queued gradient: (criterion, gradient), the gradient a view of the
        page-locked buffer it was fetched into (the evaluator's own, which the next gradient
        overwrites, or the handback's that gradient() hands over)."""
        b = self.backend
        host = self._fetched_into
        with b.rt.active():
            crit = self._read(host, b.n_weights)
            pen = float(host[b.n_weights + 1])
            b.timer.resolve()
        return crit * self.scale + self._penalty(pen), host[:b.n_weights]

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

    def line(self, x, d):
        """The line search's trial points x + t * d, formed and evaluated on the device (see
        line.py); the optimizer's ``line`` (convnet.train.conjgrad.HostLine)."""
        return DeviceLine(self, x, d)

    def minibatches(self, rule, batch_size, rates, weights):
        """Mini-batch descent with the weights, the rule's state and the steps on the device
        (device/minibatch.py)."""
        from .minibatch import DeviceMiniBatches
        return DeviceMiniBatches(self, rule, batch_size, rates, weights)

    @property
    def vectors(self):
        """The refinement's vectors kept on the device (line.py); the optimizer's ``vectors``."""
        if self._vectors is None:
            self._vectors = DeviceVectors(self)
        return self._vectors

    # ------------------------------------------------------------------ internals
    def _penalty(self, sum_of_squares):
        """The penalty from the device's sum of the penalised weights' squares."""
        return self.penalty.coefficient * sum_of_squares if self.wpen else 0.0

    def _run_host(self, evaluation, weights, queue_launches, pen_out):
        """Queue one evaluation at host weights (queue_launches(part) queues the launches of a part,
        or of all with part None); pen_out receives the penalty's sum of squares."""
        self._run_host_head(evaluation, weights, queue_launches, pen_out)()

    def head_weights(self):
        """How many weights (from the first) the first part of an evaluation at host weights
        sends: those to stage before _run_host_head; the rest before the callable it returns."""
        b = self.backend
        if b.upload_split is None or b.timer.host_sync or b.rt.trace is not None:
            return b.n_weights
        return b.upload_split.weight

    def _run_host_head(self, evaluation, weights, queue_launches, pen_out):
        """Queue the first part of an evaluation at host weights; returns the callable that
        queues the rest (weights None: staged by the caller, head_weights() of them now, the
        rest before that callable is called).

        With the backend's upload_split the weights go in two parts: the host stages the first
        part, the device sends it and starts on the HEAD launches; meanwhile the host stages the
        rest, and a second stream sends, rounds and scatters it; the REST launches wait for that
        stream. So the host's copy and the transfer of the larger part are hidden behind the
        first layers. The same kernels add in the same order: the results are the same bits.
        Without a penalty the host rounds the weights to float32 as it stages them (rounded)."""
        b = self.backend
        rt = b.rt
        lo, n = self.head_weights(), b.n_weights
        rounded = weights is not None and not self.wpen
        if rounded:
            evaluation, pen_out = (evaluation, ROUNDED), NULL
        if lo == n:
            b.stage_weights(weights, rounded=rounded)
            self._run(evaluation, HOST_WEIGHTS, queue_launches, pen_out, rounded)
            return lambda: None
        b.stage_weights(weights, 0, lo, rounded)
        b.before_tail.record(rt.stream)     # earlier evaluations' reads of these weights are done
        self._queue((evaluation, HEAD),
                    lambda: (b.queue_upload(NULL, 0, lo, rounded=rounded), queue_launches(HEAD)))

        def rest():
            with rt.active():
                b.stage_weights(weights, lo, n, rounded)
                side = b.upload_stream
                side.wait_for_event(b.before_tail)
                # no timing marks on that stream: CUDA.LOG's table follows the main stream,
                # where the tail costs only what the REST launches wait for it
                with rt.on_stream(side):
                    self._queue((evaluation, TAIL),
                                lambda: b.queue_upload(NULL, lo, n, False, rounded))
                b.tail_sent.record(side)
                rt.stream.wait_for_event(b.tail_sent)
                self._queue((evaluation, REST),
                            lambda: (b.queue_penalty(pen_out), queue_launches(REST)))
        return rest

    def _run(self, evaluation, upload, queue_launches, pen_out=NULL, rounded=False):
        """Queue one evaluation: the weights (upload: HOST_WEIGHTS for the staged ones, whose
        penalty sum goes to pen_out, or LINE_POINT to form a line search's trial point here) and
        the launches."""
        b = self.backend

        def record():
            if upload == LINE_POINT:
                self.line_state.queue_point()
            else:
                b.queue_upload(pen_out, rounded=rounded)
            queue_launches()

        self._queue((evaluation, upload), record)

    def _queue(self, key, record):
        """Queue record()'s copies and launches (on rt.stream). The first time they run as they
        are (so the tuner can time its candidates); after that each variant (timed or not) is
        recorded once as a CUDA graph, and the graph is launched instead."""
        b = self.backend
        rt = b.rt
        timed = b.timer.enabled and b.timer._start is not None
        if not self.use_graphs or b.timer.host_sync or rt.trace is not None or key not in self._ran:
            record()
            self._ran.add(key)
            return
        entry = self.graphs.get((key, timed))
        if entry is None:
            b.timer.begin_capture()
            graph = self._capture(record, beside=not timed)
            if graph is None:
                b.timer.end_capture()
                self.use_graphs = False         # this driver cannot: stay with plain launches
                record()
                return
            entry = self.graphs[key, timed] = (graph, b.timer.end_capture())
        graph, marks = entry
        graph.launch(rt.stream)
        b.timer.replayed(marks)

    def _capture(self, record, beside):
        """record() as a CUDA graph, or None where the driver refuses; with `beside`, its
        gradients beside the deltas (beside.py)."""
        self._beside = beside
        try:
            return self.backend.rt.capture(record)
        except DriverError:
            return None
        finally:
            self._beside = False

    def _criterion_launches(self, part=None):
        self._forwards(part, want_delta=False)
        if part != HEAD:
            self._queue_ll()

    def _gradient_sums(self, part=None):
        """Queue a gradient: d_grad[:n] the gradient, d_grad[n] the summed log likelihood (part:
        see _forwards)."""
        b = self.backend
        rt = b.rt
        if part != REST:
            rt.cuda.memset_d32_async(self.d_acc, 0, 2 * b.n_weights, rt.stream)
        self._forwards(part, want_delta=True, after=self._backward)
        if part == HEAD:
            return
        scale = self.scale
        pen2 = 2.0 * self.penalty.coefficient          # d penalty / d w = pen2 * w
        launches.grad_finish(rt, acc=self.d_acc, w=b.d_w32, mask=b.d_mask, n=b.n_weights, scale=scale,
                      pen2=pen2, grad=self.d_grad)
        # the log likelihood goes after the gradient, so that one copy fetches both
        launches.ll_sum(rt, ll=self.d_ll, n=self.n_cases, out=ptr(self.d_grad, b.n_weights, 8))
        b.timer.mark(rt.stream, "Output", "log likelihood", 1)

    def _forwards(self, part, want_delta, after=None):
        """The forward launches of every batch, each followed by after(start, stop) when given;
        or a part of them (_run_host): HEAD, the first batch's layers before the upload's split
        layer; REST, all the others."""
        split = self.backend.upload_split.layer if part is not None else None
        for i, (start, stop) in enumerate(self.batches):
            if part == HEAD:
                self._forward(start, stop, want_delta, end=split)
                return
            self._forward(start, stop, want_delta, begin=split if part == REST and i == 0 else 0)
            if after is not None:
                after(start, stop)

    def _queue_ll(self):
        rt = self.backend.rt
        launches.ll_sum(rt, ll=self.d_ll, n=self.n_cases, out=self.d_crit)
        rt.cuda.memcpy_dtoh_async(self.h_crit, self.d_crit, rt.stream)
        self.backend.timer.mark(rt.stream, "Output", "log likelihood", 1)

    def _read(self, host, i):
        """Wait for the evaluation, then the float64 value host[i] (the summed log likelihood)."""
        self.backend.rt.stream.synchronize()
        return float(host[i])

    def _src(self, li, start):
        """(pointer, row length) of the activations feeding layer li for the batch at start."""
        plan = self.backend.plan
        if li == 0:
            return ptr(self.d_x, start * plan.n_inputs), plan.n_inputs
        return ptr(self.ws.acts[li - 1]), plan.layers[li - 1].nhid

    def _forward(self, start, stop, want_delta, fused=True, begin=0, end=None):
        """The forward launches of one batch; fused=False computes every layer on its own (to
        read back every activation). begin, end: only the layers from begin up to end (not
        included; end None: through the output layer and its softmax). Which kernel family
        computes each layer is the kernel plan's choice."""
        b = self.backend
        rt = b.rt
        n_batch = stop - start
        for lp in b.plan.layers[begin:end]:
            family = b.kernels.forward_family(lp.index, fused, want_delta)
            if family == families.WITH_PRIOR:
                continue                        # computed with the layer before it
            self._forward_layer(family, lp, start, n_batch, want_delta, fused)
            b.timer.mark(rt.stream, b.labels[lp.index], "forward", 1)
        if end is not None:
            return
        ws = self.ws
        n_classes = b.plan.n_classes
        launches.softmax_ll(rt, logits=ws.acts[-1], ncls=n_classes, nb=n_batch,
                            classes=ptr(self.d_classes, start),
                            probs=ptr(self.d_probs, start * n_classes, 8),
                            ll=ptr(self.d_ll, start, 8),
                            delta=ws.deltas[0] if want_delta else NULL)
        b.timer.mark(rt.stream, "Output", "softmax", 1)

    def _forward_layer(self, family, lp, start, n_batch, want_delta, fused):
        """One layer's activation for one batch, by the kernel family the plan chose."""
        b = self.backend
        rt = b.rt
        ws = self.ws
        index = lp.index
        src, lda = self._src(index, start)
        weights = ptr(b.d_wfwd, lp.lay.fwd_offset) if lp.lay is not None else NULL
        if family == families.CONV_SMALL_POOL:
            # the winners only where a gradient will route deltas through them
            b.first_pool.launch(self.tuner, lp, src, lda, n_batch, weights, ws.acts[1],
                                ws.ids.get(1, NULL) if want_delta else NULL)
        elif family == families.POOL_FORWARD:
            launches.pool_forward(rt, lp, src, ws.acts[index], ws.ids.get(index, NULL), n_batch)
        else:
            # a conv_small layer's direct kernel: a candidate beside the products
            def direct():
                launches.conv_small(rt, lp, src, lda, n_batch, weights, ws.acts[index],
                                    b.kernels.conv_small[index])
            pooled = b.kernels.pools_in_epilogue(index, fused)
            following = index + 1
            # a forward-only evaluation's pooling needs no winners (its own tuning site)
            site = ("forward values", index) if pooled and not want_delta else ("forward", index)
            launches.gemm_nn(
                rt, self.tuner, site, src=src, lda=lda, tables=b.d_tables,
                desc=ptr(b.d_desc, b.fwd_desc[index]), groups=lp.fwd, B=weights,
                b_ld=lp.lay.cols, M=n_batch, out=ws.acts[index], ldo=lp.nhid, prior=NULL,
                epi=EPI_NONE if lp.is_output else EPI_TANH, tiled=b.conv_tiled.get(index),
                pool=(b.plan.layers[following], ws.acts[following],
                      ws.ids[following] if want_delta else NULL) if pooled else None,
                split=index in b.kernels.split_forward, tf32=b.kernels.tf32,
                patch=b.conv_patch.get(index),
                direct=direct if family == families.CONV_SMALL else None,
                pairs=pairs_only(lp.layer, forward=True))
