"""Mini-batch gradient descent kept on the device (the runner of convnet/minibatch.py).

The training cases are on the device already (the evaluator's d_x). A step is one launch
sequence, recorded once as a CUDA graph and replayed for every step:

    minibatch_gather   the batch's cases and classes, by the epoch's order, into the buffers of
                       an evaluator of one batch (DeviceEvaluator.subset made once); with
                       AUGMENT SHIFT minibatch_gather_shifted, which moves each case too
    ...                that evaluator's gradient launches (the same kernels as any gradient)
    minibatch_update   the update rule on the float64 weights and its state, and the float32
                       weights for the layouts
    minibatch_advance  the step counters, and the epoch's summed log likelihood
    weights_scatter    the float32 weights into the device layouts

Where the step is (in the run: its learning rate, Adam's t; in the epoch: its cases) is read
from counters on the device, so the graph is the same for every step. The host sends the
epoch's order (a permutation of the cases, 4 bytes a case; and 8 bytes a case of moves with
AUGMENT SHIFT) at the start of each epoch and reads
the epoch's likelihood and the weights at its end; between those it only launches the graph.
"""

import numpy as np

from ..minibatch import ADAM, batch_layout
from . import launches as K
from .runtime import NULL, ptr
from .tuning import Tuner

TUNE_OWN = True                 # the batch's launch sites timed for it (False: the leader's choices)
STEP = "mini-batch step"        # the key of the step's graph (DeviceEvaluator._queue)


class DeviceMiniBatches:
    """The runner of minibatch.HostMiniBatches' interface, on the device."""

    def __init__(self, evaluator, rule, batch_size, rates, weights):
        self.evaluator, self.rule = evaluator, rule
        b = self.backend = evaluator.backend
        rt = b.rt
        n = self.n = b.n_weights
        self.batch, self.per_epoch = batch_layout(evaluator.n_cases, batch_size)
        # an evaluator of one batch: its buffers and launch plan; gather fills its cases. Its
        # launch sites get a tuner of their own: the training set's has timed its sites for
        # thousands of cases (and its gradient sites not at all after a criterion-only
        # annealing), so its choices fit a batch badly
        self.part = evaluator.subset(np.arange(self.batch))
        if TUNE_OWN:
            self.part.tuner = Tuner(rt, b.tune)
        with rt.active():
            self.d_w = b.alloc(8 * n)
            self.d_first = b.alloc(8 * n)
            self.d_second = b.alloc(8 * n) if rule.kind == ADAM else self.d_first
            self.d_rates = rt.upload(np.ascontiguousarray(rates, dtype=np.float64))
            self.d_counters = b.alloc(8)
            self.d_epoch_ll = b.alloc(8)
            self.d_penalty = b.alloc(8)
            self.h_penalty = rt.cuda.pagelocked_empty(1, np.float64)
            self.d_order = b.alloc(4 * evaluator.n_cases)
            self.h_order = rt.cuda.pagelocked_empty(evaluator.n_cases, np.int32)
            self.h_epoch_ll = rt.cuda.pagelocked_empty(1, np.float64)
            self.h_w = rt.cuda.pagelocked_empty(n, np.float64)
            rt.cuda.memcpy_htod(self.d_w, np.ascontiguousarray(weights, dtype=np.float64))
            rt.cuda.memset_d32(self.d_first, 0, 2 * n)
            if rule.kind == ADAM:
                rt.cuda.memset_d32(self.d_second, 0, 2 * n)
            rt.cuda.memset_d32(self.d_counters, 0, 2)
        self.d_shifts = None            # the moves of the epoch's cases (AUGMENT SHIFT)
        self.position = 0
        self.in_epoch = False
        evaluator.allocation.append(f"Mini-batch descent on the device: weights and "
                                    f"{rule.state_vectors} state vectors, {8 * n * (1 + rule.state_vectors) / 2**20:.1f} MB")

    @property
    def steps_left(self):
        return self.per_epoch - self.position if self.in_epoch else 0

    def start_epoch(self, order, shifts=None):
        """Send the epoch's order (and the moves of its cases, AUGMENT SHIFT), zero the epoch's
        counter and sum, and round the weights into the layouts again (another evaluation
        between epochs may have sent its own)."""
        b = self.backend
        rt = b.rt
        self.h_order[:] = np.asarray(order, dtype=np.int64)
        with rt.active():
            rt.cuda.memcpy_htod_async(self.d_order, self.h_order, rt.stream)
            if shifts is not None:
                self._send_shifts(shifts)
            rt.cuda.memset_d32_async(int(ptr(self.d_counters, 1)), 0, 1, rt.stream)
            rt.cuda.memset_d32_async(self.d_epoch_ll, 0, 2, rt.stream)
            self._round_weights()
            b.queue_scatter(mark=False)
        self.position, self.in_epoch = 0, True

    def _send_shifts(self, shifts):
        """The epoch's moves, two per position; the first epoch with moves makes their buffer
        (before the first step, so the captured step reads it every epoch)."""
        rt = self.backend.rt
        if self.d_shifts is None:
            n = self.evaluator.n_cases
            self.d_shifts = self.backend.alloc(8 * n)
            self.h_shifts = rt.cuda.pagelocked_empty(2 * n, np.int32)
        self.h_shifts[:] = np.asarray(shifts, dtype=np.int64).ravel()
        rt.cuda.memcpy_htod_async(self.d_shifts, self.h_shifts, rt.stream)

    def _round_weights(self):
        """Queue the float64 weights' rounding to float32 (d_w32) and the penalty's partial sums
        of their squares (d_pen_part), as an upload of host weights does."""
        b = self.backend
        K.line_point(b.rt, x=self.d_w, d=self.d_w, t=NULL, n=self.n, mask=b.d_mask,
                     w32=b.d_w32, pen_part=b.d_pen_part)

    def step(self):
        """Queue one step (the graph; the first step runs its launches as they are)."""
        with self.backend.rt.active():
            self.part._queue((STEP,), self._record)
        self.position += 1

    def _record(self):
        ev, part, b = self.evaluator, self.part, self.backend
        rt = b.rt
        if self.d_shifts is None:
            K.minibatch_gather(rt, x=ev.d_x, classes=ev.d_classes, order=self.d_order,
                               counters=self.d_counters, batch=self.batch,
                               n_inputs=b.plan.n_inputs, xb=part.d_x, cb=part.d_classes)
        else:
            arch = b.arch
            K.minibatch_gather_shifted(rt, x=ev.d_x, classes=ev.d_classes, order=self.d_order,
                                       shifts=self.d_shifts, counters=self.d_counters,
                                       batch=self.batch, rows=arch.rows, cols=arch.cols,
                                       bands=arch.bands, xb=part.d_x, cb=part.d_classes)
        part._gradient_sums()
        K.minibatch_update(rt, w=self.d_w, grad=part.d_grad, first=self.d_first,
                           second=self.d_second, rates=self.d_rates, counters=self.d_counters,
                           n=self.n, rule=self.rule, w32=b.d_w32)
        K.minibatch_advance(rt, counters=self.d_counters, ll=ptr(part.d_grad, self.n, 8),
                            epoch_ll=self.d_epoch_ll)
        b.queue_scatter(mark=False)

    def end_epoch(self):
        """(mean likelihood term of the epoch's batches, the weights now): one wait, two
        copies."""
        rt = self.backend.rt
        with rt.active():
            rt.cuda.memcpy_dtoh_async(self.h_epoch_ll, self.d_epoch_ll, rt.stream)
            rt.cuda.memcpy_dtoh_async(self.h_w, self.d_w, rt.stream)
            rt.stream.synchronize()
        steps = self.position
        self.in_epoch = False
        mean = float(self.h_epoch_ll[0]) * self.part.scale / steps if steps else float("nan")
        return mean, np.array(self.h_w)

    def penalty(self):
        """The weight penalty at the weights now, summed on the device (a GPU run never loads
        the host's compiled sums)."""
        ev, b = self.evaluator, self.backend
        if not ev.wpen:
            return 0.0
        rt = b.rt
        with rt.active():
            self._round_weights()
            b.queue_penalty(self.d_penalty)
            rt.cuda.memcpy_dtoh_async(self.h_penalty, self.d_penalty, rt.stream)
            rt.stream.synchronize()
        return ev._penalty(float(self.h_penalty[0]))

    def weights(self):
        rt = self.backend.rt
        with rt.active():
            rt.cuda.memcpy_dtoh_async(self.h_w, self.d_w, rt.stream)
            rt.stream.synchronize()
        return np.array(self.h_w)
