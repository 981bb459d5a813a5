"""A data set on the device: what runs, in which order, for a criterion, a gradient or the outputs.

The kernels are started through launches.py; the buffers are a Workspace (workspace.py); the
weights and index tables belong to the DeviceBackend (backend.py)."""

from typing import NamedTuple

import numpy as np

from ..evaluator import Evaluator
from . import launches as K
from .graphs import DriverError
from .launches import EPI_DERIV, EPI_NONE, EPI_TANH
from .layout import activations_to_host, image_to_device
from .line import LINE_POINT, DeviceLine, DeviceVectors
from .plan import CHUNK, split_batches
from .runtime import NULL, ptr
from .tuning import Tuner
from .workspace import Workspace, allocation_lines

HOST_WEIGHTS = "host weights"    # _run's weights: sent from the host (DeviceBackend.stage_weights)
# the parts of an evaluation whose host weights go up in two parts (_run_host)
HEAD = "head"                    # the first batch's layers before the split layer
TAIL = "tail"                    # the weights after the split, on the upload stream
REST = "rest"                    # everything after the head


class UploadSplit(NamedTuple):
    """Where host weights are split (backend.upload_split): the first batch's layers before
    `layer` need only the weights before `weight`."""
    layer: int
    weight: int


class DeviceEvaluator(Evaluator):
    """A data set on the device: full-batch criterion, gradient and outputs for any weights
    (the contract in :mod:`convnet.evaluator`)."""

    def __init__(self, backend, inputs, classes, wpen=0.0):
        self.backend = backend
        arch = backend.arch
        x = self.bind(arch, inputs, classes, wpen)
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
            self.d_crit = backend.alloc(8 * 2)                            # and the penalty
            self.d_acc = backend.alloc(8 * backend.n_weights)
            # the gradient, then the log likelihood, the penalty's sum and a line search's slope
            self.d_grad = backend.alloc(8 * (backend.n_weights + 3))
            self.ws = Workspace(backend, self.nb, n)
            self.tuner = Tuner(rt, backend.tune)
            self.h_crit = rt.cuda.pagelocked_empty(2, np.float64)
            self.h_grad = rt.cuda.pagelocked_empty(backend.n_weights + 3, np.float64)
        # launch sequences recorded as CUDA graphs, by (kind, timed, upload): see _run
        self.graphs = {}
        self.use_graphs = backend.graphs and getattr(rt, "can_capture", False)
        self._ran = set()
        self.line_state = None          # the buffers of line searches on the device, made on first use
        self._vectors = None
        data_bytes = 4 * n * plan.n_inputs + 4 * n + 8 * n * ncls + 8 * n + 40 + 16 * backend.n_weights
        self.allocation = allocation_lines(backend, self.ws, n, self.nb, len(self.batches), data_bytes)
        backend.last_allocation = self.allocation

    # ------------------------------------------------------------------ public
    def criterion(self, weights):
        b = self.backend
        self.need_classes()
        with b.rt.active():
            b.timer.start(b.rt.stream)
            b.last_allocation = self.allocation
            self._run_host("criterion", weights, self._criterion_launches,
                           pen_out=ptr(self.d_crit, 1, 8))
            crit = self._read(self.h_crit, 0)
            pen = float(self.h_crit[1])
            b.timer.resolve()
        return crit / (self.n_cases * b.arch.n_classes) + self._penalty(pen)

    def gradient(self, weights):
        b = self.backend
        rt = b.rt
        self.need_classes()
        with rt.active():
            b.timer.start(rt.stream)
            b.last_allocation = self.allocation
            if self.line_state is not None:
                self.line_state.latest = None           # d_grad is about to change
            self._run_host("gradient", weights, self._gradient_launches,
                           pen_out=ptr(self.d_grad, b.n_weights + 1, 8))
            crit = self._read(self.h_grad, b.n_weights)
            pen = float(self.h_grad[b.n_weights + 1])
            b.timer.resolve()
            grad = np.array(self.h_grad[:b.n_weights])
        return crit * self.scale + self._penalty(pen), grad

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

    def _run_host(self, kind, weights, launches, pen_out):
        """Queue one evaluation at host weights (launches(part) queues the launches of a part,
        or of all with part None); pen_out receives the penalty's sum of squares.

        With the backend's upload_split the weights go in two parts: the host stages the first
        part, the device sends it and starts on the HEAD launches; meanwhile the host stages the
        rest, and a second stream sends, rounds and scatters it; the REST launches wait for that
        stream. So the host's copy and the transfer of the larger part are hidden behind the
        first layers. The same kernels add in the same order: the results are the same bits."""
        b = self.backend
        rt = b.rt
        split = b.upload_split
        if split is None or b.timer.host_sync or rt.trace is not None:
            b.stage_weights(weights)
            self._run(kind, HOST_WEIGHTS, launches, pen_out)
            return
        lo, n = split.weight, b.n_weights
        b.stage_weights(weights, 0, lo)
        b.before_tail.record(rt.stream)     # earlier evaluations' reads of these weights are done
        self._queue((kind, HEAD), lambda: (b.queue_upload(NULL, 0, lo), launches(HEAD)))
        b.stage_weights(weights, lo, n)
        side = b.upload_stream
        side.wait_for_event(b.before_tail)
        # no timing marks on that stream: CUDA.LOG's table follows the main stream, where the
        # tail costs only what the REST launches wait for it (counted in the next activity)
        with rt.on_stream(side):
            self._queue((kind, TAIL), lambda: b.queue_upload(NULL, lo, n, mark=False))
        b.tail_sent.record(side)
        rt.stream.wait_for_event(b.tail_sent)
        self._queue((kind, REST), lambda: (b.queue_penalty(pen_out), launches(REST)))

    def _run(self, kind, upload, launches, pen_out=NULL):
        """Queue one evaluation: the weights (upload: HOST_WEIGHTS for the staged ones, whose
        penalty sum goes to pen_out, or LINE_POINT to form a line search's trial point here) and
        the launches."""
        b = self.backend

        def record():
            if upload == LINE_POINT:
                self.line_state.queue_point()
            else:
                b.queue_upload(pen_out)
            launches()

        self._queue((kind, upload), record)

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
            try:
                graph = rt.capture(record)
            except DriverError:
                b.timer.end_capture()
                self.use_graphs = False         # this driver cannot: stay with plain launches
                record()
                return
            entry = self.graphs[key, timed] = (graph, b.timer.end_capture())
        graph, marks = entry
        graph.launch(rt.stream)
        b.timer.replayed(marks)

    def _criterion_launches(self, part=None):
        self._forwards(part, want_delta=False)
        if part != HEAD:
            self._queue_ll()

    def _gradient_launches(self, part=None):
        b = self.backend
        rt = b.rt
        self._gradient_sums(part)
        if part != HEAD:
            rt.cuda.memcpy_dtoh_async(self.h_grad, self.d_grad, rt.stream)
            b.timer.mark(rt.stream, "Device", "gradient fetch", 1)

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
        K.grad_finish(rt, acc=self.d_acc, w=b.d_w32, mask=b.d_mask, n=b.n_weights, scale=scale,
                      pen2=pen2, grad=self.d_grad)
        # the log likelihood goes after the gradient, so that one copy fetches both
        K.ll_sum(rt, ll=self.d_ll, n=self.n_cases, out=ptr(self.d_grad, b.n_weights, 8))
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
        K.ll_sum(rt, ll=self.d_ll, n=self.n_cases, out=self.d_crit)
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
        included; end None: through the output layer and its softmax)."""
        b = self.backend
        rt = b.rt
        plan = b.plan
        ws = self.ws
        nb = stop - start
        first = fused and b.fused_pool and (b.fused_pool_gradient or not want_delta)
        conv_pool = b.conv_pool if fused else set()
        for lp in plan.layers[begin:end]:
            li = lp.index
            src, lda = self._src(li, start)
            if (first and li == 1) or li in conv_pool:
                continue                        # computed with the layer before it
            if first and li == 0:
                # the winners only where a gradient will route deltas through them
                b.first_pool.launch(self.tuner, lp, src, lda, nb, ptr(b.d_wfwd, lp.lay.fwd_offset),
                                    ws.acts[1], ws.ids[1] if want_delta else NULL)
            elif not lp.kind.has_weights:
                K.pool_forward(rt, lp, src, ws.acts[li], ws.ids.get(li, NULL), nb)
            elif li in b.conv_small:
                K.conv_small(rt, lp, src, lda, nb, ptr(b.d_wfwd, lp.lay.fwd_offset), ws.acts[li],
                             b.conv_small[li])
            else:
                pooled = li + 1 in conv_pool
                # a forward-only evaluation's pooling needs no winners (its own tuning site)
                site = ("forward values", li) if pooled and not want_delta else ("forward", li)
                K.gemm_nn(rt, self.tuner, site, src=src, lda=lda, tables=b.d_tables,
                          desc=ptr(b.d_desc, b.fwd_desc[li]), groups=lp.fwd,
                          B=ptr(b.d_wfwd, lp.lay.fwd_offset), b_ld=lp.lay.cols, M=nb,
                          out=ws.acts[li], ldo=lp.nhid, prior=NULL,
                          epi=EPI_NONE if lp.is_output else EPI_TANH,
                          tiled=b.conv_tiled.get(li),
                          pool=(plan.layers[li + 1], ws.acts[li + 1],
                                ws.ids[li + 1] if want_delta else NULL) if pooled else None)
            b.timer.mark(rt.stream, b.labels[li], "forward", 1)
        if end is not None:
            return
        ncls = plan.n_classes
        K.softmax_ll(rt, logits=ws.acts[-1], ncls=ncls, nb=nb, classes=ptr(self.d_classes, start),
                     probs=ptr(self.d_probs, start * ncls, 8), ll=ptr(self.d_ll, start, 8),
                     delta=ws.deltas[0] if want_delta else NULL)
        b.timer.mark(rt.stream, "Output", "softmax", 1)

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
            if li == 1 and b.pooled_grad:
                # the first layer's weight gradient from this pooling layer's deltas and winners;
                # nothing is backpropagated into the first layer
                launches = self._gradient(plan.layers[0], start, nb, ws.deltas[cur], pooled=True)
                b.timer.mark(rt.stream, b.labels[0], "gradient", launches)
                break
            prior = plan.layers[li - 1]
            prior_act = ws.acts[li - 1] if prior.kind.applies_tanh else NULL
            if li in b.pool_tiles:
                pooled = ws.acts[li] if prior.kind.applies_tanh else NULL
                K.pool_backward_tiles(rt, lp, ws.deltas[cur], ws.ids[li], pooled, ws.deltas[other],
                                      nb)
            elif not lp.kind.has_weights:
                K.pool_backward(rt, lp, prior.nhid, ws.deltas[cur], ws.ids.get(li, NULL), prior_act,
                                ws.deltas[other], nb)
            else:
                K.gemm_nn(rt, self.tuner, ("delta", li), src=ws.deltas[cur], lda=lp.nhid,
                          tables=b.d_tables, desc=ptr(b.d_desc, b.bwd_desc[li]), groups=lp.bwd,
                          B=ptr(b.d_wbwd, lp.lay.bwd_offset), b_ld=0, M=nb, out=ws.deltas[other],
                          ldo=prior.nhid, prior=prior_act,
                          epi=EPI_DERIV if prior.kind.applies_tanh else EPI_NONE,
                          tiled=b.conv_tiled.get(li))
            b.timer.mark(rt.stream, b.labels[li - 1], "delta", 1)    # the layer that receives it
            cur, other = other, cur

    def _gradient(self, lp, start, nb, delta, pooled=False):
        """Weight gradient of one layer for one batch: partial sums, then flatten into acc.
        pooled: the first layer's, from the pooling layer's delta (conv_grad_pooled)."""
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
            tiled = b.conv_tiled.get(lp.index)
            if pooled:
                K.conv_grad_pooled(rt, lp, b.arch.layers[1], src=src, lda=lda, delta=delta,
                                   ids=self.ws.ids[1],
                                   pooled=self.ws.acts[1] if lp.kind.applies_tanh else NULL,
                                   n_lo=n_lo, n_hi=n_hi, n_cases=nb, chunk=CHUNK, subs=slots,
                                   part=self.ws.scratch)
            elif tiled is not None and tiled.grad:
                K.conv_grad(self.tuner, ("gradient", lp.index, NL, nb), tiled, src=src, lda=lda,
                            delta=delta, ldd=lp.nhid, rows=R, n_lo=n_lo, n_hi=n_hi, n_cases=nb,
                            chunk=CHUNK, subs=slots, part=self.ws.scratch, groups=gp.groups)
            else:
                K.gemm_tn(rt, self.tuner, ("gradient", lp.index, NL, nb), src=src, lda=lda,
                          tables=b.d_tables, desc=ptr(b.d_desc, b.fwd_desc[lp.index]), delta=delta,
                          ldd=lp.nhid, depth=0 if lp.kind.whole_prior else lp.depth, rows=R, n_lo=n_lo,
                          n_hi=n_hi, n_cases=nb, chunk=CHUNK, groups=gp.groups, gps=gps, slots=slots,
                          local_cols=gp.local_cols, part=self.ws.scratch, nz=nz)
            pld = gp.groups * NL if gp.local_cols else NL
            total = R * pld
            part, n_sum, double_parts = self.ws.scratch, n_part, False
            if slots > 1 and not gp.local_cols:
                # a convolutional layer: add each chunk's position ranges (conv_grad: sub-chunks) first
                K.grad_slot_sum(rt, part=self.ws.scratch, slots=slots, chunks=chunks, pstride=total,
                                tot=self.ws.chunk_tot)
                part, n_sum, double_parts = self.ws.chunk_tot, chunks, True
                launches += 1
            K.grad_flatten(rt, double_parts, part=part, n_part=n_sum, rows=R, pld=pld, n_cols=NL,
                           n_lo=n_lo, depth=lp.depth, local_cols=gp.local_cols, ldw=lay.cols,
                           dev_to_host=ptr(b.d_dev2host, lay.fwd_offset), acc=self.d_acc)
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
               for lp in plan.hidden if lp.kind.keeps_winners}

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
