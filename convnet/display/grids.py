"""Image grids: DISPLAY TRAINING / FILTER / ACTIVATION IMAGES as PNG pictures drawn with Pillow.

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

import numpy as np
from PIL import Image

from ..errors import ConvnetError

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

    def origin(self, cell):
        """(x, y) of the top-left pixel of ``cell`` (0-based, left to right then down)."""
        grid_row, grid_col = divmod(int(cell), self.cols)
        return (self.separator + grid_col * (self.cell_width + self.separator),
                self.separator + grid_row * (self.cell_height + self.separator))

    def pixel(self, cell, row, col):
        """(x, y) of the centre of tile pixel (row, col) of ``cell`` in the picture."""
        left, top = self.origin(cell)
        return (left + col * self.scale + self.scale // 2,
                top + row * self.scale + self.scale // 2)


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
    for cell, tile in enumerate(tiles[:rows * cols]):
        tile_bytes = _to_bytes(tile)
        if tile_bytes.ndim == 2:
            tile_bytes = np.repeat(tile_bytes[:, :, None], 3, axis=2)
        big = np.repeat(np.repeat(tile_bytes, geom.scale, axis=0), geom.scale, axis=1)
        left, top = geom.origin(cell)
        canvas[top:top + geom.cell_height, left:left + geom.cell_width] = big
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
    weights = np.asarray(model.weights, dtype=np.float64)[layer.weight_slice]
    weights = weights.reshape(layer.depth, layer.n_prior_weights)[:, :-1]  # drop each bias
    return weights.reshape(layer.depth, layer.prior_depth, layer.spec.filter_v,
                           layer.spec.filter_h)


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
