"""The backward pass of a device evaluation: each layer's weight gradient and the delta it
backpropagates, from the output layer down, by the kernel families the plan chose.

A mixin of DeviceEvaluator (evaluator.py), whose buffers (`ws`, `d_acc`), tuner, backend and
`_src` it uses; in a graph recorded untimed, a gradient with a delta after it runs on the
backend's gradient stream, beside that delta (beside.py).
"""

import contextlib

from . import kernel_plan as families
from . import launches
from .launches import EPI_DERIV, EPI_NONE
from .plan import CHUNK
from .runtime import NULL, ptr
from .tensor_rules import pairs_only


class BackwardPass:
    """The gradient and delta launches of one batch (DeviceEvaluator's `_backward`)."""

    _beside = False                     # set while a graph is recorded untimed (_capture)

    def _backward(self, start, stop):
        """The weight gradients and delta backpropagation of one batch, from the output layer
        down, each by the kernel family the plan chose; in a graph recorded untimed, a gradient
        with a delta after it on the gradient stream, beside that delta (beside.py)."""
        b = self.backend
        rt = b.rt
        plan = b.plan
        n_batch = stop - start
        current, other = 0, 1
        side = b.gradient_stream
        for index in range(len(plan.layers) - 1, -1, -1):
            lp = plan.layers[index]
            delta = self.ws.deltas[current]
            family = b.kernels.delta_family(index)
            beside = (self._beside and lp.grad is not None
                      and family not in (None, families.CONV_GRAD_POOLED))
            if lp.grad is not None:
                with side.beside(rt) if beside else contextlib.nullcontext():
                    count = self._gradient(lp, start, n_batch, delta)
                b.timer.mark(rt.stream, b.labels[index], "gradient", count)
            if family is None:
                break
            if family == families.CONV_GRAD_POOLED:
                # the first layer's weight gradient from this pooling layer's deltas (and, for
                # max pooling, its winners); nothing is backpropagated into the first layer
                count = self._gradient(plan.layers[0], start, n_batch, delta)
                b.timer.mark(rt.stream, b.labels[0], "gradient", count)
                break
            self._delta_layer(family, lp, n_batch, delta, self.ws.deltas[other])
            if beside:
                side.join(rt)                   # the next delta overwrites what it reads
            b.timer.mark(rt.stream, b.labels[index - 1], "delta", 1)  # the layer receiving it
            current, other = other, current

    def _delta_layer(self, family, lp, n_batch, delta, out):
        """Backpropagate layer lp's delta into the layer before it (out), by `family`."""
        b = self.backend
        rt = b.rt
        ws = self.ws
        index = lp.index
        prior = b.plan.layers[index - 1]
        prior_act = ws.acts[index - 1] if prior.kind.applies_tanh else NULL
        if family == families.POOL_BACKWARD_TILES:
            pooled = ws.acts[index] if prior.kind.applies_tanh else NULL
            launches.pool_backward_tiles(rt, lp, delta, ws.ids[index], pooled, out, n_batch)
        elif family == families.POOL_BACKWARD:
            launches.pool_backward(rt, lp, prior.nhid, delta, ws.ids.get(index, NULL), prior_act,
                                   out, n_batch)
        else:
            launches.gemm_nn(rt, self.tuner, ("delta", index), src=delta, lda=lp.nhid,
                             tables=b.d_tables, desc=ptr(b.d_desc, b.bwd_desc[index]),
                             groups=lp.bwd, B=ptr(b.d_wbwd, lp.lay.bwd_offset), b_ld=0, M=n_batch,
                             out=out, ldo=prior.nhid, prior=prior_act,
                             epi=EPI_DERIV if prior.kind.applies_tanh else EPI_NONE,
                             tiled=b.conv_tiled.get(index), split=index in b.kernels.split_delta,
                             tf32=b.kernels.tf32, pairs=pairs_only(lp.layer, False),
                             patch=b.conv_patch.get(index))

    def _gradient(self, lp, start, n_batch, delta):
        """Weight gradient of one layer for one batch: partial sums (by the family the plan
        chose), then flatten into acc; the number of launches."""
        split = self.ws.splits[lp.index]
        count = 0
        for slice_lo in range(0, lp.depth, split.slices_per_launch):
            slice_hi = min(lp.depth, slice_lo + split.slices_per_launch)
            self._gradient_partials(lp, start, n_batch, delta, slice_lo, slice_hi)
            count += self._gradient_flatten(lp, n_batch, slice_lo, slice_hi)
        return count

    def _gradient_partials(self, lp, start, n_batch, delta, slice_lo, slice_hi):
        """The partial sums of slices slice_lo:slice_hi of a layer's weight gradient."""
        b = self.backend
        rt = b.rt
        grad = lp.grad
        split = self.ws.splits[lp.index]
        src, lda = self._src(lp.index, start)
        family = b.kernels.gradient_family(lp.index)
        site = ("gradient", lp.index, slice_hi - slice_lo, n_batch)
        if family == families.CONV_GRAD_POOLED:
            b.first_pool.gradient_partials(
                self.tuner, lp, src=src, lda=lda, weights=ptr(b.d_wfwd, lp.lay.fwd_offset),
                delta=delta, ids=self.ws.ids.get(1, NULL),
                pooled=self.ws.acts[1] if lp.kind.applies_tanh else NULL, n_lo=slice_lo,
                n_hi=slice_hi, n_cases=n_batch, chunk=CHUNK, subs=split.slots,
                part=self.ws.scratch)
        elif family == families.CONV_GRAD_FIRST:
            b.first_grad.launch(self.tuner, lp, src=src, lda=lda, weights=NULL, delta=delta,
                                n_lo=slice_lo, n_hi=slice_hi, n_cases=n_batch, chunk=CHUNK,
                                subs=split.slots, part=self.ws.scratch)
        elif family == families.CONV_GRAD:
            launches.conv_grad(
                self.tuner, site, b.conv_tiled[lp.index], src=src, lda=lda, delta=delta,
                ldd=lp.nhid, rows=grad.rows, n_lo=slice_lo, n_hi=slice_hi, n_cases=n_batch,
                chunk=CHUNK, subs=split.slots, part=self.ws.scratch, groups=grad.groups)
        else:
            chunks = -(-n_batch // CHUNK)
            launches.gemm_tn(
                rt, self.tuner, site, split=family == families.GEMM_TN_SPLIT, tf32=b.kernels.tf32,
                src=src, lda=lda, tables=b.d_tables,
                desc=ptr(b.d_desc, b.fwd_desc[lp.index]), delta=delta, ldd=lp.nhid,
                depth=0 if lp.kind.whole_prior else lp.depth, rows=grad.rows, n_lo=slice_lo,
                n_hi=slice_hi, n_cases=n_batch, chunk=CHUNK, groups=grad.groups,
                gps=split.positions_per_slot, slots=split.slots, local_cols=grad.local_cols,
                part=self.ws.scratch, nz=chunks * split.slots)

    def _gradient_flatten(self, lp, n_batch, slice_lo, slice_hi):
        """Add the partial sums of slices slice_lo:slice_hi into acc, in host order (a
        convolutional layer's position ranges or sub-chunks first); the number of launches."""
        b = self.backend
        rt = b.rt
        grad = lp.grad
        split = self.ws.splits[lp.index]
        n_slices = slice_hi - slice_lo
        chunks = -(-n_batch // CHUNK)
        # floats of one partial sum's row: a LOCAL layer keeps every position's columns
        partial_row = grad.groups * n_slices if grad.local_cols else n_slices
        part, n_sums, double_parts = self.ws.scratch, chunks if grad.local_cols \
            else chunks * split.slots, False
        count = 2
        if split.slots > 1 and not grad.local_cols:
            launches.grad_slot_sum(rt, part=self.ws.scratch, slots=split.slots, chunks=chunks,
                                   pstride=grad.rows * partial_row, tot=self.ws.chunk_tot)
            part, n_sums, double_parts = self.ws.chunk_tot, chunks, True
            count += 1
        launches.grad_flatten(rt, double_parts, part=part, n_part=n_sums, rows=grad.rows,
                              pld=partial_row, n_cols=n_slices, n_lo=slice_lo, depth=lp.depth,
                              local_cols=grad.local_cols, ldw=lp.lay.cols,
                              dev_to_host=ptr(b.d_dev2host, lp.lay.fwd_offset), acc=self.d_acc)
        return count
