"""READ MNIST IMAGE / LABELS: hand-made IDX files, the real sample in data/, every bad file."""

import gzip
import os

import numpy as np
import pytest

from convnet.data.dataset import Dataset
from convnet.data.mnist import read_images, read_labels
from convnet.errors import ConvnetError

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "data")
SAMPLE_IMAGES = os.path.join(DATA, "mnist-3000-images-idx3-ubyte.gz")
SAMPLE_LABELS = os.path.join(DATA, "mnist-3000-labels-idx1-ubyte.gz")


def idx_images(pixels, count=None):
    """IDX3 bytes for uint8 pixels (n, rows, cols); ``count`` overrides the header's image count."""
    n, rows, cols = pixels.shape
    head = bytes([0, 0, 8, 3]) + (n if count is None else count).to_bytes(4, "big") + \
        rows.to_bytes(4, "big") + cols.to_bytes(4, "big")
    return head + pixels.astype(np.uint8).tobytes()


def idx_labels(labels, count=None):
    n = len(labels)
    return bytes([0, 0, 8, 1]) + (n if count is None else count).to_bytes(4, "big") + bytes(labels)


def put(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


# Two 3 x 5 images with known bytes.
PIXELS = np.array([[[0, 255, 51, 0, 0], [0, 0, 0, 0, 102], [255, 255, 255, 255, 255]],
                   [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10], [11, 12, 13, 14, 15]]], dtype=np.uint8)


@pytest.mark.parametrize("compress", [False, True])
def test_any_image_size_plain_or_gzip(tmp_path, compress):
    raw = idx_images(PIXELS)
    # the file name does not say gzip: compression is found from the content
    path = put(tmp_path, "images.bin", gzip.compress(raw) if compress else raw)
    d = read_images(path)
    assert d.source == "MNIST" and d.classes is None and d.n_classes == 10
    assert d.inputs.shape == (2, 1, 3, 5) and d.inputs.dtype == np.float64
    assert d.inputs.flags["C_CONTIGUOUS"]
    # bytes 0..255 map linearly to -1..1 (the book's range; zero padding is mid-grey)
    assert d.inputs[0, 0, 0, 1] == 1.0 and d.inputs[0, 0, 0, 2] == pytest.approx(-0.6)
    assert d.inputs[0, 0, 1, 4] == pytest.approx(-0.2) and d.inputs[0, 0, 2].tolist() == [1.0] * 5
    assert d.inputs[1, 0, 2, 4] == pytest.approx(2 * 15 / 255 - 1)
    labels = put(tmp_path, "labels.gz" if not compress else "labels.plain",
                 idx_labels([7, 0]) if not compress else gzip.compress(idx_labels([7, 0])))
    d = read_labels(labels, d)
    assert d.classes.tolist() == [7, 0] and d.classes.dtype == np.int64
    assert d.inputs.shape == (2, 1, 3, 5)


def test_real_sample_pixel_sums_and_labels():
    with gzip.open(SAMPLE_IMAGES, "rb") as f:
        raw_images = f.read()
    with gzip.open(SAMPLE_LABELS, "rb") as f:
        raw_labels = f.read()
    count = int.from_bytes(raw_images[4:8], "big")
    assert count == 3000 and int.from_bytes(raw_labels[4:8], "big") == 3000
    pixels = np.frombuffer(raw_images, dtype=np.uint8, offset=16).reshape(3000, 28 * 28)
    labels = np.frombuffer(raw_labels, dtype=np.uint8, offset=8)
    d = read_labels(SAMPLE_LABELS, read_images(SAMPLE_IMAGES))
    assert (d.n_cases, d.rows, d.cols, d.bands, d.n_classes) == (3000, 28, 28, 1, 10)
    for case in (0, 1, 999, 2000, 2999):
        want = pixels[case].astype(np.int64).sum() * 2 / 255.0 - 28 * 28
        assert d.inputs[case].sum() == pytest.approx(want, rel=1e-12)
        assert d.classes[case] == labels[case]
    # the MNIST test set begins 7 2 1 0 4
    assert d.classes[:5].tolist() == [7, 2, 1, 0, 4]
    # the whole range -1..1 is reached: background 0 -> -1, full ink 255 -> +1
    assert d.inputs.min() == -1.0 and d.inputs.max() == 1.0
    assert np.count_nonzero(d.inputs == -1.0) > d.inputs.size // 2
    assert np.bincount(d.classes, minlength=10).min() > 250


# ---------------------------------------------------------------------------------- errors
def check_names_file(excinfo, path, *words):
    text = str(excinfo.value)
    assert path in text, text
    for w in words:
        assert w in text, text


def test_missing_image_file(tmp_path):
    path = str(tmp_path / "none.idx")
    with pytest.raises(ConvnetError) as e:
        read_images(path)
    check_names_file(e, path, "not found")


def test_missing_label_file(tmp_path):
    d = read_images(put(tmp_path, "i", idx_images(PIXELS)))
    path = str(tmp_path / "none.idx")
    with pytest.raises(ConvnetError) as e:
        read_labels(path, d)
    check_names_file(e, path, "not found")


def test_label_file_given_as_image_file(tmp_path):
    path = put(tmp_path, "labels.idx", idx_labels([1, 2]))
    with pytest.raises(ConvnetError) as e:
        read_images(path)
    check_names_file(e, path, "wrong magic number 0x00000801", "label file")


def test_image_file_given_as_label_file(tmp_path):
    d = read_images(put(tmp_path, "i", idx_images(PIXELS)))
    with pytest.raises(ConvnetError) as e:
        read_labels(put(tmp_path, "images.idx", idx_images(PIXELS)), d)
    check_names_file(e, str(tmp_path / "images.idx"), "wrong magic number 0x00000803", "image file")


@pytest.mark.parametrize("data", [b"PK\x03\x04 something else entirely",
                                  bytes([0, 0, 9, 3]) + b"\0" * 20, b"\0\0"])
def test_not_an_idx_file(tmp_path, data):
    path = put(tmp_path, "x", data)
    with pytest.raises(ConvnetError) as e:
        read_images(path)
    check_names_file(e, path)


@pytest.mark.parametrize("compress", [False, True])
def test_truncated_image_file(tmp_path, compress):
    raw = idx_images(PIXELS)[:-1]
    path = put(tmp_path, "images", gzip.compress(raw) if compress else raw)
    with pytest.raises(ConvnetError) as e:
        read_images(path)
    check_names_file(e, path, "truncated", "2 x 3 x 5")


def test_image_header_cut_short(tmp_path):
    path = put(tmp_path, "images", idx_images(PIXELS)[:10])
    with pytest.raises(ConvnetError) as e:
        read_images(path)
    check_names_file(e, path, "truncated")


def test_image_file_longer_than_its_header(tmp_path):
    path = put(tmp_path, "images", idx_images(PIXELS, count=1))
    with pytest.raises(ConvnetError) as e:
        read_images(path)
    check_names_file(e, path, "15 bytes more")


def test_image_file_with_no_images(tmp_path):
    path = put(tmp_path, "images", idx_images(np.zeros((0, 28, 28), np.uint8)))
    with pytest.raises(ConvnetError) as e:
        read_images(path)
    check_names_file(e, path, "no pixels")


def test_truncated_label_file(tmp_path):
    d = read_images(put(tmp_path, "i", idx_images(PIXELS)))
    path = put(tmp_path, "labels", idx_labels([1, 2])[:-1])
    with pytest.raises(ConvnetError) as e:
        read_labels(path, d)
    check_names_file(e, path, "truncated")


def test_label_count_differs_from_image_count(tmp_path):
    d = read_images(put(tmp_path, "i", idx_images(PIXELS)))
    path = put(tmp_path, "labels", idx_labels([1, 2, 3]))
    with pytest.raises(ConvnetError) as e:
        read_labels(path, d)
    check_names_file(e, path, "3 labels but 2 images")


def test_label_out_of_range(tmp_path):
    d = read_images(put(tmp_path, "i", idx_images(PIXELS)))
    path = put(tmp_path, "labels", idx_labels([3, 10]))
    with pytest.raises(ConvnetError) as e:
        read_labels(path, d)
    check_names_file(e, path, "label 10 of image 2", "0-9")


def test_labels_without_images(tmp_path):
    path = put(tmp_path, "labels", idx_labels([1, 2]))
    with pytest.raises(ConvnetError) as e:
        read_labels(path, None)
    check_names_file(e, path, "must follow READ MNIST IMAGE")
    other = Dataset(np.zeros((2, 1, 2, 2)), [0, 1], 2, "MAKE")
    with pytest.raises(ConvnetError):
        read_labels(path, other)


@pytest.mark.parametrize("damage", ["garbage", "cut"])
def test_corrupt_gzip(tmp_path, damage):
    packed = gzip.compress(idx_images(PIXELS))
    if damage == "garbage":
        data = packed[:10] + b"\xff" * 20 + packed[30:]
    else:
        data = packed[:len(packed) // 2]
    path = put(tmp_path, "images.gz", data)
    with pytest.raises(ConvnetError) as e:
        read_images(path)
    check_names_file(e, path, "gzip")
    with pytest.raises(ConvnetError) as e:
        read_labels(path, read_images(put(tmp_path, "i", idx_images(PIXELS))))
    check_names_file(e, path, "gzip")


def test_folder_given_as_file(tmp_path):
    with pytest.raises(ConvnetError) as e:
        read_images(str(tmp_path))
    check_names_file(e, str(tmp_path), "folder")
