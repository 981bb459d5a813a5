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


def line_minimize(func, x, d, f0, slope0, step0, stop=None, rtol=0.1, max_evals=30):
    """Minimize ``func(x + t * d)`` over t > 0, approximately.

    f0 = func(x); slope0 = the directional derivative at t = 0 (must be negative); step0 > 0 the first
    trial step. ``stop()`` (optional) is asked after every evaluation; when it says True the search ends
    at once with the best point seen so far. ``rtol``: the bracket is refined until its width is below
    rtol times the step (a loose search is enough for conjugate gradients, but a too loose one costs
    conjugacy). Returns a LineResult; step 0.0 means no lower point was found.
    """
    best = [0.0, f0]
    n = [0]

    def phi(t):
        f = _finite(func(x + t * d))
        n[0] += 1
        if f < best[1]:
            best[0], best[1] = t, f
        if stop is not None and stop():
            raise _Stop
        return f

    try:
        a, fa = 0.0, f0
        b = step0
        fb = phi(b)
        if fb >= f0:
            # Too far: shrink toward 0 using the parabola through f0, slope0 and fb.
            while True:
                denom = 2.0 * (fb - f0 - slope0 * b)
                tq = -slope0 * b * b / denom if denom > 0 and math.isfinite(fb) else SHRINK_LIMITS[0] * b
                tq = min(max(tq, SHRINK_LIMITS[0] * b), SHRINK_LIMITS[1] * b)
                fq = phi(tq)
                if fq < f0:
                    a, fa, c, fc, b, fb = 0.0, f0, b, fb, tq, fq
                    break
                b, fb = tq, fq
                # The step is below what double precision can move the weights by: give up.
                if b * np.max(np.abs(d)) <= 1e-15 * max(1.0, float(np.max(np.abs(x)))) \
                        or n[0] >= max_evals:
                    return LineResult(best[0], best[1], n[0])
        else:
            # Downhill at b: grow the step until the criterion rises again.
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
                    a, fa, b, fb, c, fc = t1, f1, t2, f2, tc, fc
                    break
                pts.append((tc, fc))
                if n[0] >= max_evals:
                    return LineResult(best[0], best[1], n[0])
        # The minimum lies in (a, c) and fb is below both ends: refine.
        _brent(phi, a, fa, b, fb, c, fc, rtol, max_evals - n[0])
    except _Stop:
        return LineResult(best[0], best[1], n[0], interrupted=True)
    return LineResult(best[0], best[1], n[0])


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


def _brent(phi, a, fa, b, fb, c, fc, rtol, max_evals):
    """Brent's minimization inside the bracket a < b < c (f(b) below both ends).

    Each trial is the vertex of the parabola through the three best points when that is safely inside
    the bracket and shrinks the step enough, else a golden-section step into the larger half. Starts
    with the parabola through the bracket itself. Stops when the bracket is narrower than rtol * b.
    """
    lo, hi = (a, c) if a < c else (c, a)
    x, fx = b, fb
    # w: second best, v: third best point.
    if fa <= fc:
        w, fw, v, fv = a, fa, c, fc
    else:
        w, fw, v, fv = c, fc, a, fa
    # The last move and the one before it; starting them at the bracket width lets the first trial be
    # the parabola through the bracket.
    last_move = move = hi - lo
    for _ in range(max(0, max_evals)):
        mid = 0.5 * (lo + hi)
        tol1 = rtol * 0.5 * abs(x) + 1e-300
        if hi - lo <= 2.0 * tol1:
            break
        parabolic = False
        if abs(last_move) > tol1:
            r = (x - w) * (fx - fv)
            q = (x - v) * (fx - fw)
            p = (x - v) * q - (x - w) * r
            q = 2.0 * (q - r)
            if q > 0:
                p = -p
            q = abs(q)
            prev = last_move
            last_move = move
            if q > 0 and abs(p) < abs(0.5 * q * prev) and lo < x + p / q < hi:
                move = p / q
                if abs(move) < tol1:
                    break             # the parabola's vertex is within tolerance of x: done
                u = x + move
                if u - lo < 2.0 * tol1 or hi - u < 2.0 * tol1:
                    move = tol1 if mid >= x else -tol1
                parabolic = True
        if not parabolic:
            last_move = (lo - x) if x >= mid else (hi - x)
            move = GOLDEN * last_move
        u = x + (move if abs(move) >= tol1 else math.copysign(tol1, move))
        fu = phi(u)
        if fu <= fx:
            if u >= x:
                lo = x
            else:
                hi = x
            v, fv, w, fw, x, fx = w, fw, x, fx, u, fu
        else:
            if u < x:
                lo = u
            else:
                hi = u
            if fu <= fw or w == x:
                v, fv, w, fw = w, fw, u, fu
            elif fu <= fv or v == x or v == w:
                v, fv = u, fu
    return x, fx



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
    best = [0.0, f0, None]
    n = [0]
    target = -sigma * slope0

    def probe(t):
        f, s, g = line.evaluate(t)
        n[0] += 1
        f = _finite(f)
        if not math.isfinite(f) or not math.isfinite(s):
            f, s = math.inf, math.nan
        if f < best[1]:
            best[0], best[1], best[2] = t, f, g
        if stop is not None and stop():
            raise _Stop
        return f, s, g

    def result(t, f, g, interrupted=False):
        r = LineResult(t, f, n[0], interrupted)
        r.gradient = None if g is None else line.gradient(g)
        return r

    try:
        prev = (0.0, f0, slope0)
        t = step0
        lo = hi = None
        while n[0] < max_evals:
            f, s, g = probe(t)
            if not math.isfinite(f) or f > f0 + c1 * t * slope0 or (prev[0] > 0 and f >= prev[1]):
                lo, hi = prev, (t, f, s)
                break
            if abs(s) <= target:
                return result(t, f, g)
            if s >= 0:
                lo, hi = (t, f, s), prev
                break
            # Still going down steeply: extrapolate.
            tc = _cubic_min(prev[0], prev[1], prev[2], t, f, s)
            if not (math.isfinite(tc) and tc > t):
                tc = EXPAND_LIMIT * t
            tc = min(max(tc, 1.5 * t), EXPAND_LIMIT * t)
            prev, t = (t, f, s), tc
        while hi is not None and n[0] < max_evals:
            (ta, fa, sa), (tb, fb, sb) = lo, hi
            width = abs(tb - ta)
            lo_end, hi_end = min(ta, tb) + 0.1 * width, max(ta, tb) - 0.1 * width
            if math.isfinite(fb) and math.isfinite(sb):
                t = _cubic_min(ta, fa, sa, tb, fb, sb)
            else:
                t = math.nan
            if not math.isfinite(fb):
                t = ta + 0.1 * (tb - ta)      # the far end overflowed: come back a long way
            elif not math.isfinite(t) or not (lo_end <= t <= hi_end):
                if not math.isfinite(t):
                    # Quadratic through lo's value and slope and hi's value, else bisection.
                    denom = 2.0 * (fb - fa - sa * (tb - ta))
                    t = ta - sa * (tb - ta) ** 2 / denom if denom > 0 else 0.5 * (ta + tb)
                t = min(max(t, lo_end), hi_end)
            if width <= 1e-12 * max(abs(ta), abs(tb)):
                break
            f, s, g = probe(t)
            if not math.isfinite(f) or f > f0 + c1 * t * slope0 or f >= fa:
                hi = (t, f, s)
            else:
                if abs(s) <= target:
                    return result(t, f, g)
                if s * (tb - ta) >= 0:
                    hi = lo
                lo = (t, f, s)
    except _Stop:
        return result(best[0], best[1], best[2], interrupted=True)
    return result(best[0], best[1], best[2])

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
    V = HOST_VECTORS if vectors is None else vectors
    if V is not HOST_VECTORS and (line is None or line_search != "slopes" or preconditioner is not None):
        raise ValueError("vectors kept away from the host need their line, the slope search and no "
                         "preconditioner")
    x = V.copy(x0)
    if sigma is None:
        sigma = WOLFE_SIGMA
    sc = None if preconditioner is None else np.asarray(preconditioner, dtype=np.float64)
    n_func = 0
    n_grad = 0

    def func_counted(w):
        nonlocal n_func
        n_func += 1
        return func(w)

    def grad_counted(w):
        nonlocal n_grad
        n_grad += 1
        return grad(w)

    f, g = grad_counted(V.host(x))
    f = _finite(f)
    history = [(0, f, 0.0)]
    if not math.isfinite(f) or max_iters <= 0:
        return CGResult(V.result(x), f, 0, n_func, n_grad, history,
                        "no progress" if not math.isfinite(f) else "maxiters")

    def scaled(vec):
        return vec if sc is None else vec * sc

    # In the scaled coordinates the gradient is s * g and a direction dv moves the weights by s * dv.
    gv = V.array(scaled(g))
    dv = V.neg(gv)
    gg = V.dot(gv, gv)
    # The host's trial points go to one array allocated once, and the vector updates are single
    # passes (vectors.py): on large nets fresh arrays and repeated passes every evaluation cost as
    # much as the arithmetic.
    trial = np.empty_like(x) if line is None else None
    steepest = True
    small = 0
    prev_step = prev_slope = None
    stop_reason = "maxiters"
    it = 0
    while it < max_iters:
        if stop is not None and stop():
            stop_reason = "interrupt"
            break
        if gg == 0.0 or not math.isfinite(gg):
            stop_reason = "zero gradient"
            break
        slope = V.dot(gv, dv)
        if not (slope < 0.0 and math.isfinite(slope)):
            dv = V.neg(gv)               # not a descent direction: restart along the gradient
            slope = -gg
            steepest = True
        d = scaled(dv)
        dnorm = V.norm(d)
        if prev_step is None:
            xnorm = V.norm(x)
            t0 = first_move * (xnorm if xnorm > 0 else 0.01 * math.sqrt(x.size)) / dnorm
        else:
            # The previous step rescaled by the ratio of directional derivatives, within limits.
            t0 = prev_step * prev_slope / slope
            t0 = min(max(t0, 0.01 * prev_step), 100.0 * prev_step)
        if line_search == "slopes":
            points = HostLine(grad, x, d, trial) if line is None else line(x, d)
            res = line_search_slopes(None, x, d, f, slope, t0, stop=stop, sigma=sigma, line=points)
            n_grad += res.n_evals
            g_new = res.gradient
        else:
            res = line_minimize(func_counted, x, d, f, slope, t0, stop=stop, rtol=rtol)
            g_new = None
        it += 1
        if not (res.step > 0.0 and res.criterion < f):
            history.append((it, f, 0.0))
            if on_iter is not None:
                on_iter(it, f, 0.0, V.host(x))
            if res.interrupted:
                stop_reason = "interrupt"
                break
            if steepest:
                stop_reason = "no progress"
                break
            dv = V.neg(gv)               # a conjugate direction that gave nothing: try the gradient
            steepest = True
            prev_step = None
            continue
        # x + step * d in place: the very point the line search evaluated, to the last bit
        V.step_into(x, x, res.step, d)
        x_new = x
        step_len = res.step * dnorm
        f_new = res.criterion
        if res.interrupted:
            x, f = x_new, f_new
            history.append((it, f, step_len))
            if on_iter is not None:
                on_iter(it, f, step_len, V.host(x))
            stop_reason = "interrupt"
            break
        if g_new is None:
            f_check, g_new = grad_counted(x_new)
            # The criterion is deterministic, so f_check equals f_new; keep the lower to be safe.
            f_new = min(f_new, _finite(f_check))
        improvement = (f - f_new) / max(abs(f), 1e-300)
        x, f = x_new, f_new
        history.append((it, f, step_len))
        if on_iter is not None:
            on_iter(it, f, step_len, V.host(x))
        gv_new = V.array(scaled(g_new))
        gg_new, change = V.dot_and_change(gv_new, gv)
        prev_step, prev_slope = res.step, slope
        if improvement < tol:
            small += 1
            if small >= patience:
                stop_reason = "tol"
                break
            beta = 0.0                   # a small improvement: restart along the gradient
        else:
            small = 0
            beta = max(0.0, change / gg)                          # Polak-Ribiere, clipped
        V.new_direction(dv, beta, gv_new)    # dv = -gv_new + beta * dv, in place
        steepest = beta == 0.0
        gv, gg = gv_new, gg_new
    return CGResult(V.result(x), f, it, n_func, n_grad, history, stop_reason)
