"""Mini-batch gradient descent as a phase of TRAIN (TRAIN METHOD = SGD or ADAM).

The phase starts from the previous phase's weights (annealing's best point: with ANNEAL ITERS = 0
just its one random start) and takes EPOCHS passes over the training cases, each in a new order
drawn from the run's generator, in whole batches of BATCH SIZE cases (convnet/minibatch.py says
how a step moves the weights). One step is one batch, so a Ctrl-C ends the phase between two
batches, with the weights of the last step.

Each epoch writes a line to CONVNET.LOG and a point of the trace: the mean criterion of its
batches, each taken at the weights the batch's gradient was taken at (the likelihood term, the
batch's mean per case and class), plus the weight penalty of the weights the epoch ended with.
The model holds the weights of the last finished epoch; the phase's result is its last epoch.
Every epoch's end is a check point of the validation checks (train/validation.py): VALIDATION
INTERVAL counts epochs, and an EARLY STOP ends the phase at an epoch's end.

AUGMENT SHIFT = n moves each case of an epoch by up to n pixels down and across (minibatch.py:
the moves are drawn after the epoch's order, from the same generator).

AVERAGE EPOCHS = n (stochastic weight averaging) keeps the float64 sum of the weights at the ends
of the last n epochs; the phase then ends at their mean, not at the last epoch's weights, and its
result is the full criterion there (one evaluation more, logged). A phase that stops before its
last epoch (Ctrl-C, EARLY STOP) averages the epochs of the window it reached; one epoch or none in
the window leaves the last epoch's weights.
"""

import time

import numpy as np

from ..errors import ConvnetError
from ..minibatch import ADAM, UpdateRule, batch_layout, draw_shifts, learning_rates
from .phase import LINE, Phase, PhaseResult, format_criterion, log_interruption

# Most steps in one TRAIN: the learning rate of every step is a table made once (8 bytes a step),
# and the device counts steps in 32 bits.
MAX_STEPS = 1 << 26

STOP_WORDS = {"epochs": "the epochs were done", "interrupted": "the user interrupted it"}


class MiniBatchPhase(Phase):
    """Mini-batch gradient descent, SGD or Adam by TRAIN METHOD (see the module notes)."""

    unit, chart = "epoch", LINE

    def __init__(self, training):
        self.training = training
        self.rule = UpdateRule.from_training(training)
        adam = self.rule.kind == ADAM
        self.name = "adam" if adam else "sgd"
        self.label = "Adam" if adam else "SGD"
        self.title = "Mini-batch descent (" + ("Adam)" if adam else "SGD with momentum)")
        self.limit = int(training.epochs)
        self.average_from = self.limit - min(int(training.average_epochs), self.limit) + 1
        self.runner = None

    @property
    def done(self):
        return self.interrupted or self.epoch >= self.limit

    def start(self, context, weights):
        t = self.training
        self.context = context
        ev = context.evaluator
        if weights is None:
            weights = context.model.weights.copy()
        self.batch, self.per_epoch = batch_layout(ev.n_cases, t.batch_size)
        if self.limit * self.per_epoch > MAX_STEPS:
            raise ConvnetError(f"EPOCHS = {self.limit} of {self.per_epoch} batches is "
                               f"{self.limit * self.per_epoch} steps; at most {MAX_STEPS} are "
                               "taken in one TRAIN (fewer EPOCHS or a larger BATCH SIZE)")
        self.rates = learning_rates(t.rate, t.lr_schedule, self.limit, self.per_epoch,
                                    t.lr_step_epochs, t.lr_step_factor)
        self.runner = ev.minibatches(self.rule, self.batch, self.rates, weights)
        self.epoch, self.interrupted, self.steps = 0, False, 0
        self.trace, self.seconds, self.epoch_rates = [], [], []
        self.weights = weights
        self.weight_sum, self.averaged, self.average_taken = None, 0, False
        self._log_start(ev.n_cases)

    def _log_start(self, n_cases):
        t, rule = self.training, self.rule
        how = (f"betas {rule.beta1:g}, {rule.beta2:g}, epsilon {rule.epsilon:g}"
               if rule.kind == ADAM else
               f"momentum {rule.momentum:g}{' (Nesterov)' if rule.nesterov else ''}")
        self.context.log.write(
            f"{self.title}: {self.limit} epochs of {self.per_epoch} batches of {self.batch} "
            f"cases ({n_cases} cases), learning rate {t.rate:g} ({t.lr_schedule.lower()}), "
            f"{how}")
        if t.augment_shift:
            self.context.log.write(f"   each case moved by up to {t.augment_shift} pixels down and "
                                   "across, anew every epoch (AUGMENT SHIFT)")
        if self.average_from < self.limit:          # a window of two epochs or more
            self.context.log.write(f"   ending at the mean weights of epochs {self.average_from} "
                                   f"to {self.limit} (AVERAGE EPOCHS)")

    def step(self):
        if not self.runner.steps_left:
            rng, n_cases = self.context.rng, self.context.evaluator.n_cases
            order = rng.permutation(n_cases)
            self.runner.start_epoch(order, draw_shifts(rng, n_cases, self.training.augment_shift))
            self.t0 = time.perf_counter()
        self.runner.step()
        self.steps += 1
        if not self.runner.steps_left:
            self._end_epoch()

    def _end_epoch(self):
        likelihood, w = self.runner.end_epoch()
        criterion = likelihood + self.runner.penalty()
        self.epoch += 1
        self.weights = w
        self.context.model.weights = w
        self._add_to_average(w)
        seconds = time.perf_counter() - self.t0
        self.trace.append((self.epoch, float(criterion)))
        self.seconds.append(seconds)
        self.epoch_rates.append(float(self.rates[self.steps - 1]))
        self.context.log.write(f"Epoch {self.epoch} criterion = {format_criterion(criterion)} "
                               f"learning rate = {self.epoch_rates[-1]:.4g} "
                               f"({seconds:.2f} s)")
        self.context.report(self, self.epoch, criterion, criterion)
        self.context.validate(self, self.epoch)

    def _add_to_average(self, w):
        if self.epoch < self.average_from:
            return
        if self.weight_sum is None:
            self.weight_sum = np.zeros_like(w, dtype=np.float64)
        self.weight_sum += w
        self.averaged += 1

    def _end_at_average(self):
        """AVERAGE EPOCHS: the mean of the window's epochs becomes the phase's weights and its
        full criterion the phase's result (None when there is nothing to average)."""
        if self.averaged < 2:
            return None
        w = self.weight_sum / self.averaged
        criterion = float(self.context.evaluator.criterion(w))
        self.weights = w
        self.context.model.weights = w
        self.average_taken = True
        self.context.weights_replaced()
        self.context.log.write(f"Mean weights of epochs {self.average_from} to "
                               f"{self.average_from + self.averaged - 1}: criterion = "
                               f"{format_criterion(criterion)}")
        return criterion

    def evaluations_made(self):
        return self.steps + int(self.average_taken)

    def interrupt(self):
        """End at once: a partly done epoch counts as one (its batches so far)."""
        if self.runner.steps_left and self.runner.position:
            self._end_epoch()
        self.interrupted = True

    def finish(self):
        criterion = self.trace[-1][1] if self.trace else None
        averaged = self._end_at_average()
        evaluations = {"gradient": self.steps}
        if averaged is not None:
            criterion = averaged
            evaluations["criterion"] = 1
        stop = "interrupted" if self.interrupted else "epochs"
        return PhaseResult(self.name, self.title, self.unit, self.chart, list(self.trace),
                           criterion, self.epoch, self.limit, self.interrupted, stop,
                           STOP_WORDS[stop], evaluations=evaluations,
                           figures={"learning_rate": list(self.epoch_rates),
                                    "epoch_seconds": list(self.seconds)},
                           weights=self.weights)

    def log_result(self, log, result):
        if result.interrupted:
            log_interruption(log)
        log.write(f"{self.label}: {result.steps} epochs ({result.evaluations['gradient']} "
                  f"mini-batch gradients), {result.seconds:.2f} seconds, ended because "
                  f"{result.stop_words}")
