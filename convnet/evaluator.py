"""The evaluator contract that every backend keeps (host and device alike).

A backend's ``evaluator(inputs, classes, wpen)`` binds a data set once and then answers, for any
weight vector in the book's host order:

* ``criterion(w)``: the mean negative log likelihood per case and class (Equation 1-13, the sum
  times :attr:`Evaluator.scale`) plus the weight penalty;
* ``gradient(w)``: ``(criterion, d criterion / d w)``;
* ``outputs(w)``: the SoftMax outputs, (n_cases, n_classes);
* ``subset(case_indices)``: an evaluator with this same interface over those cases (0-based
  indices into its own cases, in the order given; repeats allowed) of the data already bound:
  the data set is not sent to the backend again and nothing is tuned again (for validation sets
  and mini-batches). Its results are those of a fresh evaluator on those cases;
* ``minibatches(rule, batch_size, rates, weights)``: the steps of mini-batch gradient descent
  (convnet/minibatch.py), on the host through ``subset`` (``shifted`` with AUGMENT SHIFT) unless
  the backend runs them itself.

What is common to every backend lives here, once: the checks of inputs, classes, weights and
the penalty (each failure one :class:`~convnet.errors.ConvnetError`), the scale 1 / (n_cases *
n_classes), and the weight penalty (wpen / n_weights times the sum of the squared weights, biases
excluded; the gradient adds 2 wpen / n_weights times the weight). numpy only.
"""

import numpy as np

from .errors import ConvnetError


# ---------------------------------------------------------------------------------- checks
def check_inputs(arch, inputs):
    """inputs as (n, bands, rows, cols) float64 C-contiguous, or ConvnetError."""
    a = np.asarray(inputs)
    want = (arch.bands, arch.rows, arch.cols)
    if a.ndim != 4 or tuple(a.shape[1:]) != want:
        raise ConvnetError(f"inputs must have shape (n_cases, {want[0]}, {want[1]}, {want[2]}) "
                           f"(cases, bands, rows, cols) for this model, not {tuple(a.shape)}")
    if a.shape[0] < 1:
        raise ConvnetError("there are no cases")
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise ConvnetError(f"inputs must be numbers, not {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.float64)


def check_classes(arch, classes, n_cases):
    """classes as (n,) int64 in 0..n_classes-1, or ConvnetError."""
    c = np.asarray(classes)
    if c.ndim != 1 or c.shape[0] != n_cases:
        raise ConvnetError(f"classes must have shape ({n_cases},), one per case, "
                           f"not {tuple(c.shape)}")
    if not np.issubdtype(c.dtype, np.integer):
        if not np.issubdtype(c.dtype, np.floating) or not np.all(c == np.round(c)):
            raise ConvnetError("classes must be whole numbers (0-based class numbers)")
    c = np.ascontiguousarray(c, dtype=np.int64)
    if c.size and (c.min() < 0 or c.max() >= arch.n_classes):
        raise ConvnetError(f"classes must lie in 0..{arch.n_classes - 1} for this model, "
                           f"found {int(c.min())}..{int(c.max())}")
    return c


def check_cases(case_indices, n_cases):
    """Case indices for a subset as (m,) int64, m >= 1, each in 0..n_cases-1, or ConvnetError."""
    c = np.asarray(case_indices)
    if c.ndim != 1 or c.shape[0] < 1:
        raise ConvnetError(f"a subset needs a list of at least one case index, not an array of "
                           f"shape {tuple(c.shape)}")
    if not np.issubdtype(c.dtype, np.integer):
        raise ConvnetError(f"case indices must be whole numbers, not {c.dtype}")
    c = np.ascontiguousarray(c, dtype=np.int64)
    if c.min() < 0 or c.max() >= n_cases:
        raise ConvnetError(f"case indices must lie in 0..{n_cases - 1}, found "
                           f"{int(c.min())}..{int(c.max())}")
    return c


def check_weights(arch, weights):
    """weights as (n_weights,) float64 C-contiguous, or ConvnetError."""
    w = np.asarray(weights)
    if w.ndim != 1 or w.shape[0] != arch.n_weights:
        raise ConvnetError(f"this model has {arch.n_weights} weights; got an array of shape "
                           f"{tuple(w.shape)}")
    return np.ascontiguousarray(w, dtype=np.float64)


def check_wpen(wpen):
    """The weight penalty as a float >= 0, or ConvnetError."""
    try:
        value = float(wpen)
    except (TypeError, ValueError):
        raise ConvnetError(f"the weight penalty must be a number, not {wpen!r}") from None
    if not value >= 0.0:
        raise ConvnetError(f"the weight penalty must not be negative, not {wpen!r}")
    return value


# ---------------------------------------------------------------------------------- penalty
class WeightPenalty:
    """wpen / n_weights * sum of w^2 over every weight but the biases, and its gradient.

    The sums go through work arrays kept from call to call: on a large net a fresh array per
    evaluation costs about as much as the arithmetic (new memory for the system to map)."""

    def __init__(self, arch, wpen):
        self.wpen = wpen
        self.coefficient = wpen / arch.n_weights
        self.mask = arch.penalty_mask()          # 1.0 for penalised weights, 0.0 for biases
        self.selected = self.mask.astype(bool)
        self._gradient_factor = None             # (2 * coefficient) * mask, made on first use
        self._work = None

    def _scratch(self, size):
        if self._work is None or self._work.size < size:
            self._work = np.empty(size)
        return self._work[:size]

    def value(self, w):
        """The penalty: one pass over the penalised weights (no copy, no BLAS call)."""
        if not self.wpen:
            return 0.0
        from .vectors import selected_sum_of_squares     # compiled: loaded on first use
        w = np.ascontiguousarray(w, dtype=np.float64)
        return self.coefficient * float(selected_sum_of_squares(w, self.selected))

    def gradient(self, w):
        """d penalty / d w, or None when there is no penalty."""
        if self.wpen == 0.0:
            return None
        return self._factor() * w

    def add_gradient(self, w, grad):
        """grad += d penalty / d w, in place (the same values as adding :meth:`gradient`)."""
        if self.wpen == 0.0:
            return
        grad += np.multiply(self._factor(), w, out=self._scratch(self.mask.size))

    def _factor(self):
        if self._gradient_factor is None:
            self._gradient_factor = 2.0 * self.coefficient * self.mask
        return self._gradient_factor


# ---------------------------------------------------------------------------------- the contract
class Evaluator:
    """What every backend's evaluator shares: a checked data set, its scale and its penalty.

    Subclasses call :meth:`bind` first and then implement criterion, gradient and outputs; their
    ``subset`` calls :meth:`bind_subset` on the new evaluator."""

    def bind(self, arch, inputs, classes, wpen):
        """Check the data set and the penalty; returns the inputs as float64 (n, bands, rows,
        cols). classes may be None (outputs only)."""
        x = check_inputs(arch, inputs)
        self.n_cases = x.shape[0]
        self.classes = None if classes is None else check_classes(arch, classes, self.n_cases)
        self.wpen = check_wpen(wpen)
        self.scale = 1.0 / (self.n_cases * arch.n_classes)
        self.penalty = WeightPenalty(arch, self.wpen)
        return x

    def bind_subset(self, arch, parent, case_indices):
        """Take ``parent``'s checked data set restricted to ``case_indices`` (see the module
        notes): its classes, penalty and the scale of the subset's case count, as :meth:`bind`
        would have made them; returns the indices as int64 (into the parent's cases)."""
        cases = check_cases(case_indices, parent.n_cases)
        self.n_cases = cases.shape[0]
        self.classes = None if parent.classes is None else parent.classes[cases]
        self.wpen = parent.wpen
        self.scale = 1.0 / (self.n_cases * arch.n_classes)
        self.penalty = parent.penalty
        return cases

    def shifted(self, case_indices, shifts):
        """An evaluator over the cases ``case_indices``, each moved by its row of ``shifts``
        (minibatch.shift_cases): the host's mini-batch steps with AUGMENT SHIFT. A backend that
        takes the steps on its own device moves the cases there instead."""
        raise ConvnetError("AUGMENT SHIFT is not available with this evaluator")

    def minibatches(self, rule, batch_size, rates, weights):
        """The runner of mini-batch descent's steps from ``weights`` (minibatch.py): here the
        host's, through :meth:`subset`; a backend that keeps the steps on its own device offers
        its own."""
        from .minibatch import HostMiniBatches
        return HostMiniBatches(self, rule, batch_size, rates, weights)

    def need_classes(self):
        """The classes, or ConvnetError when the data set came without them."""
        if self.classes is None:
            raise ConvnetError("the criterion needs the classes of the cases, and there are none")
        return self.classes
