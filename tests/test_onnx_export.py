"""ONNX export: ONNX Runtime's class probabilities equal ours on the golden vectors and on random
nets of every layer kind; `convnet export`, `EXPORT ONNX`, the metadata and the error paths.

Needs the `onnx` extra (onnx and onnxruntime); without it these tests are skipped."""

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from convnet.architecture import KINDS, Architecture                      # noqa: E402
from convnet.cli import main                                              # noqa: E402
from convnet.errors import ConvnetError                                   # noqa: E402
from convnet.export.onnx import INPUT, OUTPUT, onnx_model                 # noqa: E402
from convnet.model import Model                                           # noqa: E402
from convnet.modelfile import read_model, save_model                      # noqa: E402

from conftest import random_problem                                       # noqa: E402
from layer_cases import cases, kind_arch                                  # noqa: E402

TOLERANCE = 1e-5
RANDOM_SEEDS = range(40)


def onnx_probabilities(model_proto, inputs):
    session = ort.InferenceSession(model_proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run([OUTPUT], {INPUT: np.asarray(inputs, dtype=np.float32)})[0]


def host_probabilities(arch, weights, inputs):
    model = Model(arch, threads=1)
    model.weights = weights
    return model.predict(inputs)


def assert_same_probabilities(arch, weights, inputs):
    ours = host_probabilities(arch, weights, inputs)
    theirs = onnx_probabilities(onnx_model(arch, weights), inputs)
    assert theirs.shape == ours.shape
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=TOLERANCE)


# ------------------------------------------------------------------ the numbers
def test_golden_vectors(reference_case):
    """The author's own outputs, for nets of every kind, padding and stride."""
    c = reference_case
    model = onnx_model(c.arch, c.weights)
    onnx.checker.check_model(model)
    np.testing.assert_allclose(onnx_probabilities(model, c.inputs), c.outputs, rtol=0,
                               atol=TOLERANCE)


@pytest.mark.parametrize("seed", RANDOM_SEEDS)
def test_random_architectures(seed):
    arch, weights, inputs, _, _ = random_problem(seed, n_cases=4)
    assert_same_probabilities(arch, weights, inputs)


def test_random_architectures_cover_every_kind():
    seen = set()
    for seed in RANDOM_SEEDS:
        seen |= {str(layer.kind) for layer in random_problem(seed)[0].layers}
    assert seen == set(KINDS)


KIND_CASES, KIND_IDS = cases()


@pytest.mark.parametrize("kind,place", KIND_CASES, ids=KIND_IDS)
def test_every_kind_alone_and_after_a_layer(kind, place):
    """Asymmetric windows, padding and strides of each kind; large weights saturate tanh."""
    arch = kind_arch(kind, place)
    rng = np.random.default_rng(len(kind) + len(place))
    inputs = rng.uniform(-1, 1, (5, arch.bands, arch.rows, arch.cols))
    for scale in (0.3, 3.0):
        assert_same_probabilities(arch, rng.normal(0, scale, arch.n_weights), inputs)


def test_max_pooling_of_equal_values():
    """Ties in a max-pooling window (the book keeps the first; the value is the same)."""
    arch = Architecture.from_lines(["POOLED MAX LAYER 2 2 2 2"], 4, 4, 1, 2)
    inputs = np.zeros((2, 1, 4, 4))
    inputs[1, 0, :2, :2] = 0.5
    weights = np.random.default_rng(1).normal(0, 1, arch.n_weights)
    assert_same_probabilities(arch, weights, inputs)


# ------------------------------------------------------------------ the model's description
def test_metadata_says_how_to_feed_the_model():
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 2 1 1 1 1 1 1"], 6, 5, 3, 4)
    model = onnx_model(arch, np.zeros(arch.n_weights))
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta["input_range"] == "-1..1"
    assert (meta["bands"], meta["rows"], meta["columns"], meta["classes"]) == ("3", "6", "5", "4")
    assert meta["input_layout"].startswith("N x bands x rows x columns (NCHW), float32")
    assert json.loads(meta["class_names"]) == ["0", "1", "2", "3"]
    assert json.loads(meta["layers"]) == ["CONVOLUTIONAL LAYER 2 1 1 1 1 1 1"]
    (image,) = model.graph.input
    dims = [d.dim_param or d.dim_value for d in image.type.tensor_type.shape.dim]
    assert (image.name, dims) == (INPUT, ["N", 3, 6, 5])
    assert image.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert [o.name for o in model.graph.output] == [OUTPUT]
    # all-zero weights: every class equally likely
    probabilities = onnx_probabilities(model, np.zeros((2, 3, 6, 5)))
    np.testing.assert_allclose(probabilities, 0.25, atol=1e-7)


def test_class_names_are_kept_and_checked():
    arch = Architecture.from_lines([], 3, 3, 1, 3)
    model = onnx_model(arch, np.zeros(arch.n_weights), class_names=["cat", "dog", "bird"])
    meta = {p.key: p.value for p in model.metadata_props}
    assert json.loads(meta["class_names"]) == ["cat", "dog", "bird"]
    with pytest.raises(ConvnetError, match="2 class names for a model of 3 classes"):
        onnx_model(arch, np.zeros(arch.n_weights), class_names=["cat", "dog"])
    with pytest.raises(ConvnetError, match="weights for a model of"):
        onnx_model(arch, np.zeros(arch.n_weights + 1))


# ------------------------------------------------------------------ convnet export
def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def saved_model(tmp_path):
    """A model file of a LOCAL + POOLAVG + FC net with random weights, and some images."""
    arch = Architecture.from_lines(["LOCAL LAYER 2 1 1 1 0 1 1", "POOLED AVERAGE LAYER 2 2 1 1",
                                    "FULLY CONNECTED LAYER 3"], 7, 6, 2, 3)
    rng = np.random.default_rng(5)
    model = Model(arch, threads=1)
    model.weights = rng.normal(0, 0.5, arch.n_weights)
    path = tmp_path / "net.cnm"
    save_model(path, model)
    return path, model, rng.uniform(-1, 1, (6, 2, 7, 6))


def test_cli_exports_a_model_file(saved_model, tmp_path):
    path, model, inputs = saved_model
    result = invoke("export", path, "-o", tmp_path / "net.onnx")
    assert result.exit_code == 0, result.output
    assert f"convnet: wrote {tmp_path / 'net.onnx'}" in result.output
    exported = onnx.load(str(tmp_path / "net.onnx"))
    np.testing.assert_allclose(onnx_probabilities(exported, inputs), model.predict(inputs),
                               rtol=0, atol=TOLERANCE)


def test_cli_names_the_file_after_the_model_and_keeps_existing_files(saved_model, tmp_path):
    path, _, _ = saved_model
    assert invoke("export", path).exit_code == 0
    written = tmp_path / "net.onnx"
    first = written.read_bytes()
    result = invoke("export", path)
    assert result.exit_code == 2
    assert result.output.strip() == (f"convnet: error: {written}: the file exists already "
                                     "(--overwrite replaces it)")
    assert written.read_bytes() == first
    assert invoke("export", path, "--overwrite").exit_code == 0
    result = invoke("export", path, "-o", path, "--overwrite")     # never over the model itself
    assert result.exit_code == 2 and "would replace the model file itself" in result.output
    read_model(path)


def test_cli_errors_are_one_line(saved_model, tmp_path):
    path, _, _ = saved_model
    result = invoke("export", tmp_path / "missing.cnm", "-o", tmp_path / "m.onnx")
    assert result.exit_code == 2
    assert result.output.strip() == (f"convnet: error: {tmp_path / 'missing.cnm'}: "
                                     "the model file does not exist")
    (tmp_path / "not-a-model.cnm").write_bytes(b"hello")
    result = invoke("export", tmp_path / "not-a-model.cnm", "-o", tmp_path / "m.onnx")
    assert result.exit_code == 2 and "not a convnet model file" in result.output
    (tmp_path / "a-file").write_text("x")
    result = invoke("export", path, "-o", tmp_path / "a-file" / "m.onnx")
    assert result.exit_code == 2
    assert result.output.startswith(f"convnet: error: {tmp_path / 'a-file' / 'm.onnx'}: "
                                    "cannot write the ONNX file")
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "m.onnx").exists()


# ------------------------------------------------------------------ EXPORT ONNX in a control file
TRAIN_AND_EXPORT = """MAKE IMAGE 6 6 1 3 30
CONVOLUTIONAL LAYER 2 1 1 1 1 1 1
POOLED MAX LAYER 2 2 2 2
FULLY CONNECTED LAYER 4
ANNEAL ITERS = 3
MAXITERS = 3
TRAIN
EXPORT ONNX "trained.onnx"
SAVE MODEL "trained.cnm"
LOAD MODEL "trained.cnm"
EXPORT ONNX "sub/loaded.onnx"
"""


def test_control_command_after_train_and_after_load(tmp_path):
    ctl = tmp_path / "export.ctl"
    ctl.write_text(TRAIN_AND_EXPORT)
    out = tmp_path / "out"
    assert invoke("check", ctl).exit_code == 0
    assert not out.exists()
    result = invoke("run", ctl, "--out", out, "--seed", "1", "--quiet", "--device", "cpu")
    assert result.exit_code == 0, result.output
    saved = read_model(out / "trained.cnm")
    inputs = np.random.default_rng(2).uniform(-1, 1, (8, 1, 6, 6))
    ours = host_probabilities(saved.arch, saved.weights, inputs)
    for name in ("trained.onnx", "sub/loaded.onnx"):
        exported = onnx.load(str(out / name))
        np.testing.assert_allclose(onnx_probabilities(exported, inputs), ours, rtol=0,
                                   atol=TOLERANCE)
    assert "Model exported to ONNX: " in (out / "CONVNET.LOG").read_text()
    models = json.loads((out / "results.json").read_text())["models"]
    exports = [m for m in models if m["action"] == "exported to ONNX"]
    assert [m["file"] for m in exports] == ["trained.onnx", "sub/loaded.onnx"]
    assert [m["line"] for m in exports] == [8, 11]


@pytest.mark.parametrize("text,line,message", [
    ('MAKE IMAGE 6 6 1 3 30\nEXPORT ONNX "m.onnx"\n', 2,
     "EXPORT ONNX needs a model: TRAIN or LOAD MODEL first"),
    ('MAKE IMAGE 6 6 1 3 30\nFULLY CONNECTED LAYER 2\nANNEAL ITERS = 1\nMAXITERS = 1\nTRAIN\n'
     'EXPORT ONNX "CONVNET.LOG/m.onnx"\n', 6, "cannot write the ONNX file"),
    ('MAKE IMAGE 6 6 1 3 30\nFULLY CONNECTED LAYER 2\nANNEAL ITERS = 1\nMAXITERS = 1\nTRAIN\n'
     'EXPORT ONNX "."\n', 6, "cannot write the ONNX file: it exists and is not a regular file"),
], ids=["no-model", "unwritable-folder", "a-folder"])
def test_control_command_errors(tmp_path, text, line, message):
    ctl = tmp_path / "bad.ctl"
    ctl.write_text(text)
    result = invoke("run", ctl, "--out", tmp_path / "out", "--seed", "1", "--quiet",
                    "--device", "cpu")
    assert result.exit_code == 2
    (error,) = result.output.strip().splitlines()
    assert error.startswith(f"convnet: error: {ctl}:{line}: ") and message in error


def test_check_says_when_the_onnx_extra_is_missing(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "onnx", None)     # `import onnx` fails
    ctl = tmp_path / "export.ctl"
    ctl.write_text(TRAIN_AND_EXPORT)
    result = invoke("check", ctl)
    assert result.exit_code == 2
    assert (f"convnet: error: {ctl}:8: ONNX export needs the onnx package: "
            "pip install 'convnet-trainer[onnx]'") in result.output


def test_readme_example_runs_as_written(tmp_path, monkeypatch):
    """The README's ONNX Runtime example, on an exported model of its image size."""
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = text.split("\n## Export to ONNX\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"^```python\n(.*?)^```$", section, flags=re.M | re.S)
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 2 1 1 1 1 2 2"], 28, 28, 1, 10)
    model = onnx_model(arch, np.random.default_rng(3).normal(0, 0.1, arch.n_weights))
    (tmp_path / "model.onnx").write_bytes(model.SerializeToString())
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["probabilities"].shape == (5, 10)
    np.testing.assert_allclose(namespace["probabilities"].sum(axis=1), 1.0, atol=1e-6)


def test_the_onnx_extra_installs_what_the_export_needs():
    import configparser
    from pathlib import Path
    setup = configparser.ConfigParser()
    setup.read(Path(__file__).resolve().parents[1] / "setup.cfg")
    extra = setup["options.extras_require"]["onnx"].split()
    assert {re.split(r"[<>=]", r)[0] for r in extra} == {"onnx", "onnxruntime"}
