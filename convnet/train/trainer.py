"""TRAIN and TEST: the book's four training phases, their CONVNET.LOG lines, and Ctrl-C.

TRAIN (book p.158-159):
  1. Simulated annealing for starting weights (anneal.py): ANNEAL ITERS criterion evaluations.
  2. Conjugate-gradient refinement (conjgrad.py) until MAXITERS iterations or convergence (TOL).
  3. A final pass over the data with the best weights: the criterion that is reported.
  4. The confusion matrix of the training data (confusion.py).

The criterion everywhere in TRAIN is the one being minimized: the mean negative log likelihood per
case and class (Equation 1-13) plus the weight penalty WPEN / n_weights * (sum of squared non-bias
weights); that is what the book's two result lines print. TEST reports the same likelihood term
without any penalty (the penalty is a training device; a test set measures fit only), so a TEST of
the training data with WPEN = 0 gives exactly TRAIN's final criterion.

Ctrl-C (the original's Escape key). The session counts presses in ``interrupt.count`` and raises
Interrupted itself on a second press. Here:
  - a press during annealing ends annealing; refinement starts from the best weights so far (the
    count is reset, so the next press stops refinement);
  - a press during refinement ends it with the best weights so far and logs the book's warning;
  - phases 3 and 4 are short and run to the end.
The model's weights are kept equal to the best point found so far all along, and every log line is
flushed as it is written, so an Interrupted raised anywhere leaves a consistent model and log.
"""

import math
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..control import DEFAULT_PARAMETERS
from ..host.threads import single_threaded_blas
from .anneal import anneal, weight_scales
from .confusion import confusion_matrix, format_confusion, misclassification
from .conjgrad import conjugate_gradients

ANNEAL_VALUES_PER_LINE = 10

# Why refinement ended, as the log says it.
STOP_WORDS = {
    "tol": "the relative improvement fell below TOL",
    "maxiters": "MAXITERS reached",
    "interrupt": "interrupted by the user",
    "zero gradient": "the gradient vanished",
    "no progress": "no lower point along the gradient",
}


@dataclass
class TrainResult:
    """What one TRAIN produced.

    anneal_criterion: the best annealing criterion; final_criterion: the criterion of the final pass
    (the minimized one, penalty included); nll: its likelihood part alone; misclassification:
    percent of training cases misclassified; confusion: (n_classes, n_classes) counts [true,
    predicted]; anneal_interrupted / refine_interrupted: a Ctrl-C ended that phase early;
    iterations: refinement iterations; stop_reason: why refinement ended (a key of STOP_WORDS);
    seconds: elapsed seconds per phase ("annealing", "refinement", "final pass", "confusion") and
    "total"; annealing_history: (evaluation, criterion) of every annealing evaluation;
    refinement_history: (iteration, criterion), iteration 0 being the start of refinement;
    refinement_steps: the length of each iteration's weight change.
    """

    anneal_criterion: float
    final_criterion: float
    nll: float
    misclassification: float
    confusion: np.ndarray
    n_cases: int
    anneal_interrupted: bool = False
    refine_interrupted: bool = False
    iterations: int = 0
    stop_reason: str = ""
    seconds: Dict[str, float] = field(default_factory=dict)
    annealing_history: List[Tuple[int, float]] = field(default_factory=list)
    refinement_history: List[Tuple[int, float]] = field(default_factory=list)
    refinement_steps: List[float] = field(default_factory=list)
    n_criterion_evals: int = 0
    n_gradient_evals: int = 0
    kind: str = "TRAIN"

    @property
    def interrupted(self):
        return self.anneal_interrupted or self.refine_interrupted

    @property
    def annealing_criterion(self):
        return self.anneal_criterion


@dataclass
class TestResult:
    """What one TEST produced: criterion (mean negative log likelihood per case and class, no
    penalty), misclassification percent, confusion counts [true, predicted], cases, seconds."""

    __test__ = False             # not a test class, whatever pytest thinks of the name

    criterion: float
    misclassification: float
    confusion: np.ndarray
    n_cases: int
    seconds: float = 0.0
    kind: str = "TEST"

    @property
    def final_criterion(self):
        return self.criterion


def _nll(outputs, classes):
    """The likelihood part of the criterion from SoftMax outputs (Equation 1-13)."""
    n, k = outputs.shape
    if n == 0:
        return 0.0
    p = outputs[np.arange(n), classes]
    return float(-np.sum(np.log(p + 1e-30)) / (n * k))


def _fmt_crit(value):
    """A criterion in the book's 5 decimals (tiny values would all read 0.00000: add exponent form)."""
    if math.isfinite(value) and 0 < abs(value) < 0.001:
        return f"{value:.5f} ({value:.4e})"
    return f"{value:.5f}"


def train(model, dataset, params, log, interrupt, rng, progress=None):
    """Train ``model`` on ``dataset`` in the four phases (see the module notes); returns TrainResult.

    model: convnet.model.Model (its weights are overwritten, and hold the best point so far at every
    moment); dataset: with .inputs, .classes, .n_classes; params: control parameters (ANNEAL ITERS,
    ANNEAL RANGE, ANNEAL SCALE, MAXITERS, TOL, WPEN); log: LogWriter; interrupt: the session's Ctrl-C counter
    (.count, .reset()); rng: numpy Generator (the only source of randomness); progress: optional
    callable(phase, iteration, current, best, total=limit) for a live display.

    The BLAS library is held to one thread throughout: the optimizer's vector operations (dot
    products and updates of every weight) are memory-bound, and waking BLAS threads for each of
    them cost milliseconds per call when the other cores are busy (the host path's own workers,
    or other programs), more than the operation itself.
    """
    with single_threaded_blas():
        return _train(model, dataset, params, log, interrupt, rng, progress)


def _train(model, dataset, params, log, interrupt, rng, progress):
    def param(name):             # a parameter not set falls back on the one table of defaults
        value = params.get(name)
        return DEFAULT_PARAMETERS[name] if value is None else value

    wpen = float(param("WPEN"))
    n_anneal = int(param("ANNEAL ITERS"))
    anneal_range = float(param("ANNEAL RANGE"))
    anneal_scale = param("ANNEAL SCALE")
    max_iters = int(param("MAXITERS"))
    tol = float(param("TOL"))
    arch = model.arch
    ev = model.evaluator(dataset.inputs, dataset.classes, wpen)
    seconds = {}
    t_all = time.perf_counter()

    def stop():
        return interrupt.stop_requested()

    # ---------------------------------------------------------------- 1. simulated annealing
    t0 = time.perf_counter()
    pending = []
    last_best = [math.inf]

    def on_eval(k, f, best, best_w):
        pending.append((k, f))
        if len(pending) == ANNEAL_VALUES_PER_LINE:
            _flush_anneal(log, pending)
        if best < last_best[0]:
            last_best[0] = best
            model.weights = best_w
        if progress is not None:
            progress("Annealing", k, f, best, total=max(1, n_anneal))

    ares = anneal(ev.criterion, weight_scales(arch, anneal_range, anneal_scale), n_anneal, rng, stop=stop,
                  on_eval=on_eval)
    _flush_anneal(log, pending)
    model.weights = ares.weights
    seconds["annealing"] = time.perf_counter() - t0
    if ares.interrupted:
        log.write(f"Annealing ended by the user (Ctrl-C) after {ares.n_evals} of "
                  f"{max(1, n_anneal)} evaluations; refining the best weights so far")
        interrupt.reset()
    log.write("Simulated annealing for starting weights is complete with mean negative log "
              f"likelihood = {_fmt_crit(ares.criterion)}")
    log.write(f"Annealing: {ares.n_evals} evaluations, {seconds['annealing']:.2f} seconds")

    # ---------------------------------------------------------------- 2. conjugate gradients
    t0 = time.perf_counter()
    steps = []

    vectors = getattr(ev, "vectors", None)
    # the device's vectors hand over arrays that stay as they are until the iteration after the
    # next, so the model can hold them without copying every weight each iteration
    if getattr(vectors, "host_arrays_kept", False):
        hold = model.keep_weights
    else:
        def hold(w):
            model.weights = w

    def on_iter(it, f, step, w):
        hold(w)
        steps.append(step)
        log.write(f"Iteration {it} criterion = {f:.6g} step = {step:.4g}")
        if progress is not None:
            progress("Refinement", it, f, f, total=max_iters)

    # an evaluator that forms the line search's trial points itself and keeps the refinement's
    # vectors (the device path, one GPU) offers line and vectors
    cres = conjugate_gradients(ev.criterion, ev.gradient, ares.weights, max_iters=max_iters, tol=tol,
                               stop=stop, on_iter=on_iter, line=getattr(ev, "line", None),
                               vectors=vectors)
    model.weights = cres.weights
    seconds["refinement"] = time.perf_counter() - t0
    refine_interrupted = cres.interrupted
    if refine_interrupted:
        log.write("WARNING... User pressed ESCape during optimization")
        log.write("Results are incomplete and may be seriously incorrect")
    log.write(f"Refinement: {cres.iterations} iterations ({cres.n_grad} gradient and "
              f"{cres.n_func} criterion evaluations), {seconds['refinement']:.2f} seconds, "
              f"ended because {STOP_WORDS.get(cres.stop, cres.stop)}")

    # ---------------------------------------------------------------- 3. the final pass
    t0 = time.perf_counter()
    w = model.weights.copy()
    final = float(ev.criterion(w))
    seconds["final pass"] = time.perf_counter() - t0
    log.write(f"Optimization is complete with negative log likelihood = {_fmt_crit(final)}")

    # ---------------------------------------------------------------- 4. the confusion matrix
    t0 = time.perf_counter()
    outputs = ev.outputs(w)
    classes = np.asarray(dataset.classes, dtype=np.int64)
    nll = _nll(outputs, classes)
    if wpen > 0:
        log.write(f"   (mean negative log likelihood {_fmt_crit(nll)} plus weight penalty "
                  f"{_fmt_crit(final - nll)})")
    matrix = confusion_matrix(outputs, classes, arch.n_classes)
    seconds["confusion"] = time.perf_counter() - t0
    log.blank()
    log.write(format_confusion(matrix))
    seconds["total"] = time.perf_counter() - t_all
    log.write(f"Elapsed time: annealing {seconds['annealing']:.2f} s, refinement "
              f"{seconds['refinement']:.2f} s, final pass {seconds['final pass']:.2f} s, confusion "
              f"matrix {seconds['confusion']:.2f} s, total {seconds['total']:.2f} s")
    log.blank()
    return TrainResult(
        anneal_criterion=float(ares.criterion), final_criterion=final, nll=nll,
        misclassification=misclassification(matrix), confusion=matrix, n_cases=int(matrix.sum()),
        anneal_interrupted=ares.interrupted, refine_interrupted=refine_interrupted,
        iterations=cres.iterations, stop_reason=cres.stop, seconds=seconds,
        annealing_history=list(ares.history),
        refinement_history=[(it, f) for it, f, _ in cres.history],
        refinement_steps=steps, n_criterion_evals=ares.n_evals + cres.n_func + 1,
        n_gradient_evals=cres.n_grad)


def _flush_anneal(log, pending):
    """One log line for up to ANNEAL_VALUES_PER_LINE annealing evaluations."""
    if not pending:
        return
    first, last = pending[0][0], pending[-1][0]
    values = " ".join(f"{f:.6g}" for _, f in pending)
    log.write(f"Annealing evaluations {first}-{last}: {values}")
    pending.clear()


def test(model, dataset, log):
    """TEST: the trained model on the current data. Logs the mean negative log likelihood (no weight
    penalty, see the module notes), the confusion matrix and the misclassification; returns
    TestResult."""
    t0 = time.perf_counter()
    ev = model.evaluator(dataset.inputs, dataset.classes, 0.0)
    w = model.weights.copy()
    crit = float(ev.criterion(w))
    outputs = ev.outputs(w)
    matrix = confusion_matrix(outputs, np.asarray(dataset.classes, dtype=np.int64),
                              model.arch.n_classes)
    seconds = time.perf_counter() - t0
    log.write(f"Test of {int(matrix.sum())} cases: mean negative log likelihood = {_fmt_crit(crit)}")
    log.blank()
    log.write(format_confusion(matrix))
    log.write(f"Elapsed time: test {seconds:.2f} s")
    log.blank()
    return TestResult(crit, misclassification(matrix), matrix, int(matrix.sum()), seconds)


test.__test__ = False                # a TEST command, not a pytest test
