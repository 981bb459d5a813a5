"""Dataset, KEEP CASES, the fit check before testing a model, and MAKE IMAGE."""

import numpy as np
import pytest

from convnet.data.dataset import Dataset
from convnet.data.synthetic import make_image
from convnet.errors import ConvnetError


def numbered(n=5, n_classes=3):
    """n 1 x 2 x 2 images whose pixels all equal the 1-based case number; class = case % classes."""
    inputs = np.repeat(np.arange(1, n + 1, dtype=float), 4).reshape(n, 1, 2, 2)
    return Dataset(inputs, np.arange(1, n + 1) % n_classes, n_classes, "MAKE")


def test_shape_properties():
    d = Dataset(np.zeros((4, 3, 5, 7), dtype=np.float32), [0, 1, 0, 1], 2, "C10")
    assert (d.n_cases, d.bands, d.rows, d.cols, d.n_classes) == (4, 3, 5, 7, 2)
    assert d.inputs.dtype == np.float64 and d.inputs.flags["C_CONTIGUOUS"]
    assert d.classes.dtype == np.int64 and d.series is None and d.targets is None
    assert d.describe() == "CIFAR-10: 4 cases of 5 x 7, 3 bands, 2 classes"


def test_non_contiguous_input_is_copied():
    x = np.zeros((2, 4, 4, 1)).transpose(0, 3, 1, 2)
    d = Dataset(x, None, 10, "MNIST")
    assert d.inputs.flags["C_CONTIGUOUS"] and d.classes is None
    assert "labels not read yet" in d.describe()


@pytest.mark.parametrize("inputs, classes, n_classes, source", [
    (np.zeros((2, 2, 2)), [0, 1], 2, "MAKE"),          # not 4-D
    (np.zeros((2, 1, 2, 2)), [0], 2, "MAKE"),          # wrong class count
    (np.zeros((2, 1, 2, 2)), [0, 2], 2, "MAKE"),       # class out of range
    (np.zeros((2, 1, 2, 2)), [0, 1], 1, "MAKE"),       # one class
    (np.zeros((2, 1, 2, 2)), [0, 1], 2, "PNG"),        # unknown source
])
def test_bad_construction(inputs, classes, n_classes, source):
    with pytest.raises(ValueError):
        Dataset(inputs, classes, n_classes, source)


def test_keep_cases_first_last_and_middle():
    d = numbered()
    first = d.keep_cases(1, 1)
    assert first.n_cases == 1 and first.inputs[0, 0, 0, 0] == 1 and first.classes.tolist() == [1]
    last = d.keep_cases(5, 5)
    assert last.n_cases == 1 and last.inputs[0, 0, 1, 1] == 5 and last.classes.tolist() == [2]
    mid = d.keep_cases(2, 4)
    assert mid.inputs[:, 0, 0, 0].tolist() == [2, 3, 4] and mid.classes.tolist() == [2, 0, 1]
    whole = d.keep_cases(1, 5)
    np.testing.assert_array_equal(whole.inputs, d.inputs)
    assert mid.source == "MAKE" and mid.n_classes == 3
    mid.inputs[0] = -1                                  # the kept data is a copy
    assert d.inputs[1, 0, 0, 0] == 2


@pytest.mark.parametrize("first, last", [(1, 6), (5, 6), (6, 6), (0, 3), (4, 3), (-1, 2)])
def test_keep_cases_outside_the_data(first, last):
    with pytest.raises(ConvnetError) as e:
        numbered().keep_cases(first, last)
    assert "5 cases" in str(e.value) and "1..5" in str(e.value)
    assert e.value.file is None and e.value.line is None


def test_keep_cases_before_mnist_labels():
    d = Dataset(np.zeros((3, 1, 2, 2)), None, 10, "MNIST")
    with pytest.raises(ConvnetError, match="MNIST labels"):
        d.keep_cases(1, 2)


def test_check_matches():
    d = numbered()                                       # 2 x 2, 1 band, 3 classes
    d.check_matches(2, 2, 1, 3)
    with pytest.raises(ConvnetError) as e:
        d.check_matches(28, 28, 1, 3)
    assert "2 x 2" in str(e.value) and "28 x 28" in str(e.value)
    with pytest.raises(ConvnetError, match="1 band, the model's 3 bands"):
        d.check_matches(2, 2, 3, 3)
    with pytest.raises(ConvnetError, match="3 classes, the model 10"):
        d.check_matches(2, 2, 1, 10)
    with pytest.raises(ConvnetError, match="2 x 3"):
        d.check_matches(2, 3, 1, 3)


def test_make_image():
    d = make_image(3, 4, 2, 5, 200, np.random.default_rng(7))
    assert d.source == "MAKE" and d.inputs.shape == (200, 2, 3, 4) and d.n_classes == 5
    assert d.inputs.min() >= -1.0 and d.inputs.max() < 1.0      # the readers' range, -1..1
    assert d.inputs.min() < -0.99 and d.inputs.max() > 0.99
    assert abs(d.inputs.mean()) < 0.05
    assert set(d.classes.tolist()) == {0, 1, 2, 3, 4}
    again = make_image(3, 4, 2, 5, 200, np.random.default_rng(7))
    np.testing.assert_array_equal(d.inputs, again.inputs)
    np.testing.assert_array_equal(d.classes, again.classes)
    other = make_image(3, 4, 2, 5, 200, np.random.default_rng(8))
    assert not np.array_equal(d.inputs, other.inputs)


@pytest.mark.parametrize("args", [(0, 4, 1, 2, 5), (4, 4, 0, 2, 5), (4, 4, 1, 1, 5),
                                  (4, 4, 1, 2, 0)])
def test_make_image_bad_sizes(args):
    with pytest.raises(ConvnetError, match="MAKE IMAGE"):
        make_image(*args, np.random.default_rng(0))
