"""Image grids (DISPLAY ... IMAGES): every PNG is decoded and its pixels checked against what it
shows."""

import math

import numpy as np
import pytest
from PIL import Image

from convnet.display import grids as display
from convnet.architecture import Architecture
from convnet.data.dataset import Dataset
from convnet.errors import ConvnetError

SEP = np.array(display.SEPARATOR_COLOUR, dtype=np.uint8)


def tone(v):
    """The byte a tone in [0, 1] becomes."""
    return int(np.clip(np.rint(v * 255.0), 0, 255))


def input_tone(v):
    """The byte an input value in -1..1 becomes: -1 black, +1 white."""
    return tone((v + 1.0) / 2.0)


def decode(path):
    with Image.open(path) as im:
        assert im.format == "PNG"
        return np.asarray(im.convert("RGB"))


def expected_size(tile_h, tile_w, rows, cols):
    scale = max(1, math.ceil(display.MIN_CELL / max(tile_h, tile_w)))
    return (cols * tile_w * scale + (cols + 1) * display.SEPARATOR,
            rows * tile_h * scale + (rows + 1) * display.SEPARATOR), scale


def cell(pixels, geom, k):
    """The tile of cell k read back from the picture at its native size."""
    x, y = geom.origin(k)
    block = pixels[y:y + geom.cell_height, x:x + geom.cell_width]
    small = block[::geom.scale, ::geom.scale]
    # every enlarged block is uniform (nearest-neighbour scaling)
    assert np.array_equal(np.repeat(np.repeat(small, geom.scale, 0), geom.scale, 1), block)
    return small


def assert_separators(pixels, geom):
    """Every pixel outside the cells has the separator colour."""
    mask = np.ones(pixels.shape[:2], dtype=bool)
    for k in range(geom.rows * geom.cols):
        x, y = geom.origin(k)
        mask[y:y + geom.cell_height, x:x + geom.cell_width] = False
    assert mask.any()
    assert (pixels[mask] == SEP).all()


# ----------------------------------------------------------------------------- training images
def small_dataset(n, bands, rows=4, cols=6, seed=0):
    rng = np.random.default_rng(seed)
    inputs = rng.random((n, bands, rows, cols)) * 2.0 - 1.0        # the readers' range
    return Dataset(inputs, rng.integers(0, 2, n), 2, "MAKE")


def test_training_images_gray_grid_wraps_and_keeps_tones(tmp_path):
    data = small_dataset(5, 1)
    path = tmp_path / "train.png"
    geom = display.training_images(data, 3, 2, 4, str(path))
    pixels = decode(path)
    size, scale = expected_size(4, 6, 2, 4)
    assert (pixels.shape[1], pixels.shape[0]) == size
    assert geom.scale == scale and geom.cell_width >= display.MIN_CELL
    assert_separators(pixels, geom)
    # cases 3, 4, 5, 1, 2, 3, 4, 5: left to right, then down, wrapping past the fifth
    for k, case in enumerate([3, 4, 5, 1, 2, 3, 4, 5]):
        got = cell(pixels, geom, k)
        want = np.vectorize(input_tone)(data.inputs[case - 1, 0])
        assert np.array_equal(got[:, :, 0], want), (k, case)
        assert (got == got[:, :, :1]).all()              # gray: red = green = blue


def test_training_images_rgb_maps_bands_to_red_green_blue(tmp_path):
    data = small_dataset(3, 3, rows=5, cols=5, seed=1)
    path = tmp_path / "rgb.png"
    geom = display.training_images(data, 1, 1, 3, str(path))
    pixels = decode(path)
    assert (pixels.shape[1], pixels.shape[0]) == expected_size(5, 5, 1, 3)[0]
    for k in range(3):
        got = cell(pixels, geom, k)
        for band in range(3):
            assert np.array_equal(got[:, :, band], np.vectorize(input_tone)(data.inputs[k, band]))


def test_training_images_errors(tmp_path):
    with pytest.raises(ConvnetError, match="1 or 3 bands"):
        display.training_images(small_dataset(3, 2), 1, 1, 1, str(tmp_path / "x.png"))
    with pytest.raises(ConvnetError, match=r"1\.\.3"):
        display.training_images(small_dataset(3, 1), 4, 1, 1, str(tmp_path / "x.png"))
    with pytest.raises(ConvnetError, match="cannot write"):
        (tmp_path / "file").write_text("")
        display.training_images(small_dataset(3, 1), 1, 1, 1, str(tmp_path / "file" / "x.png"))


# ------------------------------------------------------------------------------------- filters
class FakeModel:
    """Just what the pictures use: an architecture, weights and first-layer activations."""

    def __init__(self, arch, weights, activations=None):
        self.arch = arch
        self.weights = np.asarray(weights, dtype=np.float64)
        self._activations = activations

    def activations(self, inputs):
        return [self._activations(inputs)]


def conv_model(bands, slices, hw=2, seed=0, first_line=None):
    line = first_line or f"CONVOLUTIONAL LAYER {slices} {hw} {hw} 0 0 1 1"
    arch = Architecture.from_lines([line], rows=8, cols=8, bands=bands, n_classes=3)
    rng = np.random.default_rng(seed)
    return FakeModel(arch, rng.normal(size=arch.n_weights))


def filters_of(model):
    layer = model.arch.layers[0]
    w = model.weights[layer.weight_slice].reshape(layer.depth, layer.n_prior_weights)[:, :-1]
    return w.reshape(layer.depth, layer.prior_depth, layer.spec.filter_v, layer.spec.filter_h)


def test_filter_images_common_scale_brightest_is_largest_weight(tmp_path):
    model = conv_model(1, 4)
    layer = model.arch.layers[0]
    # a huge bias must not take part in the scale
    model.weights[layer.weight_offset + layer.n_prior_weights - 1] = 100.0
    path = tmp_path / "filters.png"
    geom = display.filter_images(model, 3, 2, 3, False, str(path))
    pixels = decode(path)
    size, scale = expected_size(5, 5, 2, 3)
    assert (pixels.shape[1], pixels.shape[0]) == size and geom.cell_width == 50
    assert_separators(pixels, geom)
    f = filters_of(model)
    order = [3, 4, 1, 2, 3, 4]                       # 1-based slices, wrapping
    shown = np.array([f[s - 1, 0] for s in order])
    lo, hi = shown.min(), shown.max()
    cells = np.array([cell(pixels, geom, k)[:, :, 0] for k in range(6)])
    for k in range(6):
        assert np.array_equal(cells[k], np.vectorize(tone)((shown[k] - lo) / (hi - lo)))
    # the brightest pixel is the largest weight, the darkest the smallest
    assert np.unravel_index(np.argmax(cells), cells.shape)[1:] == np.unravel_index(
        np.argmax(shown), shown.shape)[1:]
    assert cells.max() == 255 and cells.min() == 0
    k_hi = [k for k in range(6) if shown[k].max() == hi]
    assert all(cells[k].max() == 255 for k in k_hi)


def test_filter_images_individual_scales_each_slice_alone(tmp_path):
    model = conv_model(1, 3, hw=1, seed=3)
    model.weights[:10] *= 0.01                       # slice 1 is tiny: common scale makes it flat
    path = tmp_path / "ind.png"
    geom = display.filter_images(model, 1, 1, 3, True, str(path))
    pixels = decode(path)
    f = filters_of(model)
    assert geom.scale == 16                          # a 3 x 3 filter becomes 48 x 48
    for k in range(3):
        got = cell(pixels, geom, k)[:, :, 0]
        w = f[k, 0]
        assert got.max() == 255 and got.min() == 0
        assert np.array_equal(got, np.vectorize(tone)((w - w.min()) / (w.max() - w.min())))
    common = tmp_path / "common.png"
    display.filter_images(model, 1, 1, 3, False, str(common))
    first = cell(decode(common), geom, 0)[:, :, 0]
    assert first.max() - first.min() < 10            # the tiny slice is nearly one gray


def test_filter_images_rgb_channels_follow_band_weights(tmp_path):
    model = conv_model(3, 2, hw=2, seed=5)
    layer = model.arch.layers[0]
    n = layer.n_prior_weights
    w = model.weights
    w[:] = np.clip(w, -1.0, 1.0)
    # slice 1, filter pixel (0, 0): red weight +3, green and blue -3 -> pure red
    w[0 * 25 + 0] = 3.0
    w[1 * 25 + 0] = -3.0
    w[2 * 25 + 0] = -3.0
    # slice 2, filter pixel (4, 4): all three bands +3 -> white; pixel (2, 2): all -3 -> black
    for band in range(3):
        w[n + band * 25 + 24] = 3.0
        w[n + band * 25 + 12] = -3.0
    path = tmp_path / "rgbf.png"
    geom = display.filter_images(model, 1, 1, 2, False, str(path))
    pixels = decode(path)
    one, two = cell(pixels, geom, 0), cell(pixels, geom, 1)
    assert tuple(one[0, 0]) == (255, 0, 0)
    assert tuple(two[4, 4]) == (255, 255, 255)
    assert tuple(two[2, 2]) == (0, 0, 0)
    f = filters_of(model)
    for band in range(3):                             # every channel follows its band's weights
        assert np.array_equal(one[:, :, band], np.vectorize(tone)((f[0, band] + 3.0) / 6.0))


def test_filter_images_refuses_non_convolutional_first_layer(tmp_path):
    model = conv_model(1, 2, first_line="LOCAL LAYER 2 1 1 0 0 1 1")
    with pytest.raises(ConvnetError, match="convolutional"):
        display.filter_images(model, 1, 1, 1, False, str(tmp_path / "f.png"))
    model = conv_model(2, 2)
    with pytest.raises(ConvnetError, match="1 or 3 bands"):
        display.filter_images(model, 1, 1, 1, False, str(tmp_path / "f.png"))
    model = conv_model(1, 2)
    with pytest.raises(ConvnetError, match=r"1\.\.2"):
        display.filter_images(model, 3, 1, 1, False, str(tmp_path / "f.png"))


# --------------------------------------------------------------------------------- activations
def test_activation_images_black_is_minus_one_white_is_plus_one(tmp_path):
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 3 1 1 1 1 1 1"], rows=4, cols=5, bands=1,
                                   n_classes=2)
    layer = arch.layers[0]
    seen = []

    def acts(inputs):
        seen.append(inputs.copy())
        a = np.linspace(-1.0, 1.0, layer.n_neurons)
        a[0], a[1] = -1.0, 1.0
        return a.reshape(1, -1) * (1.0 + 0.0 * inputs.sum())
    model = FakeModel(arch, np.zeros(arch.n_weights), acts)
    data = small_dataset(4, 1, rows=4, cols=5)
    path = tmp_path / "act.png"
    geom = display.activation_images(model, data, 2, 2, 2, 3, str(path))
    assert np.array_equal(seen[0], data.inputs[2:3])    # case 3 (1-based)
    pixels = decode(path)
    assert (pixels.shape[1], pixels.shape[0]) == expected_size(4, 5, 2, 2)[0]
    a = np.linspace(-1.0, 1.0, layer.n_neurons)
    a[0], a[1] = -1.0, 1.0
    a = a.reshape(3, 4, 5)
    for k, s in enumerate([2, 3, 1, 2]):
        got = cell(pixels, geom, k)[:, :, 0]
        assert np.array_equal(got, np.vectorize(tone)((a[s - 1] + 1.0) / 2.0))
    first = cell(pixels, geom, 2)[:, :, 0]               # slice 1: its first neurons are -1, +1
    assert first[0, 0] == 0 and first[0, 1] == 255


def test_activation_images_pooling_first_layer_uses_input_range(tmp_path):
    arch = Architecture.from_lines(["POOLED MAX LAYER 2 2 2 2"], rows=4, cols=4, bands=1,
                                   n_classes=2)
    model = FakeModel(arch, np.zeros(arch.n_weights),
                      lambda x: x[:, :, ::2, ::2].reshape(1, -1))
    data = small_dataset(2, 1, rows=4, cols=4)
    path = tmp_path / "pool.png"
    geom = display.activation_images(model, data, 1, 1, 1, 2, str(path))
    got = cell(decode(path), geom, 0)[:, :, 0]
    assert np.array_equal(got, np.vectorize(input_tone)(data.inputs[1, 0, ::2, ::2]))


def test_activation_images_case_out_of_range(tmp_path):
    arch = Architecture.from_lines(["FULLY CONNECTED LAYER 2"], rows=2, cols=2, bands=1,
                                   n_classes=2)
    model = FakeModel(arch, np.zeros(arch.n_weights), lambda x: np.zeros((1, 2)))
    with pytest.raises(ConvnetError, match="case 3"):
        display.activation_images(model, small_dataset(2, 1, 2, 2), 1, 1, 1, 3,
                                  str(tmp_path / "a.png"))


@pytest.mark.slow
def test_activation_images_of_a_real_model_follow_its_activations(tmp_path):
    from convnet import Model
    # a 1 x 1 convolution with a positive weight: activation = tanh(w * pixel + b), so the picture
    # is the input image brightened monotonically, slice by slice
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 2 0 0 0 0 1 1"], rows=5, cols=7, bands=1,
                                   n_classes=2)
    model = Model(arch)
    w = np.zeros(arch.n_weights)
    w[0:2] = (2.0, -0.5)           # slice 1: weight, bias
    w[2:4] = (-3.0, 1.0)           # slice 2: a negative weight inverts the picture
    model.weights = w
    data = small_dataset(3, 1, rows=5, cols=7, seed=7)
    path = tmp_path / "real.png"
    geom = display.activation_images(model, data, 1, 1, 2, 2, str(path))
    pixels = decode(path)
    x = data.inputs[1, 0]
    for k, (wt, b) in enumerate([(2.0, -0.5), (-3.0, 1.0)]):
        got = cell(pixels, geom, k)[:, :, 0]
        assert np.array_equal(got, np.vectorize(tone)((np.tanh(wt * x + b) + 1.0) / 2.0))
        brightest = np.unravel_index(np.argmax(got), got.shape)
        assert brightest == np.unravel_index(np.argmax(x) if wt > 0 else np.argmin(x), x.shape)


# ------------------------------------------------------------------------- from a control file
SESSION = """\
MAKE IMAGE 7 7 3 2 30
CONVOLUTIONAL LAYER 5 1 2 1 2 1 1
ANNEAL ITERS = 4
MAXITERS = 3
TRAIN
DISPLAY TRAINING IMAGES 29 2 2 "pictures/training.png"
DISPLAY FILTER IMAGES 4 2 3 "filters.png"
DISPLAY FILTER IMAGES 1 1 5 INDIVIDUAL "filters-individual.png"
DISPLAY ACTIVATION IMAGES 1 1 5 2 "activations.png"
"""


def test_pictures_from_a_real_session(tmp_path):
    from convnet.session import run
    ctl = tmp_path / "pictures.ctl"
    ctl.write_text(SESSION)
    out = tmp_path / "out"
    session = run([str(ctl)], out=str(out), device="cpu", seed=2, threads=1)
    data, model = session.dataset, session.model
    # training images 29, 30, 1, 2 in colour
    pixels = decode(out / "pictures" / "training.png")
    geom = display.GridGeometry(7, 7, 2, 2)
    assert (pixels.shape[1], pixels.shape[0]) == (geom.width, geom.height)
    for k, case in enumerate([29, 30, 1, 2]):
        got = cell(pixels, geom, k)
        want = np.vectorize(input_tone)(np.transpose(data.inputs[case - 1], (1, 2, 0)))
        assert np.array_equal(got, want)
    # filters: 3 x 5 (rows x cols) RGB, slices 4, 5, 1, 2, 3, 4 on a common scale
    f = filters_of(model)
    assert f.shape == (5, 3, 3, 5)
    pixels = decode(out / "filters.png")
    geom = display.GridGeometry(3, 5, 2, 3)
    assert (pixels.shape[1], pixels.shape[0]) == (geom.width, geom.height)
    shown = f[[3, 4, 0, 1, 2, 3]]
    lo, hi = shown.min(), shown.max()
    for k in range(6):
        got = cell(pixels, geom, k)
        want = np.vectorize(tone)(np.transpose((shown[k] - lo) / (hi - lo), (1, 2, 0)))
        assert np.array_equal(got, want)
    k, band, r, c = np.unravel_index(np.argmax(shown), shown.shape)
    assert cell(pixels, geom, k)[r, c, band] == 255          # the largest weight is the brightest
    pixels = decode(out / "filters-individual.png")
    geom = display.GridGeometry(3, 5, 1, 5)
    for k in range(5):
        assert cell(pixels, geom, k).max() == 255 and cell(pixels, geom, k).min() == 0
    # activations of case 2: the model's own, -1 black, +1 white
    acts = model.activations(data.inputs[1:2])[0].reshape(5, 7, 7)
    pixels = decode(out / "activations.png")
    geom = display.GridGeometry(7, 7, 1, 5)
    for k in range(5):
        assert np.array_equal(cell(pixels, geom, k)[:, :, 0],
                              np.vectorize(tone)((acts[k] + 1.0) / 2.0))
    # the criterion curve of the TRAIN
    with Image.open(out / "criterion.png") as im:
        assert im.format == "PNG" and im.size == (1040, 430)


def test_display_errors_name_the_control_line(tmp_path):
    from convnet.session import run
    ctl = tmp_path / "bad.ctl"
    ctl.write_text("MAKE IMAGE 4 4 1 2 5\nDISPLAY TRAINING IMAGES 6 1 1 \"t.png\"\n")
    with pytest.raises(ConvnetError) as info:
        run([str(ctl)], out=str(tmp_path / "out"), device="cpu", seed=1)
    assert str(info.value) == f"{ctl}:2: first case to display (6) must lie within 1..5"
