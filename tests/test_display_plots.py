"""Plots (matplotlib): the criterion curve, the confusion heat map, overlaid curves.

The figures are checked through what matplotlib was asked to draw (the data of each line, the axis
scales, the texts), and the files they become are decoded and checked to be pictures, not blanks.
"""

import math
import re

import numpy as np
import pytest
from PIL import Image

from convnet.display import plots
from convnet.errors import ConvnetError


def lines_by_label(ax):
    return {line.get_label(): line for line in ax.get_lines()}


def book_phases(annealing, refinement, annealing_result=None):
    """The book's two phases as results data."""
    return [{"name": "annealing", "title": "Simulated annealing", "unit": "evaluation",
             "chart": "scatter", "trace": annealing, "criterion": annealing_result},
            {"name": "refinement", "title": "Conjugate-gradient refinement", "unit": "iteration",
             "chart": "line", "trace": refinement}]


def test_criterion_figure_draws_each_phase_in_its_panel(tmp_path):
    annealing = [(k, 1.0 + 0.5 * math.sin(k) + 1.0 / k) for k in range(1, 41)]
    annealing.append((41, float("inf")))                 # a non-finite evaluation is left out
    refinement = [(i, 0.9 * 0.8 ** i + 0.1) for i in range(0, 16)]
    fig = plots.criterion_figure(book_phases(annealing, refinement), title="a title")
    left, right = fig.axes
    assert left.get_title() == "Simulated annealing"
    assert right.get_title() == "Conjugate-gradient refinement"
    best = lines_by_label(left)["best so far"]
    xs, ys = best.get_xdata(), best.get_ydata()
    assert best.get_drawstyle() == "steps-post" and xs[0] == 1
    assert xs[-1] == 40                                  # evaluation 41 (infinite) not drawn
    assert all(b < a for a, b in zip(ys[:-2], ys[1:-1])) # the best so far only falls
    assert ys[-1] == ys[-2] == min(y for _, y in annealing[:-1])
    for x, y in zip(xs[:-1], ys[:-1]):                   # each step is where an evaluation fell
        assert y == min(v for k, v in annealing[:-1] if k <= x) == dict(annealing)[x]
    scatter = left.collections[0].get_offsets()
    assert scatter.shape == (40, 2)
    line = lines_by_label(right)["criterion"]
    assert list(line.get_xdata()) == list(range(16))
    assert np.allclose(line.get_ydata(), [y for _, y in refinement])
    assert right.get_yscale() == "linear"                # 1.0 .. 0.13: no log scale needed
    path = plots.save_png(fig, str(tmp_path / "curve.png"))
    with Image.open(path) as im:
        assert im.format == "PNG" and im.size == (1040, 430)
        pixels = np.asarray(im.convert("RGB"))
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 20        # not a blank picture
    blue = np.all(np.abs(pixels.astype(int) - [0x1e, 0x5a, 0xb4]) < 8, axis=2)
    assert blue[:, 520:].sum() > 200 and blue[:, :520].sum() == 0    # refinement on the right


def test_criterion_figure_goes_logarithmic_for_a_criterion_falling_to_near_zero():
    refinement = [(i, 10.0 ** -i) for i in range(8)]
    fig = plots.criterion_figure(book_phases([], refinement, annealing_result=1.0))
    left, right = fig.axes
    assert right.get_yscale() == "log" and "logarithmic" in right.get_ylabel()
    assert "result 1\n(evaluations not recorded)" in " ".join(t.get_text() for t in left.texts)


def test_criterion_figure_draws_any_phases_of_any_names():
    """A method of three phases, given as objects: three panels, each titled and labelled by its
    phase's own words."""
    from convnet.train.phase import PhaseResult
    phases = [PhaseResult("warm", "Warm start", "trial", "scatter", [(1, 3.0), (2, 2.0)]),
              PhaseResult("batches", "Mini-batches", "epoch", "line", [(0, 2.0), (1, 1.5)]),
              PhaseResult("polish", "Polish", "iteration", "line", [], criterion=1.4)]
    fig = plots.criterion_figure(phases)
    assert [ax.get_title() for ax in fig.axes] == ["Warm start", "Mini-batches", "Polish"]
    assert [ax.get_xlabel() for ax in fig.axes[:2]] == ["trial", "epoch"]
    assert fig.axes[0].collections[0].get_label() == "each trial"
    assert "result 1.4" in " ".join(t.get_text() for t in fig.axes[2].texts)


def test_confusion_figure_shows_every_count_and_colours_by_row_percent():
    matrix = np.array([[8, 2, 0], [0, 1, 0], [5, 0, 5]])
    fig = plots.confusion_figure(matrix, title="TRAIN 1")
    ax = fig.axes[0]
    counts = [t.get_text() for t in ax.texts]
    assert counts == [str(v) for v in matrix.ravel()]
    shown = ax.images[0].get_array()
    assert np.allclose(shown[1], [0, 100, 0]) and np.allclose(shown[2], [50, 0, 50])
    svg = plots.svg_markup(fig)
    assert svg.startswith("<svg") and ">8<" in svg.replace(" ", "")   # counts stay text in SVG


def test_overlay_figure_marks_the_best_run():
    curves = [("a", [(0, 1.0), (1, 0.5)]), ("b", [(0, 1.0), (1, 0.2), (2, 0.1)]), ("c", [])]
    fig = plots.overlay_figure(curves, best=1)
    labels = lines_by_label(fig.axes[0])
    assert set(labels) == {"a", "b (best)"}
    assert labels["b (best)"].get_linewidth() > labels["a"].get_linewidth()
    assert fig.axes[0].get_lines()[-1].get_label() == "b (best)"        # drawn on top


def test_save_png_to_an_unwritable_place_is_a_user_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConvnetError, match="cannot write"):
        plots.save_png(plots.figure(100, 100), str(blocker / "curve.png"))


def test_svg_markup_is_an_svg_element_without_prolog():
    svg = plots.svg_markup(plots.criterion_figure(book_phases([(1, 2.0), (2, 1.0)],
                                                              [(0, 1.0), (1, 0.5)])))
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert not re.search(r"<\?xml|<!DOCTYPE", svg)
    assert "Simulated annealing" in svg


def test_long_traces_are_thinned_to_what_can_be_drawn():
    annealing = [(k, 1.0 + 1.0 / k) for k in range(1, 100001)]
    refinement = [(i, 1.0 / (i + 1)) for i in range(50001)]
    fig = plots.criterion_figure(book_phases(annealing, refinement))
    left, right = fig.axes
    assert len(left.collections[0].get_offsets()) <= plots.MAX_DRAWN + 1
    line = lines_by_label(right)["criterion"]
    assert len(line.get_xdata()) <= plots.MAX_DRAWN + 1
    assert line.get_xdata()[0] == 0 and line.get_xdata()[-1] == 50000     # both ends kept
    assert plots.thin(refinement[:10]) == refinement[:10]


def test_a_logarithmic_axis_is_labelled_in_plain_text_with_minor_ticks_only_under_two_decades():
    """(Drawing speed: no mathematical text, and no minor ticks where two powers of ten are
    labelled anyway.)"""
    import matplotlib.ticker as mt
    wide = plots.figure(400, 300).subplots()
    plots.log_y_axis(wide, [0.3, 0.1, 1e-3, 2e-4])
    narrow = plots.figure(400, 300).subplots()
    plots.log_y_axis(narrow, [0.2, 0.05, 4e-3])
    for ax in (wide, narrow):
        assert ax.get_yscale() == "log"
        assert type(ax.yaxis.get_major_formatter()) is mt.LogFormatter
    assert isinstance(wide.yaxis.get_minor_locator(), mt.NullLocator)
    assert not isinstance(narrow.yaxis.get_minor_locator(), mt.NullLocator)
    narrow.set_ylim(4e-3, 0.2)
    narrow.figure.canvas.draw()
    labels = [t.get_text() for t in narrow.get_yticklabels(minor=True) if t.get_text()]
    assert labels and not any("$" in t for t in labels), labels
