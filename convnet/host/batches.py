"""The host's mini-batch gradients: one batch after another, in buffers kept from batch to batch.

``subset(cases).gradient(w)`` makes for every batch a new evaluator, its blocks and chunks, the
chunks' partial gradients (chunks x weights of fresh memory) and a gathered copy of each block's
inputs; for batches of tens of cases that costs about as much as the arithmetic
(benchmarks/NOTES.md, mini-batch training). :class:`BatchGradients` is made once for a batch size:
each batch's inputs and classes are gathered into arrays of its own, and one job of the backend
(its blocks, chunks and partial gradients) is run again for every batch. The blocks and chunks are
those of any computation on that many cases and the sums are added in the same order, so the
results are those of ``subset(cases).gradient(w)`` to the last bit, whatever the thread count.
"""

import numpy as np

from ..errors import ConvnetError
from ..evaluator import check_cases, check_weights
from .threads import single_threaded_blas


class BatchGradients:
    """``gradients(cases, w) -> (criterion, gradient)`` for batches of ``batch_size`` cases of a
    host evaluator (0-based indices of its cases). The gradient is a buffer of this object,
    overwritten by the next call."""

    def __init__(self, evaluator, batch_size):
        backend = evaluator.backend
        self.evaluator, self.backend, self.size = evaluator, backend, int(batch_size)
        self.inputs = np.empty((self.size,) + evaluator.inputs.shape[1:])
        self.classes = np.empty(self.size, dtype=np.int64)
        self.job = backend.gradient_job(self.inputs, self.classes)
        self.grad = np.empty(backend.arch.n_weights)
        self.scale = 1.0 / (self.size * backend.arch.n_classes)     # as subset's evaluator's

    def __call__(self, case_indices, weights):
        ev = self.evaluator
        cases = check_cases(case_indices, ev.n_cases)
        if cases.shape[0] != self.size:
            raise ConvnetError(f"a batch of {cases.shape[0]} cases was given to the gradients "
                               f"of batches of {self.size}")
        np.take(ev.need_classes(), cases, out=self.classes)
        rows = cases if ev.cases is None else ev.cases[cases]     # rows of ev.inputs
        np.take(ev.inputs, rows, axis=0, out=self.inputs)
        w = check_weights(self.backend.arch, weights)
        with single_threaded_blas():
            self.job.w = w
            self.backend.execute(self.job)
            grad = self.job.gradient_sum(out=self.grad)
            grad *= self.scale
            ev.penalty.add_gradient(w, grad)
            return self.job.total() * self.scale + ev.penalty.value(w), grad
