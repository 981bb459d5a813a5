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

from ..vectors import HOST_VECTORS, step_into
from .phase import Phase, PhaseResult, run_steps

GOLDEN = 0.3819660112501051          # 2 - golden ratio: the golden-section fraction
EXPAND_LIMIT = 8.0                   # largest growth of the trial step during bracketing
SHRINK_LIMITS = (0.1, 0.5)           # the shrunken trial step lies in this fraction of the last one
# The slope search accepts a point once its slope has fallen to this fraction of the starting
# slope (strong Wolfe). benchmarks/training.py compares values by evaluations and test error.
WOLFE_SIGMA = 0.1


@dataclass
class LineResult:
    """What a line minimization found: the step (multiple of the direction), its criterion, the
    number of criterion evaluations, and whether an interruption cut it short."""

    step: float
    criterion: float
    n_evals: int
    interrupted: bool = False


class _Stop(Exception):
    """Internal: an interruption was noticed between two evaluations."""


def _finite(f):
    return f if (f is not None and math.isfinite(f)) else math.inf


class _ValueProbe:
    """The criterion at x + t * d for a line search by values: counts the evaluations, keeps the
    lowest point seen, and raises _Stop when ``stop()`` says so after an evaluation."""

    def __init__(self, func, x, d, f0, stop):
        self.func, self.x, self.d, self.stop = func, x, d, stop
        self.best_step, self.best_f, self.n = 0.0, f0, 0

    def __call__(self, t):
        f = _finite(self.func(self.x + t * self.d))
        self.n += 1
        if f < self.best_f:
            self.best_step, self.best_f = t, f
        if self.stop is not None and self.stop():
            raise _Stop
        return f

    def result(self, interrupted=False):
        return LineResult(self.best_step, self.best_f, self.n, interrupted)


def line_minimize(func, x, d, f0, slope0, step0, stop=None, rtol=0.1, max_evals=30):
    """Minimize ``func(x + t * d)`` over t > 0, approximately.

    f0 = func(x); slope0 = the directional derivative at t = 0 (must be negative); step0 > 0 the first
    trial step. ``stop()`` (optional) is asked after every evaluation; when it says True the search ends
    at once with the best point seen so far. ``rtol``: the bracket is refined until its width is below
    rtol times the step (a loose search is enough for conjugate gradients, but a too loose one costs
    conjugacy). Returns a LineResult; step 0.0 means no lower point was found.
    """
    phi = _ValueProbe(func, x, d, f0, stop)
    try:
        fb = phi(step0)
        if fb >= f0:
            bracket = _shrink_bracket(phi, x, d, f0, slope0, step0, fb, max_evals)
        else:
            bracket = _grow_bracket(phi, f0, slope0, step0, fb, max_evals)
        if bracket is None:
            return phi.result()
        # The minimum lies in (a, c) and fb is below both ends: refine.
        _brent(phi, *bracket, rtol, max_evals - phi.n)
    except _Stop:
        return phi.result(interrupted=True)
    return phi.result()


def _shrink_bracket(phi, x, d, f0, slope0, b, fb, max_evals):
    """Too far at b: shrink toward 0 using the parabola through f0, slope0 and fb. Returns the
    bracket (a, fa, b, fb, c, fc), or None when no lower point was found."""
    while True:
        denom = 2.0 * (fb - f0 - slope0 * b)
        tq = -slope0 * b * b / denom if denom > 0 and math.isfinite(fb) else SHRINK_LIMITS[0] * b
        tq = min(max(tq, SHRINK_LIMITS[0] * b), SHRINK_LIMITS[1] * b)
        fq = phi(tq)
        if fq < f0:
            return 0.0, f0, tq, fq, b, fb
        b, fb = tq, fq
        # The step is below what double precision can move the weights by: give up.
        if b * np.max(np.abs(d)) <= 1e-15 * max(1.0, float(np.max(np.abs(x)))) \
                or phi.n >= max_evals:
            return None


def _grow_bracket(phi, f0, slope0, b, fb, max_evals):
    """Downhill at b: grow the step until the criterion rises again. Returns the bracket (a, fa,
    b, fb, c, fc), or None when the evaluations ran out first."""
    pts = [(0.0, f0), (b, fb)]
    while True:
        (t1, f1), (t2, f2) = pts[-2], pts[-1]
        if len(pts) == 2:
            cq = f2 - f0 - slope0 * t2
            tq = -slope0 * t2 * t2 / (2.0 * cq) if cq > 0 else math.inf
        else:
            tq = _parabola_min(pts[-3], pts[-2], pts[-1])
        growth = 2.0
        if math.isfinite(tq) and tq > t2:
            growth = min(max(tq / t2, 1.25), EXPAND_LIMIT)
        elif math.isfinite(tq):
            growth = 1.5          # the model puts the minimum behind us: a short look ahead
        tc = t2 * growth
        fc = phi(tc)
        if fc >= f2:
            return t1, f1, t2, f2, tc, fc
        pts.append((tc, fc))
        if phi.n >= max_evals:
            return None


def _parabola_min(p0, p1, p2):
    """The abscissa of the vertex of the parabola through three points, inf when it opens downward."""
    (x0, f0), (x1, f1), (x2, f2) = p0, p1, p2
    num = (x1 - x0) ** 2 * (f1 - f2) - (x1 - x2) ** 2 * (f1 - f0)
    den = (x1 - x0) * (f1 - f2) - (x1 - x2) * (f1 - f0)
    if den == 0:
        return math.inf
    t = x1 - 0.5 * num / den
    # Check convexity: the middle point must be below the chord.
    curv = ((f2 - f1) / (x2 - x1) - (f1 - f0) / (x1 - x0)) if (x2 != x1 and x1 != x0) else 0.0
    return t if curv > 0 else math.inf


class _Bracket:
    """Brent's points inside the bracket lo < hi: x the best, w the second best, v the third."""

    def __init__(self, a, fa, b, fb, c, fc):
        self.lo, self.hi = (a, c) if a < c else (c, a)
        self.x, self.fx = b, fb
        if fa <= fc:
            self.w, self.fw, self.v, self.fv = a, fa, c, fc
        else:
            self.w, self.fw, self.v, self.fv = c, fc, a, fa

    def parabolic_move(self, move, last_move, mid, tol1):
        """The vertex of the parabola through x, w and v as a move from x when it is safely
        inside the bracket and shrinks the move enough: (move, last_move, "parabolic"), or
        "done" when it is within tolerance of x, else "golden"."""
        x = self.x
        if abs(last_move) > tol1:
            r = (x - self.w) * (self.fx - self.fv)
            q = (x - self.v) * (self.fx - self.fw)
            p = (x - self.v) * q - (x - self.w) * r
            q = 2.0 * (q - r)
            if q > 0:
                p = -p
            q = abs(q)
            prev = last_move
            last_move = move
            if q > 0 and abs(p) < abs(0.5 * q * prev) and self.lo < x + p / q < self.hi:
                move = p / q
                if abs(move) < tol1:
                    return move, last_move, "done"
                u = x + move
                if u - self.lo < 2.0 * tol1 or self.hi - u < 2.0 * tol1:
                    move = tol1 if mid >= x else -tol1
                return move, last_move, "parabolic"
        return move, last_move, "golden"

    def add(self, u, fu):
        """Take the trial point u of criterion fu into the bracket and the three best points."""
        if fu <= self.fx:
            if u >= self.x:
                self.lo = self.x
            else:
                self.hi = self.x
            self.v, self.fv, self.w, self.fw = self.w, self.fw, self.x, self.fx
            self.x, self.fx = u, fu
            return
        if u < self.x:
            self.lo = u
        else:
            self.hi = u
        if fu <= self.fw or self.w == self.x:
            self.v, self.fv, self.w, self.fw = self.w, self.fw, u, fu
        elif fu <= self.fv or self.v == self.x or self.v == self.w:
            self.v, self.fv = u, fu


def _brent(phi, a, fa, b, fb, c, fc, rtol, max_evals):
    """Brent's minimization inside the bracket a < b < c (f(b) below both ends).

    Each trial is the vertex of the parabola through the three best points when that is safely inside
    the bracket and shrinks the step enough, else a golden-section step into the larger half. Starts
    with the parabola through the bracket itself. Stops when the bracket is narrower than rtol * b.
    """
    bracket = _Bracket(a, fa, b, fb, c, fc)
    # The last move and the one before it; starting them at the bracket width lets the first trial be
    # the parabola through the bracket.
    last_move = move = bracket.hi - bracket.lo
    for _ in range(max(0, max_evals)):
        mid = 0.5 * (bracket.lo + bracket.hi)
        tol1 = rtol * 0.5 * abs(bracket.x) + 1e-300
        if bracket.hi - bracket.lo <= 2.0 * tol1:
            break
        move, last_move, how = bracket.parabolic_move(move, last_move, mid, tol1)
        if how == "done":
            break             # the parabola's vertex is within tolerance of x
        if how == "golden":
            last_move = (bracket.lo - bracket.x) if bracket.x >= mid else (bracket.hi - bracket.x)
            move = GOLDEN * last_move
        u = bracket.x + (move if abs(move) >= tol1 else math.copysign(tol1, move))
        bracket.add(u, phi(u))
    return bracket.x, bracket.fx


def _cubic_min(t1, f1, s1, t2, f2, s2):
    """The minimizer of the cubic matching value and slope at t1 and t2 (nan when it has none)."""
    if t1 == t2:
        return math.nan
    d1 = s1 + s2 - 3.0 * (f1 - f2) / (t1 - t2)
    disc = d1 * d1 - s1 * s2
    if disc < 0 or not math.isfinite(disc):
        return math.nan
    d2 = math.copysign(math.sqrt(disc), t2 - t1)
    den = s2 - s1 + 2.0 * d2
    if den == 0:
        return math.nan
    return t2 - (t2 - t1) * (s2 + d2 - d1) / den


class HostLine:
    """The trial points x + t * d of one line search, each evaluated by fg(w) -> (criterion,
    gradient) on the host. An evaluator that can form the points itself (the device path keeps x
    and d there, so a trial costs no pass over the weights here) offers the same two methods
    through its ``line(x, d)``.

    trial: optional array like x that receives each point in turn (fg must not keep it), so that a
    search on many weights allocates nothing of their size; the values are those of ``x + t * d``
    to the last bit."""

    def __init__(self, fg, x, d, trial=None):
        self.fg, self.x, self.d, self.trial = fg, x, d, trial

    def evaluate(self, t):
        """(criterion, slope along d, handle of the gradient) at x + t * d; the slope is nan when
        the criterion is not finite."""
        if self.trial is None:
            w = self.x + t * self.d
        else:
            step_into(self.trial, self.x, t, self.d)
            w = self.trial
        f, g = self.fg(w)
        s = float(g @ self.d) if (f is not None and math.isfinite(f)) else math.nan
        return f, s, g

    def gradient(self, handle):
        """The gradient (float64 array) of the evaluation that returned ``handle``."""
        return handle


class _SlopeSearch:
    """The state of one slope line search (see :func:`line_search_slopes`): its trial points'
    evaluator, the evaluations made, and the lowest point seen."""

    def __init__(self, line, f0, slope0, stop, sigma, c1, max_evals):
        self.line, self.f0, self.slope0, self.stop = line, f0, slope0, stop
        self.c1, self.max_evals = c1, max_evals
        self.target = -sigma * slope0
        self.best = (0.0, f0, None)
        self.n = 0

    def probe(self, t):
        f, s, g = self.line.evaluate(t)
        self.n += 1
        f = _finite(f)
        if not math.isfinite(f) or not math.isfinite(s):
            f, s = math.inf, math.nan
        if f < self.best[1]:
            self.best = (t, f, g)
        if self.stop is not None and self.stop():
            raise _Stop
        return f, s, g

    def result(self, t, f, g, interrupted=False):
        r = LineResult(t, f, self.n, interrupted)
        r.gradient = None if g is None else self.line.gradient(g)
        return r

    def too_high(self, t, f):
        """Not sufficiently lower than the start (c1), or not finite."""
        return not math.isfinite(f) or f > self.f0 + self.c1 * t * self.slope0

    def bracket(self, t):
        """Phase 1: grow the trial step from t until the minimum is bracketed. Returns (lo, hi)
        as (t, f, slope) triples, or the accepted LineResult, or None when the evaluations ran
        out first."""
        prev = (0.0, self.f0, self.slope0)
        while self.n < self.max_evals:
            f, s, g = self.probe(t)
            if self.too_high(t, f) or (prev[0] > 0 and f >= prev[1]):
                return prev, (t, f, s)
            if abs(s) <= self.target:
                return self.result(t, f, g)
            if s >= 0:
                return (t, f, s), prev
            # Still going down steeply: extrapolate.
            tc = _cubic_min(prev[0], prev[1], prev[2], t, f, s)
            if not (math.isfinite(tc) and tc > t):
                tc = EXPAND_LIMIT * t
            tc = min(max(tc, 1.5 * t), EXPAND_LIMIT * t)
            prev, t = (t, f, s), tc
        return None

    def narrow(self, lo, hi):
        """Phase 2: narrow the bracket (lo, hi) until a point is accepted (its LineResult) or the
        evaluations run out or the bracket vanishes (None)."""
        while self.n < self.max_evals:
            (ta, fa, sa), (tb, fb, sb) = lo, hi
            width = abs(tb - ta)
            t = _narrowing_trial(ta, fa, sa, tb, fb, sb, width)
            if width <= 1e-12 * max(abs(ta), abs(tb)):
                return None
            f, s, g = self.probe(t)
            if self.too_high(t, f) or f >= fa:
                hi = (t, f, s)
            else:
                if abs(s) <= self.target:
                    return self.result(t, f, g)
                if s * (tb - ta) >= 0:
                    hi = lo
                lo = (t, f, s)
        return None


def _narrowing_trial(ta, fa, sa, tb, fb, sb, width):
    """The next trial inside the bracket: the safeguarded cubic's minimizer, kept 10 percent of
    the width away from the ends (else the quadratic through lo's value and slope and hi's value,
    else bisection); a long way back toward lo when hi overflowed."""
    lo_end, hi_end = min(ta, tb) + 0.1 * width, max(ta, tb) - 0.1 * width
    if math.isfinite(fb) and math.isfinite(sb):
        t = _cubic_min(ta, fa, sa, tb, fb, sb)
    else:
        t = math.nan
    if not math.isfinite(fb):
        t = ta + 0.1 * (tb - ta)      # the far end overflowed: come back a long way
    elif not math.isfinite(t) or not (lo_end <= t <= hi_end):
        if not math.isfinite(t):
            denom = 2.0 * (fb - fa - sa * (tb - ta))
            t = ta - sa * (tb - ta) ** 2 / denom if denom > 0 else 0.5 * (ta + tb)
        t = min(max(t, lo_end), hi_end)
    return t


def line_search_slopes(fg, x, d, f0, slope0, step0, stop=None, sigma=0.1, c1=1e-4, max_evals=20,
                       trial=None, line=None):
    """Line minimization along d using the criterion and its slope at every trial point.

    fg(w) -> (criterion, gradient). Phase 1 grows the trial step (cubic extrapolation, at most
    EXPAND_LIMIT times per trial) until the minimum is bracketed: the criterion rises, stops
    decreasing enough, or the slope turns positive. Phase 2 narrows the bracket with safeguarded cubic
    interpolation (each trial kept at least 10 percent of the bracket away from its ends). A point is
    accepted as soon as it is sufficiently lower than the start (c1) and its slope has fallen to
    ``sigma`` times the starting slope in size (the strong Wolfe conditions), which makes the next
    conjugate direction a descent direction in practice. Returns a LineResult whose ``gradient``
    attribute holds the gradient at the accepted point (None when step is 0).

    trial: see :class:`HostLine`. line: the points' evaluator (``evaluate(t)`` and
    ``gradient(handle)``, as HostLine has them); by default ``HostLine(fg, x, d, trial)``, and fg,
    x, d and trial are then not used otherwise.
    """
    if line is None:
        line = HostLine(fg, x, d, trial)
    search = _SlopeSearch(line, f0, slope0, stop, sigma, c1, max_evals)
    try:
        found = search.bracket(step0)
        if isinstance(found, tuple):
            found = search.narrow(*found)
        if found is not None:
            return found
    except _Stop:
        return search.result(*search.best, interrupted=True)
    return search.result(*search.best)


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

    def _iterated(self, it, f, step, w):
        self.hold(w)
        self.step_lengths.append(step)
        self.context.log.write(f"Iteration {it} criterion = {f:.6g} step = {step:.4g}")
        self.context.report(self, it, f, f)

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
            log.write("WARNING... User pressed ESCape during optimization")
            log.write("Results are incomplete and may be seriously incorrect")
        log.write(f"Refinement: {result.steps} iterations ({result.evaluations['gradient']} "
                  f"gradient and {result.evaluations['criterion']} criterion evaluations), "
                  f"{result.seconds:.2f} seconds, ended because {result.stop_words}")
