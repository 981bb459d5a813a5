"""Image folders (READ IMAGES), class names, predictions (CLASSIFY, `convnet classify`) and a
TEST's most wrong cases, on real PNG digits written from the MNIST test file and on small RGB
pictures."""

import csv
import gzip
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from convnet import cluster
from convnet.cli import main
from convnet.data import mnist
from convnet.data.dataset import Dataset
from convnet.data.images import input_files, read_folder, spread_order
from convnet.errors import ConvnetError
from convnet.modelfile import decode_model, encode_model, read_model
from convnet.session import check, run
from convnet.train.confusion import format_confusion, most_wrong

ROOT = Path(__file__).resolve().parents[1]
MNIST_IMAGES = ROOT / "data" / "t10k-images-idx3-ubyte.gz"
MNIST_LABELS = ROOT / "data" / "t10k-labels-idx1-ubyte.gz"
DIGITS = {0: "zero", 1: "one", 7: "seven"}        # class folders, sorted: one, seven, zero
PER_CLASS = 100


def _mnist_arrays():
    pixels = np.frombuffer(gzip.decompress(MNIST_IMAGES.read_bytes())[16:], np.uint8)
    labels = np.frombuffer(gzip.decompress(MNIST_LABELS.read_bytes())[8:], np.uint8)
    return pixels.reshape(-1, 28, 28), labels


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """A folder of 300 real PNG digits (3 classes) and a note file to skip; {path: MNIST index}."""
    folder = tmp_path_factory.mktemp("images") / "digits"
    pixels, labels = _mnist_arrays()
    where = {}
    for label, name in DIGITS.items():
        (folder / name).mkdir(parents=True)
        for index in np.flatnonzero(labels == label)[:PER_CLASS]:
            path = folder / name / f"{index:05d}.png"
            Image.fromarray(pixels[index]).save(path)
            where[str(path)] = int(index)
    (folder / "zero" / "notes.txt").write_text("not an image")
    return folder, where


def _colour_folder(folder, size=(10, 12)):
    """Two classes of RGB pictures (reddish, bluish), one palette and one RGBA among them."""
    rng = np.random.default_rng(3)
    for name, channel in (("blue", 2), ("red", 0)):
        (folder / name).mkdir(parents=True)
        for k in range(6):
            pixels = rng.integers(0, 90, size=size + (3,), dtype=np.uint8)
            pixels[..., channel] += 150
            Image.fromarray(pixels, "RGB").save(folder / name / f"{k}.png")
    pixels = np.zeros(size + (4,), np.uint8)
    pixels[..., 0], pixels[..., 3] = 255, 128                 # half-transparent red over black
    Image.fromarray(pixels, "RGBA").save(folder / "red" / "alpha.png")
    Image.fromarray(np.full(size + (3,), (0, 0, 255), np.uint8)).convert("P").save(
        folder / "blue" / "palette.gif")
    return folder


def _control(folder, text):
    path = folder / "run.ctl"
    path.write_text(text)
    return path


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


# ------------------------------------------------------------------------------ reading
def test_read_folder_gives_class_names_spread_cases_and_the_mnist_tones(digits):
    folder, where = digits
    data, skipped = read_folder(str(folder))
    assert skipped == 1                                        # notes.txt
    assert data.class_names == ("one", "seven", "zero") and data.source == "IMAGES"
    assert (data.n_cases, data.bands, data.rows, data.cols) == (300, 1, 28, 28)
    assert list(data.classes[:3]) == [0, 1, 2]                 # every class spread evenly
    assert np.bincount(data.classes[:150]).tolist() == [50, 50, 50]
    reference = mnist.read_images(str(MNIST_IMAGES))
    for n in (0, 151, 299):                                    # the IDX reader's tones exactly
        path = data.case_names[n]
        assert Path(path).parent.name == data.class_names[data.classes[n]]
        assert np.array_equal(data.inputs[n], reference.inputs[where[path]])
    kept = data.keep_cases(11, 20)
    assert kept.class_names == data.class_names and kept.case_names == data.case_names[10:20]
    training, validation = data.hold_out(1, 30).split_held_out()       # VALIDATION CASES
    assert validation.case_names == data.case_names[:30] and training.n_cases == 270
    assert training.class_names == validation.class_names == data.class_names


def test_spread_order_keeps_class_shares_in_any_range():
    order = spread_order([2, 6])
    assert sorted(order) == [(0, 0), (0, 1)] + [(1, k) for k in range(6)]
    assert [c for c, _ in order[:4]].count(0) == 1


def test_colour_images_palette_alpha_and_resize(tmp_path):
    folder = _colour_folder(tmp_path / "colours")
    data, _ = read_folder(str(folder))
    assert data.bands == 3 and data.class_names == ("blue", "red")
    assert data.inputs.min() >= -1 and data.inputs.max() <= 1
    blue = data.inputs[data.case_names.index(str(folder / "blue" / "palette.gif"))]
    assert np.allclose(blue[2], 1) and np.allclose(blue[:2], -1)
    red = data.inputs[data.case_names.index(str(folder / "red" / "alpha.png"))]
    assert np.allclose(red[0], 128 * 2 / 255 - 1, atol=0.01) and np.allclose(red[1:], -1)
    small, _ = read_folder(str(folder), size=(5, 4))
    assert (small.rows, small.cols, small.bands) == (5, 4, 3)
    means = small.inputs.mean(axis=(2, 3))
    assert all(means[n, 0] > means[n, 2] for n in np.flatnonzero(small.classes == 1))


def test_grey_first_image_makes_one_band_and_colour_images_turn_grey(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    Image.fromarray(np.full((4, 4), 255, np.uint8)).save(tmp_path / "a" / "0.png")
    Image.fromarray(np.full((4, 4, 3), 255, np.uint8)).save(tmp_path / "b" / "0.bmp")
    Image.fromarray(np.full((4, 4, 3), 255, np.uint8)).save(tmp_path / "b" / "1.jpg")
    data, _ = read_folder(str(tmp_path))
    assert data.bands == 1 and np.allclose(data.inputs, 1, atol=0.02)


def test_sixteen_bit_grey_and_a_turned_photo(tmp_path):
    for name in ("deep", "photo"):
        (tmp_path / name).mkdir()
    deep = np.array([[0], [65535], [32768]], np.uint16)                 # 3 x 1
    Image.fromarray(deep).save(tmp_path / "deep" / "a.png")
    photo = Image.fromarray(np.array([[0, 0, 255, 255, 255, 255]], np.uint8))
    exif = Image.Exif()
    exif[0x0112] = 6                                      # stored 1 x 6, stands 6 x 1
    photo.save(tmp_path / "photo" / "b.jpg", exif=exif, quality=100)
    with pytest.raises(ConvnetError, match="b.jpg: the image is 6 x 1"):
        read_folder(str(tmp_path))
    data, _ = read_folder(str(tmp_path), size=(3, 1))
    assert (data.bands, data.rows, data.cols) == (1, 3, 1)
    grey = data.inputs[data.case_names.index(str(tmp_path / "deep" / "a.png"))].ravel()
    assert np.allclose(grey, [-1, 1, 32768 / 65535 * 2 - 1], atol=1e-6)


# ------------------------------------------------------------------------------ errors
def _error_line(tmp_path, text, command="check"):
    ctl = _control(tmp_path, text)
    args = [command, ctl] + (["--out", tmp_path / "out"] if command == "run" else [])
    result = _invoke(*args)
    assert result.exit_code == 2, result.output
    line = result.output.strip().splitlines()[-1]
    assert "Traceback" not in result.output
    return ctl, line


def test_a_broken_file_is_refused_naming_it(tmp_path, digits):
    folder = tmp_path / "digits"
    shutil.copytree(digits[0], folder)
    (folder / "one" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    for command in ("check", "run"):
        ctl, line = _error_line(tmp_path, 'READ IMAGES "digits"\n', command)
        assert line.startswith(f"convnet: error: {ctl}:1: digits/one/broken.png: "), line
    (folder / "one" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + (folder / "one").joinpath(
        sorted(os.listdir(folder / "one"))[0]).read_bytes()[8:60])          # truncated
    _, line = _error_line(tmp_path, 'READ IMAGES "digits"\n')
    assert "digits/one/broken.png: " in line


def test_mixed_sizes_are_refused_unless_resized(tmp_path, digits):
    folder = tmp_path / "digits"
    shutil.copytree(digits[0], folder)
    Image.fromarray(np.zeros((20, 21), np.uint8)).save(folder / "seven" / "zz.png")
    ctl, line = _error_line(tmp_path, 'READ IMAGES "digits"\n')
    assert line.startswith(f"convnet: error: {ctl}:1: digits/seven/zz.png: the image is 20 x 21")
    assert "IMAGE ROWS" in line
    check([str(_control(tmp_path, "IMAGE ROWS = 14\nIMAGE COLUMNS = 14\nREAD IMAGES \"digits\"\n"
                                  "FULLY CONNECTED LAYER 2\nTRAIN\n"))], echo=lambda line: None)
    ctl, line = _error_line(tmp_path, 'IMAGE ROWS = 14\nREAD IMAGES "digits"\n')
    assert line.startswith(f"convnet: error: {ctl}:2: set both IMAGE ROWS and IMAGE COLUMNS")


@pytest.mark.parametrize("make,message", [
    (lambda f: (f / "x.png").write_bytes(b""), "has no class subfolders"),
    (lambda f: ((f / "only").mkdir(), Image.new("L", (2, 2)).save(f / "only" / "a.png")),
     "has only one class subfolder"),
    (lambda f: [(f / n).mkdir() for n in ("a", "b")], "class subfolder 'a' holds no images"),
    (lambda f: None, "not found"),
])
def test_folders_without_classes_are_refused_at_their_line(tmp_path, make, message):
    folder = tmp_path / "pictures"
    if message != "not found":
        folder.mkdir()
        make(folder)
    ctl, line = _error_line(tmp_path, '// images\nREAD IMAGES "pictures"\n')
    assert line.startswith(f"convnet: error: {ctl}:2: image folder"), line
    assert message in line


# ------------------------------------------------------------------------------ the whole way
TRAIN_TEST_CLASSIFY = """\
READ IMAGES "digits"
KEEP CASES 1 210
FULLY CONNECTED LAYER 6
ANNEAL ITERS = 20
MAXITERS = 40
RANDOM SEED = 3
TRAIN
SAVE MODEL "digits.model"
CLEAR
READ IMAGES "digits"
KEEP CASES 211 300
TEST
CLASSIFY "digits/seven/*.png" "sevens.csv"
CLASSIFY "digits" "all.csv"
"""


@pytest.fixture(scope="module")
def trained(digits, tmp_path_factory):
    folder = digits[0].parent
    ctl = _control(folder, TRAIN_TEST_CLASSIFY)
    out = tmp_path_factory.mktemp("run") / "out"
    run([str(ctl)], out=str(out), device="cpu", threads=1)
    return out, json.loads((out / "results.json").read_text())


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_train_test_classify_on_a_folder(trained, digits):
    out, data = trained
    train, test = data["runs"]
    assert train["class_names"] == test["class_names"] == ["one", "seven", "zero"]
    assert test["n_cases"] == 90 and test["misclassification"] < 20
    log = (out / "CONVNET.LOG").read_text()
    assert "Classes: 1 = one, 2 = seven, 3 = zero" in log
    rows = _csv(out / "sevens.csv")
    assert rows[0] == ["path", "predicted", "p(one)", "p(seven)", "p(zero)"]
    assert len(rows) == 1 + PER_CLASS
    assert all(r[0].startswith("digits/seven/") for r in rows[1:])
    probabilities = np.array([[float(v) for v in r[2:]] for r in rows[1:]])
    assert np.allclose(probabilities.sum(axis=1), 1, atol=1e-5)
    assert [r[1] for r in rows[1:]] == [rows[0][2 + k][2:-1] for k in probabilities.argmax(1)]
    assert sum(r[1] == "seven" for r in rows[1:]) > 80
    assert len(_csv(out / "all.csv")) == 1 + 3 * PER_CLASS
    assert [p["file"] for p in data["predictions"]] == ["sevens.csv", "all.csv"]


def test_most_wrong_cases_in_results_and_report(trained):
    out, data = trained
    worst = data["runs"][1]["most_wrong"]
    assert len(worst) == 16
    nll = [w["nll"] for w in worst]
    assert nll == sorted(nll, reverse=True)
    for w in worst:
        assert np.isclose(w["nll"], -np.log(w["p_true"]))
        assert w["true_name"] == ["one", "seven", "zero"][w["true"]]
        assert w["source"].startswith("digits/") and 1 <= w["case"] <= 90
        with Image.open(out / w["file"]) as picture:
            assert picture.size == (28, 28) and picture.mode == "L"
    page = (out / "report.html").read_text()
    assert "<h3>Most wrong cases</h3>" in page
    shown = re.findall(r'<figure class="case" data-case="(\d+)" data-true="([^"]*)" '
                       r'data-predicted="([^"]*)"[^>]*><img src="data:image/png;base64,', page)
    assert [(int(c), t, p) for c, t, p in shown] == [
        (w["case"], w["true_name"], w["predicted_name"]) for w in worst]
    assert 'id="predictions"' in page and "sevens.csv" in page


def test_most_wrong_picks_the_largest_negative_log_likelihood():
    outputs = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.2, 0.8]])
    worst = most_wrong(outputs, np.array([0, 0, 1, 0]), count=3)
    assert [w["case"] for w in worst] == [1, 3, 2]
    assert worst[0]["predicted"] == 1 and worst[0]["p_true"] == 0.2


def test_convnet_classify_on_the_command_line(trained, digits, tmp_path):
    out, _ = trained
    model = out / "digits.model"
    assert read_model(model).class_names == ("one", "seven", "zero")
    zeros = digits[0] / "zero"
    result = _invoke("classify", model, zeros, "-o", tmp_path / "p.csv")
    assert result.exit_code == 0, result.output
    rows = _csv(tmp_path / "p.csv")
    assert len(rows) == 1 + PER_CLASS and rows[1][0].startswith(str(zeros))
    assert sum(r[1] == "zero" for r in rows[1:]) > 80
    again = _invoke("classify", model, zeros, "-o", tmp_path / "p.csv")
    assert again.exit_code == 2 and "--overwrite" in again.output
    big = tmp_path / "big.png"
    Image.open(sorted(zeros.glob("*.png"))[0]).resize((56, 56)).save(big)
    refused = _invoke("classify", model, big, "-o", tmp_path / "q.csv")
    assert refused.exit_code == 2 and f"{big}: the image is 56 x 56" in refused.output
    resized = _invoke("classify", model, big, "--resize", "-o", tmp_path / "q.csv")
    assert resized.exit_code == 0 and _csv(tmp_path / "q.csv")[1][1] == "zero"
    none = _invoke("classify", model, tmp_path / "nothing*.png", "-o", tmp_path / "r.csv")
    assert none.exit_code == 2 and "no image files there" in none.output


def test_loaded_model_names_its_classes_and_refuses_other_names(trained, digits, tmp_path):
    out, _ = trained
    shutil.copy(out / "digits.model", tmp_path / "digits.model")
    shutil.copytree(digits[0], tmp_path / "digits")
    ctl = _control(tmp_path, 'LOAD MODEL "digits.model"\nCLASSIFY "digits/one" "p.csv"\n')
    run([str(ctl)], out=str(tmp_path / "o1"), device="cpu", threads=1)
    assert _csv(tmp_path / "o1" / "p.csv")[0][2:] == ["p(one)", "p(seven)", "p(zero)"]
    (tmp_path / "digits" / "zero").rename(tmp_path / "digits" / "nought")
    ctl, line = _error_line(tmp_path, 'LOAD MODEL "digits.model"\nREAD IMAGES "digits"\nTEST\n')
    assert line.startswith(f"convnet: error: {ctl}:3: the data's classes (1 = nought, ")


# ------------------------------------------------------------------------------ model files
def test_model_file_class_names_round_trip_and_old_files(trained):
    out, _ = trained
    saved = read_model(out / "digits.model")
    data = encode_model(saved.arch, saved.weights, class_names=["a", "b", "c"])
    assert decode_model(data).class_names == ("a", "b", "c")
    plain = encode_model(saved.arch, saved.weights)           # what every older file is
    assert b"class_names" not in plain and decode_model(plain).class_names is None
    with pytest.raises(ValueError):
        encode_model(saved.arch, saved.weights, class_names=["a"])


def test_model_file_with_wrong_class_names_is_damaged(trained):
    out, _ = trained
    saved = read_model(out / "digits.model")
    import struct
    import zlib
    head = dict(saved.header, class_names=["a", "b"])
    text = json.dumps(head).encode()
    body = (struct.pack("<8sII", b"CONVNETM", 1, len(text)) + text
            + struct.pack("<Q", saved.weights.size) + saved.weights.astype("<f8").tobytes())
    with pytest.raises(ConvnetError, match="2 class names for 3 classes"):
        decode_model(body + struct.pack("<I", zlib.crc32(body)))


def test_without_class_names_the_book_layout_is_unchanged():
    matrix = np.array([[3, 1], [0, 4]])
    assert format_confusion(matrix, None) == format_confusion(matrix)
    assert format_confusion(matrix, ("a", "b"))[-1] == "Classes: 1 = a, 2 = b"
    assert Dataset(np.zeros((2, 1, 2, 2)), [0, 1], 2, "MAKE").class_names is None


# ------------------------------------------------------------------------------ the cluster
def test_a_cluster_ships_every_image_of_a_folder_and_a_pattern(digits, tmp_path):
    folder = digits[0].parent
    ctl = _control(folder, 'READ IMAGES "digits"\nCLASSIFY "digits/one/*.png" "p.csv"\n')
    shipped = {path for path, _, _ in cluster.control_inputs(str(ctl))}
    assert shipped == {os.path.abspath(p) for p in input_files(str(digits[0]))}
    assert len(shipped) == 3 * PER_CLASS                       # notes.txt stays at home


@pytest.mark.slow
def test_an_image_folder_on_a_real_cluster(digits, tmp_path):
    """A worker that never reads the client's files gets the folder's images and the pattern's;
    the run's predictions and most wrong pictures come back."""
    pytest.importorskip("distributed")
    from test_cluster import Cluster
    shutil.copytree(digits[0], tmp_path / "digits")
    _control(tmp_path, TRAIN_TEST_CLASSIFY.replace("MAXITERS = 40", "MAXITERS = 5"))
    (tmp_path / "dask").mkdir()
    c = Cluster(tmp_path / "dask")
    try:
        c.worker("copying", copy_inputs=True)
        c.wait_for(1)
        result = CliRunner().invoke(main, ["batch", str(tmp_path / "run.ctl"), "--out",
                                           str(tmp_path / "out"), "--scheduler", c.address,
                                           "--device", "cpu", "--threads", "1"])
    finally:
        c.close()
    assert result.exit_code == 0, result.output
    out = tmp_path / "out" / "run"
    assert len(_csv(out / "all.csv")) == 1 + 3 * PER_CLASS
    assert _csv(out / "sevens.csv")[1][0].startswith("digits/seven/")
    worst = json.loads((out / "results.json").read_text())["runs"][1]["most_wrong"]
    assert all((out / w["file"]).is_file() for w in worst)


def test_most_wrong_cases_in_the_browser(trained, tmp_path):
    """The report's most wrong cases as Chromium shows them: 16 pictures that decode."""
    from test_report_browser import BROWSER, Cells, dom
    if BROWSER is None:
        pytest.skip("no Chromium found (install the distribution's chromium package)")
    out, data = trained
    page = Cells(dom(out / "report.html"))
    cases = [a for t, a in page.elements if t == "figure" and a.get("class") == "case"]
    worst = data["runs"][1]["most_wrong"]
    assert [int(a["data-case"]) for a in cases] == [w["case"] for w in worst]
    pictures = [a["src"] for t, a in page.elements
                if t == "img" and a.get("alt", "").startswith("case ")]
    assert len(pictures) == 16
    import base64
    import io
    for src in pictures:
        with Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))) as picture:
            assert picture.size == (28, 28)


@pytest.mark.parametrize("text,line,message", [
    ('CLASSIFY "digits" "p.csv"\n', 1, "CLASSIFY needs a model: TRAIN or LOAD MODEL first"),
    ('READ IMAGES "digits"\nFULLY CONNECTED LAYER 2\nTRAIN\nCLASSIFY "none/*.png" "p.csv"\n', 4,
     "'none/*.png': no image files there"),
    ('READ IMAGES "digits"\nFULLY CONNECTED LAYER 2\nTRAIN\nIMAGE ROWS = 20\nIMAGE COLUMNS = 20\n'
     'CLASSIFY "digits" "p.csv"\n', 6, "IMAGE ROWS and IMAGE COLUMNS (20 x 20) differ from the "
     "model's images (28 x 28)"),
    ('READ IMAGES "digits"\nFULLY CONNECTED LAYER 2\nTRAIN\nCLASSIFY "odd/*.png" "p.csv"\n', 4,
     "odd/x.png: the image is 5 x 5 (rows x columns), the model's images are 28 x 28"),
])
def test_classify_errors_at_their_line(tmp_path, digits, text, line, message):
    shutil.copytree(digits[0], tmp_path / "digits")
    (tmp_path / "odd").mkdir()
    Image.new("L", (5, 5)).save(tmp_path / "odd" / "x.png")
    ctl, shown = _error_line(tmp_path, text)
    assert shown == f"convnet: error: {ctl}:{line}: {message}" or \
        shown.startswith(f"convnet: error: {ctl}:{line}: {message}"), shown


def test_an_exported_model_names_the_folder_classes(trained, digits, tmp_path):
    """ONNX export reads the class names from the model file; ONNX Runtime agrees with CLASSIFY."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    out, _ = trained
    result = _invoke("export", out / "digits.model", "-o", tmp_path / "digits.onnx")
    assert result.exit_code == 0, result.output
    session = ort.InferenceSession(str(tmp_path / "digits.onnx"))
    meta = session.get_modelmeta().custom_metadata_map
    assert json.loads(meta["class_names"]) == ["one", "seven", "zero"]
    rows = _csv(out / "sevens.csv")[1:5]
    base = digits[0].parent                          # the control file's folder
    images = np.stack([np.asarray(Image.open(base / r[0]), np.float32)[None] / 127.5 - 1
                       for r in rows]).astype(np.float32)
    (probabilities,) = session.run(None, {session.get_inputs()[0].name: images})
    assert np.allclose(probabilities, [[float(v) for v in r[2:]] for r in rows], atol=1e-5)


def test_a_resumed_batch_sees_new_images_of_a_pattern(tmp_path):
    """A batch run again reuses a finished run only with the same inputs: a CLASSIFY pattern's
    images are inputs too."""
    from convnet.resume import content_digest
    Image.new("L", (2, 2)).save(tmp_path / "a.png")
    before = content_digest(str(tmp_path / "*.png"))
    assert before is not None and content_digest(str(tmp_path / "*.jpg")) is None
    Image.new("L", (2, 2), 255).save(tmp_path / "b.png")
    assert content_digest(str(tmp_path / "*.png")) != before
