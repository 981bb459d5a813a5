"""Mini-batch gradient descent below the trainer: the update rules, the learning-rate schedules,
the order of the cases, and the host's runner of the steps.

A step takes the gradient of the criterion over one batch of cases (the book's criterion on those
cases: their mean negative log likelihood per case and class plus the weight penalty, so batch
and full criteria are on one scale) and moves the weights by the update rule:

    SGD    v = MOMENTUM * v + g;  w -= rate * (g + MOMENTUM * v if NESTEROV else v)
    ADAM   m = b1 * m + (1 - b1) * g;  s = b2 * s + (1 - b2) * g * g;
           w -= rate * (m / (1 - b1^t)) / (sqrt(s / (1 - b2^t)) + epsilon)     (t: 1, 2, ...)

An epoch takes ``n_cases // batch`` whole batches of a permutation of the cases (the trainer
draws it from the run's generator); the few cases left over wait for a later epoch. With AUGMENT
SHIFT = n each case of an epoch is moved by up to n pixels down and across (``draw_shifts``,
``shift_cases``), a new move every epoch. ``rates``
holds the learning rate of every step of the run (``learning_rates``), so the device can read
its step's rate from a table made once.

Every evaluator offers ``minibatches(rule, batch, rates, weights)``: the host's (and any
evaluator's) is :class:`HostMiniBatches`, through ``subset(cases).gradient(w)``, whose sums do not
depend on the thread count; the device keeps the weights and the rule's state on the GPU
(device/minibatch.py) and its update kernel's numpy reference calls :func:`update_weights`.
"""

import math
from dataclasses import dataclass

import numpy as np

SGD, ADAM = "SGD", "ADAM"
CONSTANT, STEP, COSINE, ONE_CYCLE = "CONSTANT", "STEP", "COSINE", "ONE CYCLE"
ONE_CYCLE_RISE = 0.3            # share of the steps over which ONE CYCLE rises to the rate
ONE_CYCLE_START = 1.0 / 25.0    # where it starts, as a share of the rate


@dataclass(frozen=True)
class UpdateRule:
    """How a step moves the weights (see the module notes)."""

    kind: str = SGD
    momentum: float = 0.9
    nesterov: bool = False
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8

    @classmethod
    def from_training(cls, training):
        """The rule of TrainingParams (TRAIN METHOD, MOMENTUM, NESTEROV, ADAM ...)."""
        return cls(training.minibatch_rule, float(training.momentum), training.nesterov == "YES",
                   float(training.beta1), float(training.beta2), float(training.epsilon))

    @property
    def state_vectors(self):
        """Vectors of state beside the weights: SGD's velocity; Adam's two running means."""
        return 2 if self.kind == ADAM else 1


def batch_layout(n_cases, batch_size):
    """(cases per batch, batches per epoch): the batch is at most the cases."""
    batch = max(1, min(int(batch_size), int(n_cases)))
    return batch, int(n_cases) // batch


def learning_rates(rate, schedule, epochs, steps_per_epoch, step_epochs=10, step_factor=0.1):
    """The learning rate of every step of the run, float64 (epochs * steps_per_epoch)."""
    total = epochs * steps_per_epoch
    step = np.arange(total, dtype=np.float64)
    if schedule == CONSTANT:
        return np.full(total, float(rate))
    if schedule == STEP:
        drops = (np.arange(total) // steps_per_epoch) // int(step_epochs)
        return float(rate) * float(step_factor) ** drops.astype(np.float64)
    if schedule == COSINE:
        return float(rate) * 0.5 * (1.0 + np.cos(math.pi * step / total))
    if schedule == ONE_CYCLE:
        rise = max(1, int(round(ONE_CYCLE_RISE * total)))
        up = ONE_CYCLE_START + (1.0 - ONE_CYCLE_START) * step / rise
        fall = 0.5 * (1.0 + np.cos(math.pi * (step - rise) / max(1, total - rise)))
        return float(rate) * np.where(step < rise, up, fall)
    raise ValueError(f"no learning-rate schedule {schedule!r}")


def draw_shifts(rng, n_cases, most):
    """AUGMENT SHIFT: for each position of an epoch, (down, across) moves in -most..most, drawn
    from the run's generator after the epoch's order; None when ``most`` is 0 (nothing drawn,
    so a run without it draws what it always did)."""
    if not most:
        return None
    return rng.integers(-int(most), int(most) + 1, size=(int(n_cases), 2))


def shift_cases(inputs, shifts):
    """Cases (n, bands, rows, cols) each moved down by shifts[i, 0] and across by shifts[i, 1]
    pixels; a pixel moved in from outside repeats the nearest edge pixel."""
    x = np.asarray(inputs)
    n, bands, rows, cols = x.shape
    moves = np.asarray(shifts, dtype=np.int64).reshape(n, 2)
    from_rows = np.clip(np.arange(rows)[None, :] - moves[:, :1], 0, rows - 1)
    from_cols = np.clip(np.arange(cols)[None, :] - moves[:, 1:], 0, cols - 1)
    return x[np.arange(n)[:, None, None, None], np.arange(bands)[None, :, None, None],
             from_rows[:, None, :, None], from_cols[:, None, None, :]]


def update_weights(rule, w, grad, first, second, rate, t):
    """One step of ``rule`` in place: w, and its state first (SGD's velocity, Adam's mean) and
    second (Adam's mean square; unused by SGD), from the batch's gradient; t: the step number,
    1 for the first. Each product and sum rounded on its own, as the device kernel does."""
    if rule.kind == ADAM:
        b1, b2 = rule.beta1, rule.beta2
        first *= b1
        first += (1.0 - b1) * grad
        second *= b2
        second += (1.0 - b2) * (grad * grad)
        mean = first / (1.0 - b1 ** t)
        spread = np.sqrt(second / (1.0 - b2 ** t)) + rule.epsilon
        w -= rate * (mean / spread)
        return
    first *= rule.momentum
    first += grad
    if rule.nesterov:
        w -= rate * (grad + rule.momentum * first)
    else:
        w -= rate * first


class HostMiniBatches:
    """The steps of mini-batch descent on any evaluator: each batch's gradient from
    ``evaluator.subset(batch).gradient(w)`` (its sums independent of the thread count), the
    update in float64 on the host.

        runner.start_epoch(order); while runner.steps_left: runner.step()
        likelihood, w = runner.end_epoch()
    """

    def __init__(self, evaluator, rule, batch_size, rates, weights):
        self.evaluator, self.rule, self.rates = evaluator, rule, np.asarray(rates, np.float64)
        self.batch, self.per_epoch = batch_layout(evaluator.n_cases, batch_size)
        self.w = np.array(weights, dtype=np.float64)
        self.first = np.zeros_like(self.w)
        self.second = np.zeros_like(self.w) if rule.kind == ADAM else None
        self.t = 0                      # steps taken
        self.order, self.shifts, self.position, self.likelihood = None, None, 0, 0.0

    @property
    def steps_left(self):
        """Batches of the current epoch still to take."""
        return 0 if self.order is None else self.per_epoch - self.position

    def start_epoch(self, order, shifts=None):
        """Begin an epoch over the cases in ``order`` (a permutation of the cases), each moved by
        its row of ``shifts`` (draw_shifts; None: as they are)."""
        self.order = np.ascontiguousarray(order, dtype=np.int64)
        self.shifts = shifts
        self.position, self.likelihood = 0, 0.0

    def step(self):
        """One batch: its gradient at the current weights, then the update."""
        first = self.position * self.batch
        cases = self.order[first:first + self.batch]
        if self.shifts is None:
            part = self.evaluator.subset(cases)
        else:
            part = self.evaluator.shifted(cases, self.shifts[first:first + self.batch])
        criterion, grad = part.gradient(self.w)
        self.likelihood += criterion - part.penalty.value(self.w)
        self.t += 1
        update_weights(self.rule, self.w, grad, self.first, self.second,
                       float(self.rates[self.t - 1]), self.t)
        self.position += 1

    def end_epoch(self):
        """(mean likelihood term of the epoch's batches so far, at the weights each was taken
        at; the weights now, a copy)."""
        mean = self.likelihood / self.position if self.position else float("nan")
        self.order = None
        return mean, self.w.copy()

    def penalty(self):
        """The weight penalty at the weights now."""
        return self.evaluator.penalty.value(self.w)

    def weights(self):
        return self.w.copy()
