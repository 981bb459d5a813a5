"""The numpy reference of minibatch.cu: the batch's cases gathered by the epoch's order (and
moved, AUGMENT SHIFT), the update rule's step (convnet/minibatch.py's update_weights itself),
and the counters' advance."""

import numpy as np

from ...minibatch import ADAM, SGD, UpdateRule, shift_cases, update_weights
from .host_memory import ReferenceBase


class MiniBatchReference(ReferenceBase):
    """See the module docstring."""

    def _batch(self, x, classes, order, counters, batch, n_inputs, cb):
        """The step's cases (the epoch's position counters[1] of ``order``) and their inputs;
        their classes go to cb. Returns (step, cases, inputs (batch, n_inputs))."""
        step = int(self.mem.view(counters, np.int32, 2)[1])
        cases = self.mem.view(order, np.int32, (step + 1) * batch)[step * batch:].astype(np.int64)
        self.mem.view(cb, np.int32, batch)[:] = self.gather(classes, np.int32, cases)
        return step, cases, self.gather(x, np.float32, cases[:, None] * n_inputs + np.arange(n_inputs))

    def minibatch_gather(self, grid, block, x, classes, order, counters, batch, n_inputs, xb, cb):
        assert grid[0] * block[0] >= batch * n_inputs
        _, _, rows = self._batch(x, classes, order, counters, batch, n_inputs, cb)
        self.mem.view(xb, np.float32, batch * n_inputs)[:] = rows.ravel()

    def minibatch_gather_shifted(self, grid, block, x, classes, order, shifts, counters, batch,
                                 rows, cols, bands, xb, cb):
        n_inputs = rows * cols * bands
        assert grid[0] * block[0] >= batch * n_inputs
        step, _, images = self._batch(x, classes, order, counters, batch, n_inputs, cb)
        moves = self.mem.view(shifts, np.int32, 2 * (step + 1) * batch)[2 * step * batch:]
        # the device's layout (row, column, band) as the host's (band, row, column) and back
        host = images.reshape(batch, rows, cols, bands).transpose(0, 3, 1, 2)
        moved = shift_cases(host, moves.reshape(batch, 2).astype(np.int64))
        self.mem.view(xb, np.float32, batch * n_inputs)[:] = moved.transpose(0, 2, 3, 1).ravel()

    def minibatch_update(self, grid, block, w, grad, first, second, rates, counters, n, adam,
                         momentum, nesterov, beta1, beta2, epsilon, w32):
        assert grid[0] * block[0] >= n
        step = int(self.mem.view(counters, np.int32, 2)[0])
        rule = UpdateRule(ADAM if adam else SGD, momentum, bool(nesterov), beta1, beta2, epsilon)
        wv = self.mem.view(w, np.float64, n)
        state2 = self.mem.view(second, np.float64, n) if adam else None
        update_weights(rule, wv, self.mem.view(grad, np.float64, n).copy(),
                       self.mem.view(first, np.float64, n), state2,
                       float(self.mem.view(rates, np.float64, step + 1)[step]), step + 1)
        self.mem.view(w32, np.float32, n)[:] = wv.astype(np.float32)

    def minibatch_advance(self, grid, block, counters, ll, epoch_ll):
        c = self.mem.view(counters, np.int32, 2)
        c += 1
        self.mem.view(epoch_ll, np.float64, 1)[0] += self.mem.view(ll, np.float64, 1)[0]
