"""Weight refinement: Polak-Ribiere conjugate gradients with a bracketing line minimization.

The optimizer knows nothing about nets. It is given

    func(w) -> float            the criterion (forward pass only; cheap)
    grad(w) -> (float, ndarray) the criterion and its true gradient (forward and backward pass)

and moves from a starting point downhill. Every accepted point is lower than the one before, so the
weights it returns are always the best it has seen: an interruption at any moment leaves a usable
answer.

One iteration:
  1. The search direction d is the Polak-Ribiere conjugate direction (beta clipped at zero, the
     "PR+" form, which falls back to steepest descent on its own when successive gradients stop
     being nearly orthogonal). When d is not a descent direction (g.d >= 0) it is replaced by the
     negative gradient: a restart.
  2. A line minimization along d, starting with a trial step equal to the previous step rescaled
     by the ratio of the directional derivatives (so the first trial is usually close). Two
     searches are available:
       "slopes" (the default, line_search_slopes): every trial point costs one gradient
       evaluation and gives the criterion and its slope along d; the step grows until the minimum
       is bracketed, then safeguarded cubic interpolation narrows the bracket until the slope has
       fallen to a tenth of its starting size. The accepted point's gradient is already known.
       "values" (line_minimize): criterion-only trials, bracketing by expansion or parabolic
       shrinking, then Brent's parabolic / golden-section search, and one gradient at the end.
     With our evaluators a gradient costs less than twice a criterion, and the slope search needs
     about two evaluations per iteration, so it is the cheaper of the two on nets (measured on the
     manual example and on MNIST).
  3. Convergence: the relative improvement (f_old - f_new) / f_old is compared with TOL. A small
     improvement first restarts the search along the negative gradient (conjugacy may simply have
     been lost); only ``patience`` small improvements in a row end the refinement. This avoids
     stopping on one unlucky iteration, which a single test would do.
"""

import math
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

import numpy as np

from ..vectors import HOST_VECTORS
from .linesearch import (WOLFE_SIGMA, HostLine, LineResult, _finite,  # noqa: F401
                         line_minimize, line_search_slopes)      # (LineResult re-exported)
from .phase import Phase, PhaseResult, log_interruption, run_steps


@dataclass
class CGResult:
    """The outcome of a refinement.

    weights / criterion: the best point (always the last accepted one); iterations: completed
    iterations; n_func / n_grad: criterion-only and gradient evaluations; history: (iteration,
    criterion, step length) per iteration, iteration 0 being the start; stop: why it ended, one of
    "tol", "maxiters", "interrupt", "zero gradient", "no progress".
    """

    weights: np.ndarray
    criterion: float
    iterations: int
    n_func: int
    n_grad: int
    history: List[Tuple[int, float, float]] = field(default_factory=list)
    stop: str = ""

    @property
    def interrupted(self):
        return self.stop == "interrupt"


def conjugate_gradients(func: Callable, grad: Callable, x0, max_iters=1000, tol=5e-5, patience=2,
                        stop: Optional[Callable] = None, on_iter: Optional[Callable] = None,
                        first_move=0.05, line_search="slopes", sigma=None, rtol=0.1,
                        preconditioner=None, line=None, vectors=None):
    """Minimize from x0 by Polak-Ribiere conjugate gradients (see the module notes).

    max_iters: iterations at most (0: only evaluates the start). tol: relative improvement per
    iteration below which an iteration counts as small; ``patience`` small ones in a row end it.
    stop(): asked between evaluations; True ends refinement with the best point so far.
    on_iter(iteration, criterion, step_length, weights): called after each iteration (weights: the
    current best point, valid during the call; do not modify it, copy it to keep it).
    first_move: the first trial step moves the weights by this fraction of their length (or of
    0.01 * sqrt(n) when they are near zero).
    line_search: "slopes" (line_search_slopes: gradient at every trial, strong Wolfe with ``sigma``)
    or "values" (line_minimize: criterion only, Brent to ``rtol``, then one gradient).
    preconditioner: optional positive vector s; the search then runs in the coordinates w / s (a
    per-weight scale), which balances layers whose weights live on very different scales.
    line: optional ``line(x, d)`` giving the slope search's trial points (see :class:`HostLine`),
    e.g. an evaluator's that forms them where the data are; by default they are formed here and
    evaluated with ``grad``.
    vectors: where x, the directions and the gradients live and how they are combined
    (convnet.vectors.HostVectors, the default: numpy arrays); another home (an evaluator's, e.g.
    the device's) needs its ``line`` too, and works with the slope search and no preconditioner.
    ``grad`` is then asked only for the start, with host weights, and ``on_iter`` gets host
    weights (to read during the call: copy them to keep them).
    """
    cg = ConjugateGradients(func, grad, x0, max_iters=max_iters, tol=tol, patience=patience,
                            stop=stop, on_iter=on_iter, first_move=first_move,
                            line_search=line_search, sigma=sigma, rtol=rtol,
                            preconditioner=preconditioner, line=line, vectors=vectors)
    run_steps(cg, stop)
    return cg.result()


class ConjugateGradients:
    """Conjugate gradients one iteration at a time (the arguments: see
    :func:`conjugate_gradients`): the start's gradient is evaluated on construction, ``step()``
    makes one iteration, ``done`` once it has ended (``stop_reason`` says why)."""

    def __init__(self, func, grad, x0, max_iters=1000, tol=5e-5, patience=2, stop=None,
                 on_iter=None, first_move=0.05, line_search="slopes", sigma=None, rtol=0.1,
                 preconditioner=None, line=None, vectors=None):
        home = HOST_VECTORS if vectors is None else vectors
        if home is not HOST_VECTORS and (line is None or line_search != "slopes"
                                         or preconditioner is not None):
            raise ValueError("vectors kept away from the host need their line, the slope search "
                             "and no preconditioner")
        self.vectors, self.func, self.grad = home, func, grad
        self.stop, self.on_iter = stop, on_iter
        self.max_iters, self.tol, self.patience = max_iters, tol, patience
        self.first_move, self.line_search = first_move, line_search
        self.rtol, self.line = rtol, line
        self.sigma = WOLFE_SIGMA if sigma is None else sigma
        self.sc = None if preconditioner is None else np.asarray(preconditioner, dtype=np.float64)
        self.x = home.copy(x0)
        self.n_func = self.n_grad = 0
        self.it = 0
        self.stop_reason = "maxiters"
        self.finished = False
        self._start()

    def _start(self):
        vectors = self.vectors
        f, g = self._grad_counted(vectors.host(self.x))
        self.f = f = _finite(f)
        self.history = [(0, f, 0.0)]
        if not math.isfinite(f) or self.max_iters <= 0:
            self._finish("no progress" if not math.isfinite(f) else "maxiters")
            return
        # In the scaled coordinates the gradient is s * g and a direction dv moves the weights by
        # s * dv.
        self.gv = vectors.array(self._scaled(g))
        self.dv = vectors.neg(self.gv)
        self.gg = vectors.dot(self.gv, self.gv)
        # The host's trial points go to one array allocated once, and the vector updates are
        # single passes (vectors.py): on large nets fresh arrays and repeated passes every
        # evaluation cost as much as the arithmetic.
        self.trial = np.empty_like(self.x) if self.line is None else None
        self.steepest = True
        self.small = 0
        self.prev_step = self.prev_slope = None

    def _scaled(self, vec):
        return vec if self.sc is None else vec * self.sc

    def _func_counted(self, w):
        self.n_func += 1
        return self.func(w)

    def _grad_counted(self, w):
        self.n_grad += 1
        return self.grad(w)

    def _finish(self, reason):
        self.stop_reason = reason
        self.finished = True

    @property
    def done(self):
        return self.finished or self.it >= self.max_iters

    def may_stop(self):
        return True

    def interrupt(self):
        self._finish("interrupt")

    def result(self):
        return CGResult(self.vectors.result(self.x), self.f, self.it, self.n_func, self.n_grad,
                        self.history, self.stop_reason)

    def step(self):
        """One iteration: a direction, a line search along it, the new point and direction."""
        vectors = self.vectors
        if self.gg == 0.0 or not math.isfinite(self.gg):
            return self._finish("zero gradient")
        slope = self._descent_slope()
        d = self._scaled(self.dv)
        dnorm = vectors.norm(d)
        t0 = self._first_trial(slope, dnorm)
        res, g_new = self._search(d, slope, t0)
        self.it += 1
        if not (res.step > 0.0 and res.criterion < self.f):
            return self._no_gain(res)
        # x + step * d in place: the very point the line search evaluated, to the last bit
        vectors.step_into(self.x, self.x, res.step, d)
        step_len = res.step * dnorm
        f_new = res.criterion
        if res.interrupted:
            self.f = f_new
            self._record(step_len)
            return self._finish("interrupt")
        if g_new is None:
            f_check, g_new = self._grad_counted(self.x)
            # The criterion is deterministic, so f_check equals f_new; keep the lower to be safe.
            f_new = min(f_new, _finite(f_check))
        improvement = (self.f - f_new) / max(abs(self.f), 1e-300)
        self.f = f_new
        self._record(step_len)
        self._turn(g_new, improvement, res.step, slope)

    def _descent_slope(self):
        """The slope along the direction; a direction that does not descend is replaced by the
        negative gradient (a restart)."""
        slope = self.vectors.dot(self.gv, self.dv)
        if not (slope < 0.0 and math.isfinite(slope)):
            self.dv = self.vectors.neg(self.gv)
            slope = -self.gg
            self.steepest = True
        return slope

    def _first_trial(self, slope, dnorm):
        """The line search's first trial step."""
        if self.prev_step is None:
            xnorm = self.vectors.norm(self.x)
            return self.first_move * (xnorm if xnorm > 0 else 0.01 * math.sqrt(self.x.size)) / dnorm
        # The previous step rescaled by the ratio of directional derivatives, within limits.
        t0 = self.prev_step * self.prev_slope / slope
        return min(max(t0, 0.01 * self.prev_step), 100.0 * self.prev_step)

    def _search(self, d, slope, t0):
        """(LineResult, gradient at its point or None) of the line search along d."""
        if self.line_search == "slopes":
            points = (HostLine(self.grad, self.x, d, self.trial) if self.line is None
                      else self.line(self.x, d))
            res = line_search_slopes(None, self.x, d, self.f, slope, t0, stop=self.stop,
                                     sigma=self.sigma, line=points)
            self.n_grad += res.n_evals
            return res, res.gradient
        res = line_minimize(self._func_counted, self.x, d, self.f, slope, t0, stop=self.stop,
                            rtol=self.rtol)
        return res, None

    def _record(self, step_len):
        self.history.append((self.it, self.f, step_len))
        if self.on_iter is not None:
            self.on_iter(self.it, self.f, step_len, self.vectors.host(self.x))

    def _no_gain(self, res):
        """The line search found no lower point: end, or try the gradient once."""
        self._record(0.0)
        if res.interrupted:
            return self._finish("interrupt")
        if self.steepest:
            return self._finish("no progress")
        # a conjugate direction that gave nothing: try the gradient
        self.dv = self.vectors.neg(self.gv)
        self.steepest = True
        self.prev_step = None

    def _turn(self, g_new, improvement, step, slope):
        """The next direction from the new gradient (Polak-Ribiere, clipped; a restart after a
        small improvement), or the end after ``patience`` small ones."""
        vectors = self.vectors
        gv_new = vectors.array(self._scaled(g_new))
        gg_new, change = vectors.dot_and_change(gv_new, self.gv)
        self.prev_step, self.prev_slope = step, slope
        if improvement < self.tol:
            self.small += 1
            if self.small >= self.patience:
                return self._finish("tol")
            beta = 0.0                   # a small improvement: restart along the gradient
        else:
            self.small = 0
            beta = max(0.0, change / self.gg)
        vectors.new_direction(self.dv, beta, gv_new)    # dv = -gv_new + beta * dv, in place
        self.steepest = beta == 0.0
        self.gv, self.gg = gv_new, gg_new


# ---------------------------------------------------------------------- the phase of TRAIN
# Why refinement ended, as the log and the results say it.
STOP_WORDS = {
    "tol": "the relative improvement fell below TOL",
    "maxiters": "MAXITERS reached",
    "interrupt": "interrupted by the user",
    "zero gradient": "the gradient vanished",
    "no progress": "no lower point along the gradient",
}


class RefinementPhase(Phase):
    """The second phase of the book's method: conjugate-gradient refinement from the previous
    phase's best weights, one log line per iteration."""

    name, title, unit, label = "refinement", "Conjugate-gradient refinement", "iteration", \
        "Refinement"

    def __init__(self, training):
        self.limit = training.maxiters
        self.tol = float(training.tol)
        self.cg = None

    @property
    def done(self):
        return self.cg.done

    def interrupt(self):
        self.cg.interrupt()

    def step(self):
        self.cg.step()

    def start(self, context, weights):
        self.context, self.step_lengths = context, []
        ev, model = context.evaluator, context.model
        vectors = getattr(ev, "vectors", None)
        # the device's vectors hand over arrays that stay as they are until the iteration after
        # the next, so the model can hold them without copying every weight each iteration
        if getattr(vectors, "host_arrays_kept", False):
            self.hold = model.keep_weights
        else:
            def hold(w):
                model.weights = w
            self.hold = hold
        # an evaluator that forms the line search's trial points itself and keeps the
        # refinement's vectors (the device path, one GPU) offers line and vectors
        self.cg = ConjugateGradients(ev.criterion, ev.gradient, weights,
                                     max_iters=int(self.limit), tol=self.tol,
                                     stop=context.stop, on_iter=self._iterated,
                                     line=getattr(ev, "line", None), vectors=vectors)

    def start_trace(self):
        return [(0, self.cg.history[0][1])]        # iteration 0: the starting point

    def evaluations_made(self):
        return self.cg.n_func + self.cg.n_grad

    def _iterated(self, it, f, step, w):
        self.hold(w)
        self.step_lengths.append(step)
        self.context.log.write(f"Iteration {it} criterion = {f:.6g} step = {step:.4g}")
        self.context.report(self, it, f, f)
        self.context.validate(self, it)

    def finish(self):
        cres = self.cg.result()
        self.context.model.weights = cres.weights
        self.n_func = cres.n_func
        lengths = [None] + [self.step_lengths[it - 1] if it <= len(self.step_lengths) else None
                            for it, _, _ in cres.history[1:]]
        return PhaseResult(self.name, self.title, self.unit, self.chart,
                           [(it, f) for it, f, _ in cres.history], float(cres.criterion),
                           cres.iterations, self.limit, cres.interrupted, cres.stop,
                           STOP_WORDS.get(cres.stop, cres.stop),
                           evaluations={"criterion": cres.n_func, "gradient": cres.n_grad},
                           figures={"step_lengths": lengths}, weights=cres.weights)

    def log_result(self, log, result):
        if result.interrupted:
            log_interruption(log)
        log.write(f"Refinement: {result.steps} iterations ({result.evaluations['gradient']} "
                  f"gradient and {result.evaluations['criterion']} criterion evaluations), "
                  f"{result.seconds:.2f} seconds, ended because {result.stop_words}")
