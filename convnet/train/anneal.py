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
    scales = np.asarray(scales, dtype=np.float64)
    n_iters = max(1, int(n_iters))
    center = np.zeros_like(scales)
    f_center = math.inf
    best_w, best_f = None, math.inf
    history = []
    mean_change = 0.0
    n_changes = 0
    interrupted = False
    n = 0
    spread = np.empty_like(scales)      # temp * scales, in one buffer kept for the whole run
    for k in range(n_iters):
        if k > 0 and stop is not None and stop():
            interrupted = True
            break
        temp = END_TEMPERATURE ** (k / (n_iters - 1)) if n_iters > 1 else 1.0
        # trial = center + temp * scales * uniform, the same products and sums (each commutes), in
        # the array the draw returned: on large nets each fresh temporary cost more than the draw
        trial = rng.uniform(-1.0, 1.0, size=scales.size)
        np.multiply(scales, temp, out=spread)
        np.multiply(trial, spread, out=trial)
        np.add(center, trial, out=trial)
        u = rng.random()
        f = func(trial)
        n += 1
        if f is None or not math.isfinite(f):
            f = math.inf
        history.append((k + 1, f))
        if f < best_f:
            best_w, best_f = trial, f
        if math.isfinite(f_center) and math.isfinite(f):
            change = f - f_center
            n_changes += 1
            mean_change += (abs(change) - mean_change) / n_changes
        if f < f_center:
            accept = True
        elif math.isfinite(f) and mean_change > 0:
            accept = u < math.exp(-(f - f_center) / (mean_change * temp))
        else:
            accept = False
        if accept:
            center, f_center = trial, f
        if on_eval is not None:
            on_eval(k + 1, f, best_f, best_w if best_w is not None else trial)
    if best_w is None:                  # every trial was non-finite: fall back to the first trial
        best_w = center
    return AnnealResult(np.array(best_w, dtype=np.float64), best_f, n, history, interrupted)
