"""SAVE MODEL / LOAD MODEL: round trip, atomic writing, and every kind of bad file refused."""

import json
import os
import struct
import zlib

import numpy as np
import pytest

from convnet.architecture import Architecture
from convnet.errors import ConvnetError
from convnet.modelfile import (FORMAT_VERSION, MAGIC, encode_model, load_model, read_model,
                               save_model)

LINES = ["CONVOLUTIONAL LAYER 6 1 1 1 1 1 1", "POOLED MAX LAYER 3 3 2 2", "LOCAL LAYER 3 1 1 1 1 1 1",
         "POOLED AVERAGE LAYER 3 3 2 2", "FULLY CONNECTED LAYER 4"]


class _M:
    def __init__(self, arch, weights):
        self.arch, self.weights = arch, weights


@pytest.fixture
def model():
    arch = Architecture.from_lines(LINES, 12, 12, 1, 6)
    w = np.random.default_rng(3).normal(size=arch.n_weights) * 10.0 ** np.arange(-150, 150, 300 /
                                                                                  arch.n_weights)[:arch.n_weights]
    return _M(arch, w)


def test_round_trip_identical(tmp_path, model):
    path = tmp_path / "m.cnm"
    series = {"version": 1, "q": 0.25, "thresholds": [0.5, np.float64(1.5)], "mode": "THIRDS",
              "big": float("inf")}
    save_model(path, model, series_info=series, extra={"final_criterion": 0.123})
    arch, weights, s = load_model(path)
    assert arch.same_shape(model.arch)
    assert arch.control_lines() == LINES
    assert weights.dtype == np.float64 and np.array_equal(weights, model.weights)
    assert s == {"version": 1, "q": 0.25, "thresholds": [0.5, 1.5], "mode": "THIRDS",
                 "big": float("inf")}
    loaded = load_model(path)
    assert loaded.arch.n_weights == model.arch.n_weights and loaded.series == s
    saved = read_model(path)
    assert saved.extra == {"final_criterion": 0.123}
    assert saved.header["n_weights"] == model.arch.n_weights


def test_series_object_with_to_dict(tmp_path, model):
    class Info:
        def to_dict(self):
            return {"q": np.float64(2.0), "n": np.int64(3)}

    path = tmp_path / "m.cnm"
    save_model(path, model, series_info=Info())
    assert load_model(path).series == {"q": 2.0, "n": 3}
    save_model(path, model)
    assert load_model(path).series is None


def test_output_only_model_round_trip(tmp_path):
    arch = Architecture([], 3, 2, 2, 4)
    m = _M(arch, np.linspace(-1, 1, arch.n_weights))
    save_model(tmp_path / "o", m)
    a, w, _ = load_model(tmp_path / "o")
    assert a.layers == [] and np.array_equal(w, m.weights)


def test_layout_is_as_documented(tmp_path, model):
    data = encode_model(model.arch, model.weights)
    magic, version, hlen = struct.unpack_from("<8sII", data, 0)
    assert magic == MAGIC == b"CONVNETM" and version == FORMAT_VERSION == 1
    header = json.loads(data[16:16 + hlen])
    assert header["layers"] == LINES and header["rows"] == 12 and header["n_classes"] == 6
    (n,) = struct.unpack_from("<Q", data, 16 + hlen)
    assert n == model.arch.n_weights
    w = np.frombuffer(data, "<f8", n, 24 + hlen)
    assert np.array_equal(w, model.weights)
    (crc,) = struct.unpack_from("<I", data, len(data) - 4)
    assert crc == zlib.crc32(data[:-4]) and len(data) == 24 + hlen + 8 * n + 4
    assert b"pickle" not in data


def test_write_replaces_atomically_and_leaves_no_temp(tmp_path, model):
    path = tmp_path / "sub" / "m.cnm"
    save_model(path, model)
    save_model(path, _M(model.arch, model.weights * 2))
    assert np.array_equal(load_model(path).weights, model.weights * 2)
    assert os.listdir(tmp_path / "sub") == ["m.cnm"]


def test_failed_write_keeps_old_file(tmp_path, model, monkeypatch):
    path = tmp_path / "m.cnm"
    save_model(path, model)

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(ConvnetError) as e:
        save_model(path, _M(model.arch, model.weights + 1))
    assert str(path) in str(e.value) and "No space" in str(e.value)
    monkeypatch.undo()
    assert np.array_equal(load_model(path).weights, model.weights)
    assert os.listdir(tmp_path) == ["m.cnm"]


def test_unwritable_destination(tmp_path, model):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConvnetError) as e:
        save_model(blocker / "m.cnm", model)
    assert "cannot write" in str(e.value)


def _bad(tmp_path, data):
    p = tmp_path / "bad.cnm"
    p.write_bytes(data)
    with pytest.raises(ConvnetError) as e:
        load_model(p)
    assert e.value.file == str(p)
    return str(e.value)


def _with_crc(body):
    return body + struct.pack("<I", zlib.crc32(body))


def test_missing_file(tmp_path):
    with pytest.raises(ConvnetError) as e:
        load_model(tmp_path / "nope.cnm")
    assert "does not exist" in str(e.value) and "nope.cnm" in str(e.value)


def test_wrong_magic(tmp_path, model):
    assert "not a convnet model file" in _bad(tmp_path, b"")
    assert "not a convnet model file" in _bad(tmp_path, b"PK\x03\x04 a zip file")
    data = encode_model(model.arch, model.weights)
    assert "not a convnet model file" in _bad(tmp_path, b"X" + data[1:])


def test_wrong_version(tmp_path, model):
    data = bytearray(encode_model(model.arch, model.weights))
    struct.pack_into("<I", data, 8, 99)
    msg = _bad(tmp_path, _with_crc(bytes(data[:-4])))
    assert "version 99" in msg and "not supported" in msg


@pytest.mark.parametrize("cut", [9, 15, 20, 200, -5, -1])
def test_truncated(tmp_path, model, cut):
    data = encode_model(model.arch, model.weights)
    msg = _bad(tmp_path, data[:cut])
    assert "truncated" in msg or "damaged" in msg


def test_extra_bytes_and_flipped_bit(tmp_path, model):
    data = encode_model(model.arch, model.weights)
    assert "damaged" in _bad(tmp_path, data + b"\0")
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x10
    assert "checksum" in _bad(tmp_path, bytes(flipped))


def _rebuild(model, mutate_header=None, weights=None, count=None):
    data = encode_model(model.arch, model.weights)
    _, _, hlen = struct.unpack_from("<8sII", data, 0)
    header = json.loads(data[16:16 + hlen])
    if mutate_header:
        mutate_header(header)
    head = json.dumps(header).encode()
    w = model.weights if weights is None else weights
    n = w.size if count is None else count
    body = (struct.pack("<8sII", MAGIC, FORMAT_VERSION, len(head)) + head + struct.pack("<Q", n)
            + np.asarray(w, "<f8").tobytes())
    return _with_crc(body)


def test_mismatched_contents(tmp_path, model):
    msg = _bad(tmp_path, _rebuild(model, lambda h: h.update(n_weights=5)))
    assert "inconsistent" in msg
    msg = _bad(tmp_path, _rebuild(model, lambda h: h.update(layers=LINES[:3])))
    assert "inconsistent" in msg
    msg = _bad(tmp_path, _rebuild(model, lambda h: h.update(layers=["CONVOLUTIONAL LAYER 6 9 9 0 0 1 1"])))
    assert "impossible architecture" in msg
    msg = _bad(tmp_path, _rebuild(model, lambda h: h.pop("rows")))
    assert "lacks" in msg
    w = model.weights.copy()
    w[7] = np.nan
    assert "not finite" in _bad(tmp_path, _rebuild(model, weights=w))
    assert "unreadable header" in _bad(tmp_path, _with_crc(
        struct.pack("<8sII", MAGIC, 1, 3) + b"{x}" + struct.pack("<Q", 0)))


def test_unstorable_series(tmp_path, model):
    with pytest.raises(TypeError):
        save_model(tmp_path / "m", model, series_info={"f": object()})


@pytest.mark.slow
def test_test_after_save_and_load_in_a_new_process(tmp_path):
    """TEST of a model loaded in another process gives the same criterion and confusion matrix."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    first = tmp_path / "first.ctl"
    first.write_text("MAKE IMAGE 6 6 1 3 90\nCONVOLUTIONAL LAYER 2 1 1 1 1 1 1\n"
                     "POOLED MAX LAYER 2 2 2 2\nFULLY CONNECTED LAYER 4\nANNEAL ITERS = 10\n"
                     "MAXITERS = 25\nWPEN = 0.01\nTRAIN\nTEST\nSAVE MODEL \"m.cnm\"\nPRINT WEIGHTS\n")
    second = tmp_path / "second.ctl"
    second.write_text("MAKE IMAGE 6 6 1 3 90\nLOAD MODEL \"m.cnm\"\nTEST\nPRINT WEIGHTS\n")

    def run(ctl, out):
        r = subprocess.run([sys.executable, "-m", "convnet", "run", str(ctl), "--out", str(out),
                            "--seed", "11", "--threads", "1", "--quiet", "--device", "cpu"],
                           cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return (out / "CONVNET.LOG").read_text().splitlines()

    a = run(first, tmp_path / "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "m.cnm").write_bytes((tmp_path / "a" / "m.cnm").read_bytes())
    b = run(second, tmp_path / "b")

    def test_block(lines):
        i = max(k for k, l in enumerate(lines) if l.startswith("Test of "))
        j = next(k for k in range(i, len(lines)) if lines[k].startswith("Total misclassification"))
        return lines[i:j + 1]

    assert test_block(a) == test_block(b)
    assert re.match(r"Test of 90 cases: mean negative log likelihood = \d", test_block(a)[0])

    def weights_block(lines):
        i = max(k for k, l in enumerate(lines) if l.strip() == "PRINT WEIGHTS")
        return [l for l in lines[i + 1:] if l.startswith(("     ", "Layer "))]

    wa = weights_block(a)
    assert wa[0] == "Layer 1 of 4 (Convolutional) Slice 1 of 2" and wa[-1].endswith(" BIAS")
    assert wa == weights_block(b)
