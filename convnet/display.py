"""Pictures: grids of training images, filters and activations; the criterion curve; progress.

Every picture is a PNG drawn with pillow.

Grids (DISPLAY TRAINING / FILTER / ACTIVATION IMAGES, book p.160-161)
    ``rows`` x ``cols`` cells, filled left to right, then down, starting at the 1-based ordinal
    ``first`` and wrapping around to the first item past the last one. Each cell is one image,
    filter or slice, enlarged by nearest-neighbour scaling so that its longer side is at least
    ``MIN_CELL`` pixels (a 5 x 5 filter becomes 50 x 50), and the cells are set apart by thin
    separators (``SEPARATOR`` pixels wide, also round the outside) of ``SEPARATOR_COLOUR``, a
    slate blue that no gray cell can take. One band is drawn gray, three bands as red, green, blue.

Tone mappings
    Training images: -1 is black and +1 is white (the readers scale every pixel to -1..1, as the
    book does; a series path is -1, so it is drawn black on white); data outside -1..1 widens the
    range to the shown images' own minimum and maximum.
    Filters: a linear map of the weights (bias excluded) with the smallest weight black and the
    largest white, the range taken over every weight shown, or with INDIVIDUAL over each slice
    alone. With three bands each colour channel shows the weight for its band on the same scale,
    so a red pixel has a strongly positive red weight and strongly negative green and blue weights.
    Activations: black is the lowest activation the layer can produce and white the highest:
    -1 and +1 for a tanh layer (fully connected, local, convolutional) and for a pooling first
    layer, whose activations are pooled input pixels (-1..1).
"""

import math
import os
import sys
import time

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from .errors import ConvnetError

MIN_CELL = 48                    # the longer side of a cell is at least this many pixels
SEPARATOR = 2                    # separator width in pixels
SEPARATOR_COLOUR = (70, 90, 140)


# ---------------------------------------------------------------------------------------- grids
class GridGeometry:
    """Where each cell of a grid lies in the picture (pixels)."""

    def __init__(self, tile_height, tile_width, rows, cols, min_cell=MIN_CELL, separator=SEPARATOR):
        self.tile_height, self.tile_width = int(tile_height), int(tile_width)
        self.rows, self.cols = int(rows), int(cols)
        self.scale = max(1, math.ceil(min_cell / max(self.tile_height, self.tile_width)))
        self.separator = separator
        self.cell_height = self.tile_height * self.scale
        self.cell_width = self.tile_width * self.scale
        self.width = self.cols * self.cell_width + (self.cols + 1) * separator
        self.height = self.rows * self.cell_height + (self.rows + 1) * separator

    def origin(self, k):
        """(x, y) of the top-left pixel of cell k (0-based, left to right then down)."""
        r, c = divmod(int(k), self.cols)
        return (self.separator + c * (self.cell_width + self.separator),
                self.separator + r * (self.cell_height + self.separator))

    def pixel(self, k, row, col):
        """(x, y) of the centre of tile pixel (row, col) of cell k in the picture."""
        x, y = self.origin(k)
        return x + col * self.scale + self.scale // 2, y + row * self.scale + self.scale // 2


def wrapped_ordinals(first, count, n_items, what):
    """0-based indices of ``count`` items from the 1-based ``first``, wrapping past the last."""
    if n_items < 1:
        raise ConvnetError(f"there are no {what} to display")
    if first < 1 or first > n_items:
        one = what[:-1] if what.endswith("s") else what
        raise ConvnetError(f"first {one} to display ({first}) must lie within 1..{n_items}")
    return [(first - 1 + k) % n_items for k in range(count)]


def _to_bytes(tones):
    """Tones in [0, 1] (any shape) to uint8, rounding to the nearest level."""
    return np.clip(np.rint(np.asarray(tones, dtype=np.float64) * 255.0), 0, 255).astype(np.uint8)


def grid_picture(tiles, rows, cols):
    """A pillow RGB image of ``tiles`` (each (h, w) gray or (h, w, 3) colour, tones in [0, 1])."""
    if rows < 1 or cols < 1:
        raise ConvnetError(f"a display grid needs at least 1 row and 1 column, not {rows} x {cols}")
    first = np.asarray(tiles[0])
    geom = GridGeometry(first.shape[0], first.shape[1], rows, cols)
    canvas = np.empty((geom.height, geom.width, 3), dtype=np.uint8)
    canvas[:, :] = SEPARATOR_COLOUR
    for k, tile in enumerate(tiles[:rows * cols]):
        t = _to_bytes(tile)
        if t.ndim == 2:
            t = np.repeat(t[:, :, None], 3, axis=2)
        big = np.repeat(np.repeat(t, geom.scale, axis=0), geom.scale, axis=1)
        x, y = geom.origin(k)
        canvas[y:y + geom.cell_height, x:x + geom.cell_width] = big
    return Image.fromarray(canvas, "RGB"), geom


def _save(picture, path):
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        picture.save(path, format="PNG")
    except OSError as e:
        raise ConvnetError(f"cannot write {path}: {e.strerror or e}") from None


def _band_tiles(planes):
    """(bands, h, w) tones -> a gray (h, w) or RGB (h, w, 3) tile."""
    if planes.shape[0] == 1:
        return planes[0]
    if planes.shape[0] == 3:
        return np.transpose(planes, (1, 2, 0))
    raise ConvnetError(f"pictures show 1 or 3 bands, not {planes.shape[0]}")


# ------------------------------------------------------------------------------ training images
def training_images(dataset, first, rows, cols, path):
    """DISPLAY TRAINING IMAGES: cases first, first+1, ... of ``dataset`` in a rows x cols grid."""
    if dataset.bands not in (1, 3):
        raise ConvnetError(f"DISPLAY TRAINING IMAGES shows 1 or 3 bands; these images have "
                           f"{dataset.bands}")
    order = wrapped_ordinals(first, rows * cols, dataset.n_cases, "cases")
    shown = dataset.inputs[order]
    lo, hi = min(-1.0, float(shown.min())), max(1.0, float(shown.max()))
    tones = (shown - lo) / (hi - lo)
    picture, geom = grid_picture([_band_tiles(t) for t in tones], rows, cols)
    _save(picture, path)
    return geom


# -------------------------------------------------------------------------------------- filters
def first_layer_filters(model):
    """The first hidden layer's filters as an array (slices, bands, filter rows, filter cols)."""
    arch = model.arch
    if not arch.layers or not arch.layers[0].kind.shares_weights:
        raise ConvnetError("DISPLAY FILTER IMAGES needs a model whose first hidden layer is "
                           "convolutional")
    layer = arch.layers[0]
    w = np.asarray(model.weights, dtype=np.float64)[layer.weight_slice]
    w = w.reshape(layer.depth, layer.n_prior_weights)[:, :-1]      # drop each slice's bias
    return w.reshape(layer.depth, layer.prior_depth, layer.spec.filter_v, layer.spec.filter_h)


def _stretch(values, lo, hi):
    if hi > lo:
        return (values - lo) / (hi - lo)
    return np.full(values.shape, 0.5)


def filter_images(model, first, rows, cols, individual, path):
    """DISPLAY FILTER IMAGES: the first convolutional layer's slices as pictures of their
    weights."""
    filters = first_layer_filters(model)
    if filters.shape[1] not in (1, 3):
        raise ConvnetError(f"DISPLAY FILTER IMAGES shows 1 or 3 bands; the model's input has "
                           f"{filters.shape[1]}")
    order = wrapped_ordinals(first, rows * cols, filters.shape[0], "slices")
    shown = filters[order]
    if individual:
        tones = [_stretch(f, f.min(), f.max()) for f in shown]
    else:
        lo, hi = float(shown.min()), float(shown.max())
        tones = [_stretch(f, lo, hi) for f in shown]
    picture, geom = grid_picture([_band_tiles(t) for t in tones], rows, cols)
    _save(picture, path)
    return geom


# ---------------------------------------------------------------------------------- activations
def activation_range(layer):
    """The lowest and highest activation a first hidden layer can produce."""
    return -1.0, 1.0       # tanh, or pooled input pixels, which the readers scale to -1..1


def first_layer_activations(model, dataset, case):
    """The first hidden layer's activations for 1-based ``case``, as (depth, height, width)."""
    arch = model.arch
    if not arch.layers:
        raise ConvnetError("DISPLAY ACTIVATION IMAGES needs a model with a hidden layer")
    if case < 1 or case > dataset.n_cases:
        raise ConvnetError(f"DISPLAY ACTIVATION IMAGES: case {case} must lie within "
                           f"1..{dataset.n_cases}")
    layer = arch.layers[0]
    acts = model.activations(dataset.inputs[case - 1:case])[0]
    return np.asarray(acts, dtype=np.float64).reshape(layer.depth, layer.height, layer.width)


def activation_images(model, dataset, first, rows, cols, case, path):
    """DISPLAY ACTIVATION IMAGES: each slice of the first hidden layer for one case, as a
    picture."""
    acts = first_layer_activations(model, dataset, case)
    lo, hi = activation_range(model.arch.layers[0])
    order = wrapped_ordinals(first, rows * cols, acts.shape[0], "slices")
    tones = [(acts[i] - lo) / (hi - lo) for i in order]
    picture, geom = grid_picture(tones, rows, cols)
    _save(picture, path)
    return geom


# ------------------------------------------------------------------------------------ the curve
PLOT_BACKGROUND = (255, 255, 255)
PLOT_INK = (30, 30, 30)
PLOT_GRID = (225, 225, 225)
ANNEAL_COLOUR = (200, 110, 20)
ANNEAL_POINTS = (240, 200, 160)
REFINE_COLOUR = (30, 90, 180)


def _font(size):
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError, ImportError):      # a pillow without FreeType: the bitmap font
        return ImageFont.load_default()


def nice_ticks(lo, hi, count=5, integer=False):
    """Round tick values covering [lo, hi]: steps of 1, 2 or 5 times a power of ten.

    Returns (ticks, decimals): ``decimals`` digits after the point label every tick distinctly.
    """
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError("tick range must be finite")
    if hi <= lo:
        hi = lo + (1.0 if integer else max(abs(lo) * 0.1, 1e-6))
    raw = (hi - lo) / max(1, count)
    power = math.floor(math.log10(raw))
    step = None
    for m in (1, 2, 5, 10):
        step = m * 10.0 ** power
        if step >= raw:
            break
    if integer:
        step = max(1.0, round(step))
        power = max(0, power)
    start = math.ceil(lo / step - 1e-9) * step
    ticks = []
    v = start
    while v <= hi + step * 1e-9:
        ticks.append(0.0 if abs(v) < step * 1e-9 else v)
        v = start + len(ticks) * step
    decimals = 0 if integer else max(0, -int(math.floor(math.log10(step) + 1e-12)))
    return ticks, decimals


def _tick_label(v, decimals):
    if abs(v) >= 1e6 or (v != 0 and abs(v) < 1e-4 and decimals > 6):
        return f"{v:.3g}"
    return f"{v:.{decimals}f}"


class Series:
    """One line (and optionally its points) of a panel."""

    def __init__(self, label, xs, ys, colour, line=True, points=False):
        self.label, self.colour, self.line, self.points = label, colour, line, points
        self.xs = [float(x) for x in xs]
        self.ys = [float(y) for y in ys]


class Panel:
    """One chart: a title, axis labels and its series (all may be empty: the panel says so)."""

    def __init__(self, title, xlabel, ylabel, series, empty_note="no data", log_y=False):
        self.title, self.xlabel, self.ylabel = title, xlabel, ylabel
        self.series = [s for s in series if s.xs]
        self.empty_note = empty_note
        self.log_y = log_y          # a logarithmic y axis (used only when every value is positive)


def log_ticks(lo, hi):
    """Tick values for a logarithmic axis over [lo, hi] (lo > 0): powers of ten, and 2 and 5 times
    them when the range spans few decades."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    mults = (1,) if b - a > 3 else (1, 2, 5)
    ticks = [m * 10.0 ** e for e in range(a, b + 1) for m in mults]
    inside = [t for t in ticks if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]
    return inside if len(inside) >= 2 else ticks[:1] + ticks[-1:]


def wants_log_scale(values, ratio=30.0):
    """True when positive values span more than ``ratio`` (a falling criterion near zero)."""
    finite = [v for v in values if math.isfinite(v)]
    return bool(finite) and min(finite) > 0 and max(finite) / min(finite) > ratio


def _text_size(draw, text, font):
    box = draw.textbbox((0, 0), text, font=font)
    return box[2] - box[0], box[3] - box[1]


def _draw_panel(image, box, panel, fonts):
    """Draw ``panel`` into ``box`` = (left, top, right, bottom) of ``image``."""
    draw = ImageDraw.Draw(image)
    small, normal = fonts
    left, top, right, bottom = box
    tw, th = _text_size(draw, panel.title, normal)
    draw.text(((left + right - tw) // 2, top + 4), panel.title, fill=PLOT_INK, font=normal)
    # the plotting area
    px0, py0, px1, py1 = left + 86, top + 30, right - 16, bottom - 52
    draw.rectangle((px0, py0, px1, py1), outline=PLOT_INK)
    # axis labels: x under the ticks, y turned on its side
    tw, th = _text_size(draw, panel.xlabel, small)
    draw.text(((px0 + px1 - tw) // 2, py1 + 30), panel.xlabel, fill=PLOT_INK, font=small)
    tw, th = _text_size(draw, panel.ylabel, small)
    label = Image.new("RGB", (tw + 4, th + 8), PLOT_BACKGROUND)
    ImageDraw.Draw(label).text((2, 0), panel.ylabel, fill=PLOT_INK, font=small)
    label = label.rotate(90, expand=True)
    image.paste(label, (left + 4, (py0 + py1 - label.height) // 2))
    if not panel.series:
        tw, th = _text_size(draw, panel.empty_note, small)
        draw.text(((px0 + px1 - tw) // 2, (py0 + py1 - th) // 2), panel.empty_note, fill=PLOT_INK,
                  font=small)
        return None
    xs = [x for s in panel.series for x in s.xs]
    ys = [y for s in panel.series for y in s.ys if math.isfinite(y)]
    if not ys:
        ys = [0.0]
    xticks, xdec = nice_ticks(min(xs), max(xs), 6, integer=True)
    y_lo, y_hi = min(ys), max(ys)
    pad = (y_hi - y_lo) * 0.05 if y_hi > y_lo else max(abs(y_lo) * 0.05, 1e-3)
    log_y = panel.log_y and y_lo > 0
    if log_y:
        fy = math.log10
        yticks, ydec = log_ticks(y_lo, y_hi), None
        span = math.log10(y_hi) - math.log10(y_lo)
        y_lo, y_hi = 10 ** (math.log10(y_lo) - 0.04 * span), 10 ** (math.log10(y_hi) + 0.04 * span)
        yticks = [t for t in yticks if y_lo <= t <= y_hi] or yticks
        y_lo, y_hi = min(y_lo, yticks[0]), max(y_hi, yticks[-1])
    else:
        def fy(v):
            return v
        yticks, ydec = nice_ticks(y_lo - pad, y_hi + pad, 5)
        y_lo, y_hi = min(yticks[0], y_lo - pad), max(yticks[-1], y_hi + pad)
    x_lo, x_hi = min(xticks[0], min(xs)), max(xticks[-1], max(xs))
    if x_hi == x_lo:
        x_hi = x_lo + 1
    inner = (px0 + 6, py0 + 6, px1 - 6, py1 - 6)

    def to_px(x, y):
        y = min(max(y, y_lo), y_hi) if math.isfinite(y) else y_hi
        return (inner[0] + (x - x_lo) / (x_hi - x_lo) * (inner[2] - inner[0]),
                inner[3] - (fy(y) - fy(y_lo)) / (fy(y_hi) - fy(y_lo)) * (inner[3] - inner[1]))

    for t in xticks:
        x, _ = to_px(t, y_lo)
        draw.line((x, py0 + 1, x, py1 - 1), fill=PLOT_GRID)
        draw.line((x, py1, x, py1 + 5), fill=PLOT_INK)
        s = _tick_label(t, xdec)
        tw, _ = _text_size(draw, s, small)
        draw.text((x - tw / 2, py1 + 8), s, fill=PLOT_INK, font=small)
    for t in yticks:
        _, y = to_px(x_lo, t)
        draw.line((px0 + 1, y, px1 - 1, y), fill=PLOT_GRID)
        draw.line((px0 - 5, y, px0, y), fill=PLOT_INK)
        s = f"{t:g}" if log_y else _tick_label(t, ydec)
        tw, th = _text_size(draw, s, small)
        draw.text((px0 - 8 - tw, y - th / 2 - 2), s, fill=PLOT_INK, font=small)
    draw.rectangle((px0, py0, px1, py1), outline=PLOT_INK)
    for s in panel.series:
        pts = [to_px(x, y) for x, y in zip(s.xs, s.ys)]
        if s.points:
            for x, y in pts:
                draw.ellipse((x - 2, y - 2, x + 2, y + 2), fill=s.colour)
        if s.line and len(pts) > 1:
            draw.line(pts, fill=s.colour, width=2)
        elif s.line:
            x, y = pts[0]
            draw.ellipse((x - 3, y - 3, x + 3, y + 3), fill=s.colour)
    # the legend, top right inside the plot
    y = py0 + 6
    for s in panel.series:
        if not s.label:
            continue
        tw, th = _text_size(draw, s.label, small)
        x = px1 - 10 - tw
        if s.line:
            draw.rectangle((x - 22, y + th // 2 - 1, x - 6, y + th // 2 + 2), fill=s.colour)
        else:
            draw.ellipse((x - 16, y + th // 2 - 3, x - 10, y + th // 2 + 3), fill=s.colour)
        draw.text((x, y - 2), s.label, fill=PLOT_INK, font=small)
        y += th + 6
    return (inner, (x_lo, x_hi, y_lo, y_hi))


def plot_panels(panels, path, title=None, panel_size=(520, 400)):
    """Draw panels side by side (with an optional title line) and save them as a PNG."""
    pw, ph = panel_size
    head = 30 if title else 0
    image = Image.new("RGB", (pw * len(panels), ph + head), PLOT_BACKGROUND)
    fonts = (_font(13), _font(15))
    if title:
        draw = ImageDraw.Draw(image)
        tw, _ = _text_size(draw, title, fonts[1])
        draw.text(((image.width - tw) // 2, 8), title, fill=PLOT_INK, font=fonts[1])
    frames = []
    for i, panel in enumerate(panels):
        frames.append(_draw_panel(image, (i * pw, head, (i + 1) * pw, head + ph), panel, fonts))
    _save(image, path)
    return frames


# --------------------------------------------------------------------------------- progress line
def _clock(seconds):
    seconds = int(round(max(0.0, seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class ProgressLine:
    """A live one-line progress display for a terminal, rewritten in place with a carriage return.

    The trainer calls it as ``progress(phase, iteration, current, best)`` (``total=`` may add the
    phase's iteration limit, which lets the line estimate the time remaining). It writes only to
    the stream it was given (never to CONVNET.LOG); ``close()`` ends the line.
    """

    def __init__(self, stream=None, min_interval=0.1, clock=time.monotonic):
        self.stream = stream if stream is not None else sys.stdout
        self.min_interval = min_interval
        self.clock = clock
        self.start = clock()
        self.phase = None
        self.phase_start = self.start
        self.phase_first = None          # the first iteration number seen in this phase
        self.last_write = None
        self.width = 0                   # length of the line on the screen, to blank leftovers
        self.pending = None              # a line not yet shown (throttled)

    def format(self, phase, iteration, current, best, total=None, now=None):
        now = self.clock() if now is None else now
        parts = [f"{phase}", f"iteration {iteration}" + (f"/{total}" if total else "")]
        if current is not None:
            parts.append(f"criterion {current:.6g}")
        if best is not None:
            parts.append(f"best {best:.6g}")
        parts.append(f"elapsed {_clock(now - self.start)}")
        # iterations finished since this phase's first report, and the time they took
        done = 0 if self.phase_first is None else iteration - self.phase_first
        if total and done > 0 and iteration < total:
            per = (now - self.phase_start) / done
            left = per * (total - iteration)
            parts.append(f"remaining {'at most ' if str(phase).lower().startswith('ref') else ''}"
                         f"{_clock(left)}")
        return "  ".join(parts)

    def __call__(self, phase, iteration, current=None, best=None, total=None):
        now = self.clock()
        changed = phase != self.phase
        if changed:
            if self.pending is not None:           # show where the last phase ended
                self._show(self.pending)
            self.phase = phase
            self.phase_start = now
            self.phase_first = iteration
        text = self.format(phase, iteration, current, best, total, now)
        if changed or self.last_write is None or now - self.last_write >= self.min_interval:
            self._show(text)
            self.last_write = now
            self.pending = None
        else:
            self.pending = text

    def _show(self, text):
        pad = max(0, self.width - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self.width = len(text)

    def close(self):
        """Show the last state and end the line (a no-op when nothing was shown)."""
        if self.pending is not None:
            self._show(self.pending)
            self.pending = None
        if self.width:
            self.stream.write("\n")
            self.stream.flush()
            self.width = 0

    def __del__(self):
        # A line left open when the last reference goes (the caller forgot close()) is ended here,
        # so that what is printed next starts on a line of its own.
        try:
            self.close()
        except Exception:       # the stream may already be closed at interpreter exit
            pass


# ----------------------------------------------------------------------- the criterion curve
def _finite_points(points):
    return [(float(x), float(y)) for x, y in points if y is not None and math.isfinite(y)]


def curve_panels(annealing, refinement, annealing_result=None):
    """The two panels of a criterion curve.

    annealing: (evaluation, criterion) of every annealing evaluation (may be empty);
    refinement: (iteration, criterion) of refinement, iteration 0 being its starting point;
    annealing_result: the annealing criterion, shown when the evaluations themselves are unknown.
    """
    points = _finite_points(annealing)
    best, low = [], math.inf            # best so far, drawn as steps
    for x, y in points:
        if y < low and best:
            best.append((x, low))
        low = min(low, y)
        best.append((x, low))
    note = "no annealing evaluations"
    if annealing_result is not None and math.isfinite(annealing_result):
        note = f"annealing result {annealing_result:.6g} (evaluations not recorded)"
    anneal_panel = Panel(
        "Simulated annealing", "evaluation", "criterion",
        [Series("each evaluation", [p[0] for p in points], [p[1] for p in points], ANNEAL_POINTS,
                line=False, points=True),
         Series("best so far", [p[0] for p in best], [p[1] for p in best], ANNEAL_COLOUR)],
        empty_note=note)
    refine = _finite_points(refinement)
    log_y = wants_log_scale([p[1] for p in refine])
    refine_panel = Panel(
        "Conjugate-gradient refinement", "iteration",
        "criterion (logarithmic scale)" if log_y else "criterion",
        [Series("criterion", [p[0] for p in refine], [p[1] for p in refine], REFINE_COLOUR,
                points=len(refine) <= 60)],
        empty_note="no refinement iterations", log_y=log_y)
    return [anneal_panel, refine_panel]


def log_curve(run, path, title=None):
    """``convnet log plot``: the criterion curve of a TRAIN read from CONVNET.LOG (a reader Run)."""
    if run.kind != "TRAIN":
        raise ConvnetError("only a TRAIN has a criterion curve")
    if not run.annealing and not run.refinement and run.annealing_criterion is None:
        raise ConvnetError(f"TRAIN {run.index} of the log records no criterion to plot")
    return plot_panels(curve_panels(run.annealing, run.refinement, run.annealing_criterion), path,
                       title=title)


def criterion_curve(result, path):
    """The ``criterion.png`` every TRAIN writes: annealing evaluations and refinement iterations.

    ``result`` is a TrainResult (its ``annealing_history`` and ``refinement_history``).
    """
    annealing = list(getattr(result, "annealing_history", []) or [])
    refinement = list(getattr(result, "refinement_history", []) or [])
    crit = getattr(result, "anneal_criterion", None)
    final = getattr(result, "final_criterion", None)
    title = None
    if crit is not None and final is not None:
        title = f"TRAIN: annealing {crit:.6g}, final {final:.6g}"
    return plot_panels(curve_panels(annealing, refinement, crit), path, title=title)
