"""TRAIN and TEST: the book's four training phases, their CONVNET.LOG lines, and Ctrl-C.

TRAIN (book p.158-159) runs the phases of its training method (phase.py: the driver here owns the
loop, Ctrl-C, timing, progress and each phase's result lines), then two short steps of its own:
  1. Simulated annealing for starting weights (anneal.py): ANNEAL ITERS criterion evaluations.
  2. Conjugate-gradient refinement (conjgrad.py) until MAXITERS iterations or convergence (TOL).
  3. A final pass over the data with the best weights: the criterion that is reported.
  4. The confusion matrix of the training data (confusion.py).
Phases 1 and 2 are the book's method (BOOK_METHOD); another method is another list of phases
(METHODS, by TRAIN METHOD: SGD and ADAM anneal, then take mini-batch steps, minibatch.py; SGD CG
and ADAM CG refine their end by conjugate gradients).

The criterion everywhere in TRAIN is the one being minimized: the mean negative log likelihood per
case and class (Equation 1-13) plus the weight penalty WPEN / n_weights * (sum of squared non-bias
weights); that is what the book's two result lines print. TEST reports the same likelihood term
without any penalty (the penalty is a training device; a test set measures fit only), so a TEST of
the training data with WPEN = 0 gives exactly TRAIN's final criterion.

Ctrl-C (the original's Escape key). The session counts presses in ``interrupt.count`` and raises
Interrupted itself on a second press. Here:
  - a press during a phase ends that phase; the next starts from the best weights so far (the
    count is reset between phases, so the next press stops the next phase): a press during
    refinement ends it with the best weights so far and logs the book's warning;
  - the final pass and the confusion matrix are short and run to the end.
The model's weights are kept equal to the best point found so far all along, and every log line is
flushed as it is written, so an Interrupted raised anywhere leaves a consistent model and log.
"""

import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from ..host.threads import single_threaded_blas
from .anneal import AnnealingPhase
from .confusion import (confusion_matrix, format_confusion, mean_nll, misclassification,
                        most_wrong)
from .conjgrad import RefinementPhase
from .minibatch import MiniBatchPhase
from .phase import PhaseResult, format_criterion, run_steps
from .validation import Validation, split_cases

# A training method: the phases it runs, each made from the TrainingParams.
BOOK_METHOD = (AnnealingPhase, RefinementPhase)
MINIBATCH_METHOD = (AnnealingPhase, MiniBatchPhase)       # SGD or Adam, by TRAIN METHOD
MINIBATCH_THEN_CG = (AnnealingPhase, MiniBatchPhase, RefinementPhase)
# TRAIN METHOD -> the method's phases
METHODS = {"ANNEAL CG": BOOK_METHOD, "SGD": MINIBATCH_METHOD, "ADAM": MINIBATCH_METHOD,
           "SGD CG": MINIBATCH_THEN_CG, "ADAM CG": MINIBATCH_THEN_CG}


@dataclass
class TrainResult:
    """What one TRAIN produced.

    phases: a PhaseResult per phase of the training method, in order; final_criterion: the
    criterion of the final pass (the minimized one, penalty included); nll: its likelihood part
    alone; misclassification: percent of training cases misclassified; confusion: (n_classes,
    n_classes) counts [true, predicted]; seconds: elapsed seconds per phase (by its name), "final
    pass", "confusion" and "total"; n_criterion_evals / n_gradient_evals: all evaluations made;
    validation: the validation checks (train/validation.py Check entries) and
    validation_summary their outcome (None: no checks were asked for). With cases held out, the
    final pass, the confusion matrix and n_cases are of the training cases alone.
    """

    phases: List[PhaseResult]
    final_criterion: float
    nll: float
    misclassification: float
    confusion: np.ndarray
    n_cases: int
    seconds: Dict[str, float] = field(default_factory=dict)
    n_criterion_evals: int = 0
    n_gradient_evals: int = 0
    warnings: List[str] = field(default_factory=list)
    command: str = "TRAIN"
    validation: List[dict] = field(default_factory=list)
    validation_summary: Optional[dict] = None

    @property
    def interrupted(self):
        return any(p.interrupted for p in self.phases)

    def phase(self, name):
        """The PhaseResult called ``name`` (None when the method has no such phase)."""
        return next((p for p in self.phases if p.name == name), None)


@dataclass
class TestResult:
    """What one TEST produced: criterion (mean negative log likelihood per case and class, no
    penalty), misclassification percent, confusion counts [true, predicted], cases, seconds, and
    the cases it got most wrong (confusion.most_wrong)."""

    __test__ = False             # not a test class, whatever pytest thinks of the name

    criterion: float
    misclassification: float
    confusion: np.ndarray
    n_cases: int
    seconds: float = 0.0
    command: str = "TEST"
    worst: List[dict] = field(default_factory=list)

    @property
    def final_criterion(self):
        return self.criterion


class TrainContext:
    """What the phases of one TRAIN share: the model (kept at the best weights so far), its
    evaluator bound to the training cases, the random generator, the log, the Ctrl-C test, the
    progress reports (``report``) and the validation checks (``validate``; validation None: no
    checks)."""

    def __init__(self, model, evaluator, rng, log, stop, progress, validation=None):
        self.model, self.evaluator, self.rng, self.log = model, evaluator, rng, log
        self.arch = model.arch
        self.stop = stop
        self.progress = progress
        self.validation = validation
        self.started = time.perf_counter()
        self.evaluations_before = 0        # evaluations of the phases already ended
        self.last_check = None             # (phase name, step) of the latest check

    def report(self, phase, step, current, best):
        """A step of ``phase`` is done: tell the progress display."""
        if self.progress is not None:
            self.progress(phase.label, step, current, best, total=phase.progress_total)

    def validate(self, phase, step):
        """Check point ``step`` of ``phase`` is done: a validation check when one is due."""
        if self.validation is not None and self.validation.due(step):
            self._check(phase.name, step, phase.evaluations_made())

    def weights_replaced(self):
        """The running phase replaced the weights of its last check (an average of its epochs):
        its end is checked again."""
        self.last_check = None

    def check_phase_end(self, phase, result):
        """A phase ended: its check, unless its last step was just checked."""
        if self.validation is not None and self.last_check != (phase.name, result.steps):
            self._check(phase.name, result.steps, evaluations_made(result))

    def stopping_early(self):
        return self.validation is not None and self.validation.stop_early

    def _check(self, name, step, evaluations):
        made = self.validation.check(name, step, time.perf_counter() - self.started,
                                     self.evaluations_before + evaluations)
        self.last_check = (name, step)
        validated = getattr(self.progress, "validated", None)
        if validated is not None:          # a record of the run keeps the check
            validated(made.entry())


def evaluations_made(result):
    """A phase's criterion and gradient evaluations together."""
    counts = result.evaluations or {}
    return int(counts.get("criterion") or 0) + int(counts.get("gradient") or 0)


def train(model, dataset, training, log, interrupt, rng, progress=None, method=None,
          validation=None):
    """Train ``model`` on ``dataset`` by ``method``'s phases, then the final pass and the
    confusion matrix (see the module notes); returns TrainResult.

    model: convnet.model.Model (its weights are overwritten, and hold the best point so far at every
    moment); dataset: with .inputs, .classes, .n_classes; training: convnet.params.TrainingParams
    (ANNEAL ITERS, ANNEAL RANGE, ANNEAL SCALE, MAXITERS, TOL, WPEN); log: LogWriter; interrupt:
    the session's Ctrl-C counter (.stop_requested(), .reset()); rng: numpy Generator (the only
    source of randomness); progress: optional callable(phase label, step, current, best,
    total=limit) for a live display; it may have ``start_phase(phase)``, told as each phase starts;
    method: the phase classes, each made from ``training`` (None: those of its TRAIN METHOD);
    validation: params.ValidationParams (None: no checks), and the cases ``dataset.held_out``
    names are held out of training (train/validation.py).

    The BLAS library is held to one thread throughout: the optimizer's vector operations (dot
    products and updates of every weight) are memory-bound, and waking BLAS threads for each of
    them cost milliseconds per call when the other cores are busy (the host path's own workers,
    or other programs), more than the operation itself.
    """
    with single_threaded_blas():
        cases, held_out = split_cases(dataset)
        ev = model.evaluator(cases.inputs, cases.classes, float(training.wpen))
        t_all = time.perf_counter()
        checks = None
        if validation is not None:
            checks = Validation.for_training(model, cases, held_out, validation, log)
        context = TrainContext(model, ev, rng, log, interrupt.stop_requested, progress, checks)
        method = METHODS[training.method] if method is None else method
        phases = _run_phases([make(training) for make in method], context, interrupt)
        if checks is not None:
            checks.finish()
        result = _final(context, cases, float(training.wpen), phases, t_all)
        if checks is not None:
            result.validation = [c.entry() for c in checks.checks]
            result.validation_summary = checks.summary()
            result.seconds["validation"] = checks.seconds
        return result


def _run_phases(phases, context, interrupt):
    """Run the phases in turn, each from the best weights of the one before; a Ctrl-C ends the
    running phase, and the count is reset before the next; an early stop ends the training."""
    results, weights = [], None
    for number, phase in enumerate(phases):
        if number and results[-1].interrupted:
            interrupt.reset()
        t0 = time.perf_counter()
        phase.start(context, weights)
        start_phase = getattr(context.progress, "start_phase", None)
        if start_phase is not None:          # a record of the run opens the phase's entry
            start_phase(phase)
        run_steps(phase, context.stop, context.stopping_early)
        result = phase.finish()
        result.seconds = time.perf_counter() - t0
        stopped_early = context.stopping_early()
        if stopped_early and not result.interrupted:
            result.stop_reason = "early stop"
            result.stop_words = context.validation.early_stop_words()
        phase.log_result(context.log, result)
        context.check_phase_end(phase, result)
        results.append(result)
        context.evaluations_before += evaluations_made(result)
        weights = result.weights
        if stopped_early:
            break
    return results


def _final(context, dataset, wpen, phases, t_all):
    """The final pass with the best weights, the confusion matrix, their log lines; the
    TrainResult."""
    log, model = context.log, context.model
    seconds = {p.name: p.seconds for p in phases}
    t0 = time.perf_counter()
    w = model.weights.copy()
    final = float(context.evaluator.criterion(w))
    seconds["final pass"] = time.perf_counter() - t0
    log.write(f"Optimization is complete with negative log likelihood = {format_criterion(final)}")
    t0 = time.perf_counter()
    outputs = context.evaluator.outputs(w)
    classes = np.asarray(dataset.classes, dtype=np.int64)
    nll = mean_nll(outputs, classes)
    if wpen > 0:
        log.write(f"   (mean negative log likelihood {format_criterion(nll)} plus weight penalty "
                  f"{format_criterion(final - nll)})")
    matrix = confusion_matrix(outputs, classes, context.arch.n_classes)
    seconds["confusion"] = time.perf_counter() - t0
    log.blank()
    log.write(format_confusion(matrix, getattr(dataset, "class_names", None)))
    warnings = chance_level_warnings(nll, classes, context.arch.n_classes)
    for warning in warnings:
        log.write(f"WARNING... {warning}")
    seconds["total"] = time.perf_counter() - t_all
    phase_times = ", ".join(f"{p.name} {p.seconds:.2f} s" for p in phases)
    log.write(f"Elapsed time: {phase_times}, final pass {seconds['final pass']:.2f} s, confusion "
              f"matrix {seconds['confusion']:.2f} s, total {seconds['total']:.2f} s")
    log.blank()
    return TrainResult(
        phases, final_criterion=final, nll=nll, misclassification=misclassification(matrix),
        confusion=matrix, n_cases=int(matrix.sum()), seconds=seconds,
        n_criterion_evals=sum(p.evaluations.get("criterion", 0) for p in phases) + 1,
        n_gradient_evals=sum(p.evaluations.get("gradient", 0) for p in phases), warnings=warnings)


# A TRAIN whose likelihood ends within this fraction of the no-information level has learned
# next to nothing (often annealing that was cut short, or refinement stopped early by TOL).
CHANCE_MARGIN = 0.005


def no_information_criterion(classes, n_classes):
    """The criterion of a net that knows only how often each class occurs: the entropy of the
    class frequencies per class (Equation 1-13 with every output equal to its class's share;
    ln K / K for balanced classes)."""
    counts = np.bincount(np.asarray(classes, dtype=np.int64), minlength=n_classes)
    shares = counts[counts > 0] / max(1, counts.sum())
    return float(-np.sum(shares * np.log(shares)) / n_classes)


def chance_level_warnings(nll, classes, n_classes):
    """A warning (a list of at most one line) when the training likelihood ``nll`` is no better
    than the no-information level by more than CHANCE_MARGIN; the likely remedies named."""
    level = no_information_criterion(classes, n_classes)
    if not (level > 0 and nll >= (1 - CHANCE_MARGIN) * level):
        return []
    return [f"training ended at the no-information level (criterion {format_criterion(nll)}, "
            f"knowing only the class frequencies gives {format_criterion(level)}): try more "
            "ANNEAL ITERS, a larger ANNEAL RANGE or a smaller TOL"]


def test(model, dataset, log):
    """TEST: the trained model on the current data. Logs the mean negative log likelihood (no weight
    penalty, see the module notes), the confusion matrix and the misclassification; returns
    TestResult."""
    t0 = time.perf_counter()
    ev = model.evaluator(dataset.inputs, dataset.classes, 0.0)
    w = model.weights.copy()
    crit = float(ev.criterion(w))
    outputs = ev.outputs(w)
    classes = np.asarray(dataset.classes, dtype=np.int64)
    matrix = confusion_matrix(outputs, classes, model.arch.n_classes)
    worst = most_wrong(outputs, classes)
    seconds = time.perf_counter() - t0
    log.write(f"Test of {int(matrix.sum())} cases: mean negative log likelihood = "
              f"{format_criterion(crit)}")
    log.blank()
    log.write(format_confusion(matrix, getattr(dataset, "class_names", None)))
    log.write(f"Elapsed time: test {seconds:.2f} s")
    log.blank()
    return TestResult(crit, misclassification(matrix), matrix, int(matrix.sum()), seconds,
                      worst=worst)


test.__test__ = False                # a TEST command, not a pytest test
