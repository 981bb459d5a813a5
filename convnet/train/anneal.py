"""Starting weights by simulated annealing (the first phase of TRAIN).

ANNEAL ITERS full-batch criterion evaluations. The first trial is a random weight vector of about
ANNEAL RANGE (see ``weight_scales``: the same for every weight, as the book means it, or scaled by
layer with ANNEAL SCALE = FANIN); every later trial is a random
perturbation of the current point whose size falls geometrically with the temperature, from the
full scale down to ``END_TEMPERATURE`` of it. A trial replaces the current point when it is lower,
or, when it is higher by D, with probability exp(-D / (E * T)), where T is the temperature (1 down to
END_TEMPERATURE) and E the mean size of the criterion changes seen so far (so the acceptance rule
needs no knowledge of the criterion's units). The best point ever evaluated is what annealing
returns. All random numbers come from the generator it is given, in a fixed order, so the same seed
gives the same result.
"""

import math
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

import numpy as np

from .phase import SCATTER, Phase, PhaseResult, format_criterion, run_steps

END_TEMPERATURE = 0.1

# Inputs of one neuron for which FANIN scaling gives exactly ANNEAL RANGE (see weight_scales).
REFERENCE_FAN_IN = 300

# ANNEAL SCALE choices: the book's flat range (the default) and the per-layer fan-in option.
FLAT, FANIN = "FLAT", "FANIN"
ANNEAL_SCALES = (FLAT, FANIN)


def weight_scales(arch, anneal_range, scale=FLAT):
    """The half-width of the random starting value of every weight (1-D, the host weight order).

    FLAT (the default, the book's meaning of ANNEAL RANGE): every weight, bias included, gets
    ANNEAL RANGE.

    FANIN: the net input of a tanh neuron grows with the square root of its number of inputs, so
    with one range a neuron that sees 1153 prior activations starts four times as excited as one
    that sees 75. With FANIN a layer whose neurons have ``fan_in`` inputs (bias excluded) gets

        ANNEAL RANGE * sqrt(REFERENCE_FAN_IN / fan_in)

    which keeps the spread of every layer's net inputs about the same (the idea behind the usual
    fan-in initializations); ANNEAL RANGE still sets the overall size. Biases get their layer's
    range. benchmarks/NOTES.md compares the two.
    """
    if scale not in ANNEAL_SCALES:
        raise ValueError(f"ANNEAL SCALE must be one of {', '.join(ANNEAL_SCALES)}, not {scale!r}")
    if scale == FLAT:
        return np.full(arch.n_weights, float(anneal_range))
    scales = np.empty(arch.n_weights)
    for layer in arch.all_layers:
        if not layer.n_weights:
            continue
        fan_in = max(1, layer.n_prior_weights - 1)
        scales[layer.weight_slice] = anneal_range * math.sqrt(REFERENCE_FAN_IN / fan_in)
    return scales


@dataclass
class AnnealResult:
    """weights / criterion: the best trial; n_evals: evaluations made; history: (evaluation index,
    criterion) of every evaluation, 1-based; interrupted: ended early by the user."""

    weights: np.ndarray
    criterion: float
    n_evals: int
    history: List[Tuple[int, float]] = field(default_factory=list)
    interrupted: bool = False


def anneal(func: Callable, scales, n_iters: int, rng: np.random.Generator,
           stop: Optional[Callable] = None, on_eval: Optional[Callable] = None) -> AnnealResult:
    """Simulated annealing over the weights (see the module notes).

    func(w) -> criterion; scales: per-weight half-width of the first random trial; n_iters: number
    of evaluations (at least 1 is always made, so that refinement has a starting point); rng: numpy
    Generator; stop(): asked before each evaluation after the first, True ends annealing early with the
    best so far; on_eval(index, criterion, best, best_weights): called after each evaluation
    (best_weights: the best trial so far; do not modify it).
    """
    annealer = Annealer(func, scales, n_iters, rng, on_eval)
    run_steps(annealer, stop)
    return annealer.result()


class Annealer:
    """Simulated annealing one evaluation at a time (see :func:`anneal`): ``step()`` makes the
    next trial; ``done`` once n_iters trials are made or ``interrupt()`` was called."""

    def __init__(self, func, scales, n_iters, rng, on_eval=None):
        self.func, self.rng, self.on_eval = func, rng, on_eval
        self.scales = np.asarray(scales, dtype=np.float64)
        self.n_iters = max(1, int(n_iters))
        self.center = np.zeros_like(self.scales)
        self.f_center = math.inf
        self.best_w, self.best_f = None, math.inf
        self.history = []
        self.mean_change = 0.0
        self.n_changes = 0
        self.interrupted = False
        self.k = 0                                # trials made
        self.spread = np.empty_like(self.scales)  # temp * scales, one buffer for the whole run

    @property
    def done(self):
        return self.interrupted or self.k >= self.n_iters

    def may_stop(self):
        return self.k > 0                  # the first trial is always made

    def interrupt(self):
        self.interrupted = True

    def step(self):
        k, n_iters, scales = self.k, self.n_iters, self.scales
        temp = END_TEMPERATURE ** (k / (n_iters - 1)) if n_iters > 1 else 1.0
        # trial = center + temp * scales * uniform, the same products and sums (each commutes), in
        # the array the draw returned: on large nets each fresh temporary cost more than the draw
        trial = self.rng.uniform(-1.0, 1.0, size=scales.size)
        np.multiply(scales, temp, out=self.spread)
        np.multiply(trial, self.spread, out=trial)
        np.add(self.center, trial, out=trial)
        u = self.rng.random()
        f = self.func(trial)
        self.k += 1
        if f is None or not math.isfinite(f):
            f = math.inf
        self.history.append((k + 1, f))
        if f < self.best_f:
            self.best_w, self.best_f = trial, f
        if self._accepts(f, u, temp):
            self.center, self.f_center = trial, f
        if self.on_eval is not None:
            self.on_eval(k + 1, f, self.best_f, self.best_w if self.best_w is not None else trial)

    def _accepts(self, f, u, temp):
        """Whether the trial of criterion f becomes the current point (the mean change is brought
        up to date first)."""
        if math.isfinite(self.f_center) and math.isfinite(f):
            change = f - self.f_center
            self.n_changes += 1
            self.mean_change += (abs(change) - self.mean_change) / self.n_changes
        if f < self.f_center:
            return True
        if math.isfinite(f) and self.mean_change > 0:
            return u < math.exp(-(f - self.f_center) / (self.mean_change * temp))
        return False

    def result(self):
        best_w = self.best_w
        if best_w is None:              # every trial was non-finite: fall back to the first trial
            best_w = self.center
        return AnnealResult(np.array(best_w, dtype=np.float64), self.best_f, self.k,
                            self.history, self.interrupted)


# ---------------------------------------------------------------------- the phase of TRAIN
ANNEAL_VALUES_PER_LINE = 10

# Why annealing ended, for people.
STOP_WORDS = {"limit": "ANNEAL ITERS reached", "interrupt": "interrupted by the user"}


class AnnealingPhase(Phase):
    """The first phase of the book's method: starting weights by simulated annealing, its
    evaluations logged ten to a line."""

    name, title, unit, label, chart = ("annealing", "Simulated annealing", "evaluation",
                                       "Annealing", SCATTER)

    def __init__(self, training):
        self.limit = training.anneal_iters
        self.range, self.scale = float(training.anneal_range), training.anneal_scale
        self.annealer = None

    @property
    def progress_total(self):
        return max(1, int(self.limit))

    @property
    def done(self):
        return self.annealer.done

    def may_stop(self):
        return self.annealer.may_stop()

    def interrupt(self):
        self.annealer.interrupt()

    def step(self):
        self.annealer.step()

    def evaluations_made(self):
        return self.annealer.k

    def start(self, context, weights):
        self.context, self.pending, self.last_best = context, [], math.inf
        scales = weight_scales(context.arch, self.range, self.scale)
        self.annealer = Annealer(context.evaluator.criterion, scales, int(self.limit), context.rng,
                                 self._evaluated)

    def _evaluated(self, k, f, best, best_w):
        self.pending.append((k, f))
        if len(self.pending) == ANNEAL_VALUES_PER_LINE:
            self._flush()
        if best < self.last_best:
            self.last_best = best
            self.context.model.weights = best_w
        self.context.report(self, k, f, best)

    def _flush(self):
        """One log line for up to ANNEAL_VALUES_PER_LINE annealing evaluations."""
        if not self.pending:
            return
        first, last = self.pending[0][0], self.pending[-1][0]
        values = " ".join(f"{f:.6g}" for _, f in self.pending)
        self.context.log.write(f"Annealing evaluations {first}-{last}: {values}")
        self.pending.clear()

    def finish(self):
        self._flush()
        ares = self.annealer.result()
        self.context.model.weights = ares.weights
        reason = "interrupt" if ares.interrupted else "limit"
        return PhaseResult(self.name, self.title, self.unit, self.chart, list(ares.history),
                           float(ares.criterion), ares.n_evals, self.limit, ares.interrupted,
                           reason, STOP_WORDS[reason],
                           evaluations={"criterion": ares.n_evals, "gradient": 0},
                           weights=ares.weights)

    def log_result(self, log, result):
        if result.interrupted:
            log.write(f"Annealing ended by the user (Ctrl-C) after {result.steps} of "
                      f"{self.progress_total} evaluations; refining the best weights so far")
        log.write("Simulated annealing for starting weights is complete with mean negative log "
                  f"likelihood = {format_criterion(result.criterion)}")
        log.write(f"Annealing: {result.steps} evaluations, {result.seconds:.2f} seconds")
