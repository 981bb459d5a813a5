"""Plots drawn with matplotlib (the Agg canvas, no window, no pyplot state).

Margins are fixed rather than computed (tight_layout): computing them took about 40 % of the
drawing time, which matters to a report rewritten while training runs.

One home for every chart the program draws: the criterion curve of a TRAIN, one panel per phase
(``criterion.png``, ``convnet log plot``, the run report), the confusion matrix as a heat map with
its counts, and the last phase's curves of several runs overlaid (the batch report). Each builder
returns a matplotlib ``Figure``; ``save_png`` writes one as a PNG and ``svg_markup`` gives it as
SVG text to put inside an HTML page (text stays text, so a browser can select and search it).
"""

import functools
import io
import math

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter, MaxNLocator, NullLocator
import matplotlib

from ..errors import ConvnetError

SCATTER_COLOUR = "#c86e14"           # a scattered phase's best criterion so far (annealing)
SCATTER_POINTS = "#f0c8a0"           # each step of a scattered phase
LINE_COLOUR = "#1e5ab4"              # a phase drawn as a curve (refinement)
OTHER_RUNS = "#9aa5b8"               # overlaid curves other than the best one
HEAT_MAP = "Blues"
MAX_MARKERS = 60                     # a refinement curve with more points is drawn without markers
MAX_ANNOTATED_CLASSES = 20           # a larger confusion matrix is drawn without its counts
MAX_DRAWN = 2000                     # points drawn per series (more are thinned, evenly)
DPI = 100


# Titles stay at the top of their axes (matplotlib otherwise measures every tick label of an axes
# at each drawing to move its title clear of them: a third of the drawing time, for axes that
# have nothing above them).
STYLE = {"axes.titley": 1.0}


def styled(builder):
    """A builder whose axes are made with STYLE."""
    @functools.wraps(builder)
    def build(*args, **kwargs):
        with matplotlib.rc_context(STYLE):
            return builder(*args, **kwargs)
    return build


def figure(width, height):
    """A Figure of ``width`` x ``height`` pixels on the Agg canvas."""
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def finite_points(points):
    """(x, y) pairs with a finite y, as floats (a non-finite criterion cannot be drawn)."""
    return [(float(x), float(y)) for x, y in points if y is not None and math.isfinite(y)]


def wants_log_scale(values, ratio=30.0):
    """True when positive values span more than ``ratio`` (a falling criterion near zero)."""
    finite = [v for v in values if math.isfinite(v)]
    return bool(finite) and min(finite) > 0 and max(finite) / min(finite) > ratio


def best_so_far(points):
    """The running minimum of (x, y) points as steps: a point where it falls, and the last one."""
    out, low = [], math.inf
    for x, y in points:
        if y < low:
            low = y
            out.append((x, low))
    if points and out and out[-1][0] != points[-1][0]:
        out.append((points[-1][0], low))
    return out


def thin(points, limit=MAX_DRAWN):
    """At most about ``limit`` of ``points``, evenly spread, the first and last always kept (a
    million annealing evaluations would take minutes to draw and say no more)."""
    if len(points) <= limit:
        return points
    stride = math.ceil(len(points) / limit)
    kept = points[::stride]
    return kept if kept[-1] is points[-1] else kept + [points[-1]]


def _empty(ax, note):
    ax.text(0.5, 0.5, note, ha="center", va="center", transform=ax.transAxes, color="#555555")
    ax.set_xticks([])
    ax.set_yticks([])


def _xy(points):
    return [p[0] for p in points], [p[1] for p in points]


def log_y_axis(ax, values):
    """A logarithmic y axis for positive values, its labels plain text (matplotlib's mathematical
    text took a fifth of a criterion figure's drawing); minor ticks only where the values span
    less than two decades (over two, two powers of ten at least are labelled, and the ticks were
    most of the rest of the drawing)."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(LogFormatter())
    finite = [v for v in values if v > 0 and math.isfinite(v)]
    if finite and max(finite) >= 100 * min(finite):
        ax.yaxis.set_minor_locator(NullLocator())
    else:
        ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


@styled
def criterion_figure(phases, title=None, size=(1040, 430)):
    """A TRAIN's criterion curve: one panel per phase, left to right.

    phases: the phases of the TRAIN, each a mapping or an object with name, title, unit, chart
    ("scatter": every step as a point and the best so far as steps; "line": a curve, on a
    logarithmic scale when it falls far), trace ((step, criterion) points) and criterion (named
    when the trace itself is unknown).
    """
    fig = figure(*size)
    phases = list(phases)
    axes = fig.subplots(1, max(1, len(phases)), squeeze=False)[0]
    for ax, phase in zip(axes, phases):
        _phase_panel(ax, _field(phase, "title") or _field(phase, "name"), _field(phase, "unit"),
                     _field(phase, "chart"), _field(phase, "trace") or [],
                     _field(phase, "criterion"))
    if not phases:
        _empty(axes[0], "no phases recorded")
    if title:
        fig.suptitle(title)
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.13, top=0.84 if title else 0.9,
                        wspace=0.3)
    return fig


def _field(phase, name):
    """A phase's field, whether the phase is a mapping (results data) or an object."""
    return phase.get(name) if isinstance(phase, dict) else getattr(phase, name, None)


def _phase_panel(ax, title, unit, chart, trace, result):
    """One phase's panel (see criterion_figure)."""
    unit = unit or "step"
    points = finite_points(trace)
    if not points:
        note = f"no {unit}s"
        if result is not None and math.isfinite(result):
            note = f"result {result:.6g}\n({unit}s not recorded)"
        _empty(ax, note)
    elif chart == "scatter":
        ax.scatter(*_xy(thin(points)), s=9, color=SCATTER_POINTS, label=f"each {unit}", zorder=2)
        ax.plot(*_xy(thin(best_so_far(points))), color=SCATTER_COLOUR, linewidth=2,
                drawstyle="steps-post", label="best so far", zorder=3)
        ax.legend(loc="upper right", fontsize="small")
        ax.set_ylabel("criterion")
    else:
        points = thin(points)
        values = [y for _, y in points]
        log_y = wants_log_scale(values)
        ax.plot(*_xy(points), color=LINE_COLOUR, linewidth=2,
                marker="o" if len(points) <= MAX_MARKERS else None, markersize=3,
                label="criterion")
        if log_y:
            log_y_axis(ax, values)
        ax.set_ylabel("criterion (logarithmic scale)" if log_y else "criterion")
    if points:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(unit)
        ax.grid(True, color="#e1e1e1")
    ax.set_title(title)


@styled
def validation_figure(checks, target=None, cases="validation", size=(1040, 360)):
    """A TRAIN's validation checks (results data: phase, step, seconds, error): the
    misclassification against seconds since TRAIN began, and against each phase's steps; a
    dashed line at the ``target`` error when there is one. ``cases``: what was checked
    ("validation" or "training")."""
    fig = figure(*size)
    by_time, by_step = fig.subplots(1, 2, squeeze=False)[0]
    points = [c for c in checks if c.get("error") is not None]
    if not points:
        _empty(by_time, "no checks yet")
        _empty(by_step, "no checks yet")
        return fig
    label = f"{cases} error %"
    by_time.plot([c["seconds"] for c in points], [c["error"] for c in points], color=LINE_COLOUR,
                 marker="o", markersize=3, linewidth=2)
    by_time.set_xlabel("seconds since TRAIN began")
    phases = list(dict.fromkeys(c["phase"] for c in points))
    for phase in phases:
        mine = [c for c in points if c["phase"] == phase]
        by_step.plot([c["step"] for c in mine], [c["error"] for c in mine], marker="o",
                     markersize=3, linewidth=2, label=phase)
    by_step.set_xlabel("step of its phase")
    by_step.xaxis.set_major_locator(MaxNLocator(integer=True))
    by_step.legend(loc="upper right", fontsize="small")
    for ax in (by_time, by_step):
        if target is not None:
            ax.axhline(target, color=SCATTER_COLOUR, linestyle="--", linewidth=1)
        ax.set_ylabel(label)
        ax.grid(True, color="#e1e1e1")
    fig.subplots_adjust(left=0.08, right=0.97, bottom=0.15, top=0.93, wspace=0.25)
    return fig


@styled
def confusion_figure(matrix, title=None, class_names=None):
    """The confusion matrix as a heat map: the colour is the row percent (so classes of different
    sizes compare), each cell shows its count. Rows are true classes, columns predicted, from 1,
    or by their names when ``class_names`` are given."""
    matrix = np.asarray(matrix, dtype=np.int64)
    n_classes = matrix.shape[0]
    side = int(min(800, max(220, 40 * n_classes + 60)))               # the square of cells, pixels
    left, bottom, top, bar, gap, label = 60, 50, 35, 16, 14, 70
    if class_names:                      # room for the names beside and below the cells
        longest = min(30, max(len(str(name)) for name in class_names))
        left, bottom = left + 6 * longest, bottom + 5 * longest
    width, height = left + side + gap + bar + label, bottom + side + top
    fig = figure(width, height)
    ax = fig.add_axes([left / width, bottom / height, side / width, side / height])
    bar_ax = fig.add_axes([(left + side + gap) / width, bottom / height, bar / width,
                           side / height])
    totals = matrix.sum(axis=1, keepdims=True)
    percent = np.divide(100.0 * matrix, totals, out=np.zeros(matrix.shape), where=totals > 0)
    image = ax.imshow(percent, cmap=HEAT_MAP, vmin=0.0, vmax=100.0, aspect="auto")
    fig.colorbar(image, cax=bar_ax, label="percent of the true class")
    ticks = (list(range(n_classes)) if n_classes <= MAX_ANNOTATED_CLASSES
             else list(range(0, n_classes, max(1, n_classes // 10))))
    labels = [class_names[t] if class_names else str(t + 1) for t in ticks]
    ax.set_xticks(ticks, labels, rotation=45 if class_names else 0,
                  ha="right" if class_names else "center")
    ax.set_yticks(ticks, labels)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    if n_classes <= MAX_ANNOTATED_CLASSES:
        for i in range(n_classes):
            for j in range(n_classes):
                ax.text(j, i, str(int(matrix[i, j])), ha="center", va="center", fontsize="small",
                        color="white" if percent[i, j] > 55 else "black")
    if title:
        ax.set_title(title)
    return fig


@styled
def overlay_figure(curves, best=None, title="Refinement of every run", size=(900, 420),
                   unit="iteration"):
    """The last phase's curves of several runs on one chart; ``curves`` is a list of (label,
    points), ``best`` the index of the run to mark (drawn last, thick, in the line colour);
    ``unit`` what a step of the phase is."""
    fig = figure(*size)
    ax = fig.subplots()
    drawn = [(i, label, thin(finite_points(points))) for i, (label, points) in enumerate(curves)]
    drawn = [d for d in drawn if d[2]]
    if not drawn:
        _empty(ax, f"no {unit}s recorded")
        ax.set_title(title)
        return fig
    for i, label, points in drawn:
        if i != best:
            ax.plot(*_xy(points), color=OTHER_RUNS, linewidth=1, label=label)
    for i, label, points in drawn:
        if i == best:
            ax.plot(*_xy(points), color=LINE_COLOUR, linewidth=2.5, label=f"{label} (best)")
    values = [y for _, _, pts in drawn for _, y in pts]
    if wants_log_scale(values):
        log_y_axis(ax, values)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(unit)
    ax.set_ylabel("criterion")
    ax.grid(True, color="#e1e1e1")
    if len(drawn) <= 12:
        ax.legend(loc="upper right", fontsize="small")
    ax.set_title(title)
    fig.subplots_adjust(left=0.11, right=0.98, bottom=0.12, top=0.9)
    return fig


def save_png(fig, path):
    """Write a figure as a PNG (a user error when the file cannot be written)."""
    try:
        fig.savefig(path, format="png")
    except OSError as e:
        raise ConvnetError(f"cannot write {path}: {e.strerror or e}") from None
    return path


def png_bytes(fig):
    """The figure as PNG bytes (what save_png writes)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def svg_markup(fig):
    """The figure as an ``<svg>`` element (no XML prolog), its text kept as text."""
    buffer = io.StringIO()
    # no date and a fixed salt for the element ids: the same figure gives the same text
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "convnet"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.index("<svg"):]


# ------------------------------------------------------------------- the curve of one TRAIN
def log_curve(run, path, title=None):
    """``convnet log plot``: the criterion curve of a TRAIN read back from a run (a reader Run)."""
    if run.command != "TRAIN":
        raise ConvnetError("only a TRAIN has a criterion curve")
    if not any(p.trace or p.criterion is not None for p in run.phases):
        raise ConvnetError(f"TRAIN {run.index} of the log records no criterion to plot")
    return save_png(criterion_figure(run.phases, title=title), path)


# ------------------------------------------------------------------- a sweep's measures
@styled
def errorbar_figure(ticks, series, title, xlabel, ylabel, size=(520, 340)):
    """Means with error bars against the values of one swept name: ``ticks`` the values (drawn
    evenly, in order), ``series`` a list of (label, [(mean or None, half-width or None)] per
    tick), one line per combination of the other swept names."""
    fig = figure(*size)
    ax = fig.subplots()
    positions = list(range(len(ticks)))
    drawn = 0
    for k, (label, points) in enumerate(series):
        xs = [x + 0.04 * (k - (len(series) - 1) / 2) for x, (m, _) in zip(positions, points)
              if m is not None and math.isfinite(m)]
        kept = [(m, h) for m, h in points if m is not None and math.isfinite(m)]
        if not kept:
            continue
        drawn += 1
        ax.errorbar(xs, [m for m, _ in kept], yerr=[h or 0.0 for _, h in kept], marker="o",
                    capsize=4, linewidth=1.5, label=label or None)
    if not drawn:
        _empty(ax, "no values recorded")
    ax.set_xticks(positions)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, color="#e1e1e1")
    if 1 < drawn <= 8:
        ax.legend(loc="best", fontsize="small")
    ax.set_title(title, fontsize="medium")
    fig.subplots_adjust(left=0.16, right=0.97, bottom=0.15, top=0.88)
    return fig
