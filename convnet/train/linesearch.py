"""Line minimizations along a search direction, for the conjugate-gradient refinement (conjgrad.py).

Two searches: ``line_search_slopes`` (a gradient at every trial point: the criterion and its slope
along the direction; bracketing, then safeguarded cubic interpolation until the strong Wolfe
condition holds) and ``line_minimize`` (criterion values only: bracketing by expansion or parabolic
shrinking, then Brent's parabolic / golden-section search). ``HostLine`` forms the slope search's
trial points on the host; an evaluator may offer its own (the device's).
"""

import math
from dataclasses import dataclass
import numpy as np

from ..vectors import step_into

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
