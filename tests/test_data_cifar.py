"""READ C10 IMAGE: hand-made CIFAR-10 records, concatenation, the generated sample, bad files."""

import os

import numpy as np
import pytest

from convnet.data.cifar import read_c10
from convnet.data.synthetic import make_image
from convnet.errors import ConvnetError
from scripts import load_script

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(HERE, os.pardir, "data", "cifar-format-sample.bin")


def record(label, red, green, blue):
    """One 3073-byte record: the label, then the red, green and blue 32 x 32 planes row by row."""
    planes = [np.full((32, 32), v, np.uint8) if np.isscalar(v) else np.asarray(v, np.uint8)
              for v in (red, green, blue)]
    return bytes([label]) + b"".join(p.tobytes() for p in planes)


def put(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_records_by_hand(tmp_path):
    ramp = np.arange(1024).reshape(32, 32) % 256       # red plane: pixel (r, c) = (32 r + c) % 256
    path = put(tmp_path, "batch.bin", record(3, ramp, 51, 255) + record(9, 0, 102, 0))
    d = read_c10(path)
    assert d.source == "C10" and d.n_classes == 10
    assert d.inputs.shape == (2, 3, 32, 32) and d.inputs.dtype == np.float64
    assert d.inputs.flags["C_CONTIGUOUS"]
    assert d.classes.tolist() == [3, 9]
    # bytes 0..255 map linearly to -1..1
    assert d.inputs[0, 0, 0, 0] == -1.0                            # red, row 0, column 0: 0
    assert d.inputs[0, 0, 0, 5] == pytest.approx(2 * 5 / 255 - 1)  # red, row 0, column 5
    assert d.inputs[0, 0, 1, 0] == pytest.approx(2 * 32 / 255 - 1)  # red, row 1, column 0
    assert d.inputs[0, 0, 7, 31] == 1.0                            # 7 * 32 + 31 = 255
    assert np.all(d.inputs[0, 1] == pytest.approx(-0.6))           # green 51 / 255 = 0.2
    assert np.all(d.inputs[0, 2] == 1.0)                           # blue
    assert np.all(d.inputs[1, 1] == pytest.approx(-0.2)) and d.inputs[1, 0].max() == -1.0


def test_several_files_are_concatenated(tmp_path):
    a = put(tmp_path, "a.bin", record(1, 10, 20, 30))
    b = put(tmp_path, "b.bin", record(2, 40, 50, 60) + record(0, 70, 80, 90))
    d = read_c10(b, existing=read_c10(a))
    assert d.n_cases == 3 and d.classes.tolist() == [1, 2, 0]
    np.testing.assert_allclose((d.inputs[:, :, 31, 31] + 1) * 127.5,
                               [[10, 20, 30], [40, 50, 60], [70, 80, 90]])


def test_generated_sample_matches_its_script():
    module = load_script("tests/make_cifar_sample.py", "make_cifar_sample")
    with open(SAMPLE, "rb") as f:
        committed = f.read()
    assert committed == module.make_records(200)
    d = read_c10(SAMPLE)
    assert d.n_cases == 200 and d.classes[:12].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    raw = np.frombuffer(committed, np.uint8).reshape(200, 3073)
    for case in (0, 57, 199):
        want = raw[case, 1:].astype(np.int64).sum() * 2 / 255 - 3072
        assert d.inputs[case].sum() == pytest.approx(want, rel=1e-12, abs=1e-9)
    assert d.inputs.min() == -1.0 and d.inputs.max() == 1.0


# ---------------------------------------------------------------------------------- errors
def test_missing_file(tmp_path):
    path = str(tmp_path / "data_batch_1.bin")
    with pytest.raises(ConvnetError) as e:
        read_c10(path)
    assert path in str(e.value) and "not found" in str(e.value)


@pytest.mark.parametrize("size", [1, 3072, 3074, 2 * 3073 - 5])
def test_size_not_a_multiple_of_3073(tmp_path, size):
    path = put(tmp_path, "batch.bin", bytes(size))
    with pytest.raises(ConvnetError) as e:
        read_c10(path)
    assert path in str(e.value) and "multiple of 3073" in str(e.value)
    assert f"{size} bytes" in str(e.value)


def test_empty_file(tmp_path):
    path = put(tmp_path, "batch.bin", b"")
    with pytest.raises(ConvnetError) as e:
        read_c10(path)
    assert path in str(e.value) and "empty" in str(e.value)


def test_label_out_of_range(tmp_path):
    path = put(tmp_path, "batch.bin", record(4, 0, 0, 0) + record(10, 0, 0, 0))
    with pytest.raises(ConvnetError) as e:
        read_c10(path)
    assert path in str(e.value) and "record 2 has label 10" in str(e.value)


def test_cannot_add_to_other_data(tmp_path):
    path = put(tmp_path, "batch.bin", record(4, 0, 0, 0))
    other = make_image(32, 32, 3, 10, 2, np.random.default_rng(0))
    with pytest.raises(ConvnetError) as e:
        read_c10(path, existing=other)
    assert path in str(e.value)
