"""The command line: run, check, devices, --version, and every ordering error as one clean line."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from convnet import __version__
from convnet.cli import main
from convnet.errors import ConvnetError

ROOT = Path(__file__).resolve().parents[1]
CONTROLFILES = ROOT / "controlfiles"


def write(tmp_path, text, name="exp.ctl"):
    path = tmp_path / name
    path.write_text(text)
    return path


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_version_and_help():
    result = invoke("--version")
    assert result.exit_code == 0 and __version__ in result.output
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("run", "check", "devices"):
        assert command in result.output


def test_devices_lists_gpus_or_why_none_and_threads():
    result = invoke("devices")
    assert result.exit_code == 0
    assert "Host threads:" in result.output
    assert "CUDA device" in result.output


def test_install_hints_name_the_distribution_this_package_is_installed_as(monkeypatch):
    """"convnet" on the package index is another project: every hint names ours, with the extra
    that setup.cfg declares."""
    import configparser
    from convnet import cluster
    from convnet.devices import cuda_status
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    name = setup["metadata"]["name"]
    assert name != "convnet"
    extras = setup["options.extras_require"]
    assert "cuda" in extras and "cluster" in extras
    monkeypatch.setitem(sys.modules, "pycuda.driver", None)      # import fails: not installed
    monkeypatch.setitem(sys.modules, "distributed", None)
    assert cuda_status() == (False, f"PyCUDA is not installed (pip install '{name}[cuda]')")
    result = invoke("devices")
    assert f"pip install '{name}[cuda]'" in result.output
    with pytest.raises(ConvnetError, match=re.escape(f"pip install '{name}[cluster]'")):
        cluster.connect("tcp://127.0.0.1:1")
    for text in [*(p.read_text() for p in (ROOT / "convnet").rglob("*.py")),
                 (ROOT / "README.md").read_text()]:
        assert not re.search(r"pip install '?convnet(?![-\w])", text)


def test_check_manual_example_prints_the_books_report():
    result = invoke("check", CONTROLFILES / "manual_example.ctl")
    assert result.exit_code == 0, result.output
    assert "Layer 3 is locally connected, with 3 slices, each 5 high and 5 wide" in result.output
    assert result.output.splitlines()[-2] == "4267 Total weights for the entire model"
    assert result.output.strip().endswith(": OK")


@pytest.mark.parametrize("name,total", [
    ("lenet-mnist.ctl", None), ("lenet-mnist-split.ctl", None), ("mnist-small.ctl", None),
    ("local-rgb.ctl", None), ("series-sp500.ctl", None), ("lenet-mnist-split-tf32.ctl", None),
])
def test_check_every_bench_copy(name, total):
    result = invoke("check", CONTROLFILES / name)
    assert result.exit_code == 0, result.output
    assert "Total weights for the entire model" in result.output


def test_lenet_report_numbers():
    result = invoke("check", CONTROLFILES / "lenet-mnist.ctl")
    out = result.output
    assert "Input has 28 rows, 28 columns, and 1 bands" in out
    assert "Layer 1 is convolutional, with 20 slices, each 24 high and 24 wide" in out
    assert "Layer 2 is 2 by 2 pooling max, with stride 2 by 2, 12 high, 12 wide, and 20 deep" in out
    assert "Layer 3 is convolutional, with 50 slices, each 8 high and 8 wide" in out
    assert "Layer 4 is 2 by 2 pooling max, with stride 2 by 2, 4 high, 4 wide, and 50 deep" in out
    # 20*26 + 50*501 + 500*801 + 10*501
    assert f"{20 * 26 + 50 * 501 + 500 * 801 + 10 * 501} Total weights for the entire model" in out


ORDER_ERRORS = [
    ("READ MNIST LABELS \"{labels}\"\n", 1, "READ MNIST LABELS must follow READ MNIST IMAGE"),
    ("MAKE IMAGE 4 4 1 2 10\nMAKE IMAGE 4 4 1 2 10\n", 2, "data is already present (use CLEAR first)"),
    ("READ MNIST IMAGE \"{images}\"\nREAD MNIST IMAGE \"{images}\"\n", 2, "already present"),
    ("MAKE IMAGE 4 4 1 2 10\nREAD C10 IMAGE \"{images}\"\n", 2, "other data is already present"),
    ("FULLY CONNECTED LAYER 3\nTRAIN\n", 2, "TRAIN needs data"),
    ("MAKE IMAGE 4 4 1 2 10\nTRAIN\n", 2, "TRAIN needs at least one layer line"),
    ("READ MNIST IMAGE \"{images}\"\nFULLY CONNECTED LAYER 3\nTRAIN\n", 3,
     "the MNIST labels have not been read"),
    ("MAKE IMAGE 4 4 1 2 10\nTEST\n", 2, "TEST needs a model"),
    ("PRINT WEIGHTS\n", 1, "PRINT WEIGHTS needs a model"),
    ("SAVE MODEL \"m.cnm\"\n", 1, "SAVE MODEL needs a model"),
    ("KEEP CASES 1 2\n", 1, "KEEP CASES needs data"),
    ("DISPLAY TRAINING IMAGES 1 1 1 \"a.png\"\n", 1, "needs data"),
    ("MAKE IMAGE 4 4 2 2 10\nDISPLAY TRAINING IMAGES 1 1 1 \"a.png\"\n", 2, "1 or 3 bands"),
    ("MAKE IMAGE 4 4 1 2 10\nFULLY CONNECTED LAYER 3\nTRAIN\nDISPLAY FILTER IMAGES 1 1 1 \"f.png\"\n",
     4, "first hidden layer is convolutional"),
    ("MAKE IMAGE 4 4 1 2 10\nCONVOLUTIONAL LAYER 2 1 1 1 1 1 1\nTRAIN\n"
     "DISPLAY ACTIVATION IMAGES 1 1 1 11 \"a.png\"\n", 4, "case 11 is past the last case (10)"),
    ("MAKE IMAGE 4 4 1 2 10\nCONVOLUTIONAL LAYER 2 3 3 0 0 1 1\nTRAIN\n", 2, "larger than"),
    ("MAKE IMAGE 4 4 1 3 10\nFULLY CONNECTED LAYER 3\nTRAIN\nCLEAR\nMAKE IMAGE 5 4 1 3 10\nTEST\n", 6,
     "images are 5 x 4, the model's are 4 x 4"),
    ("MAKE IMAGE 4 4 1 3 10\nFULLY CONNECTED LAYER 3\nTRAIN\nCLEAR\nMAKE IMAGE 4 4 1 2 10\nTEST\n", 6,
     "class"),
    ("TRAIN\nBOGUS LINE\n", 2, "unknown command 'BOGUS LINE'"),
]


@pytest.mark.parametrize("text,line,message", ORDER_ERRORS)
def test_check_reports_ordering_errors_with_file_and_line(tmp_path, text, line, message):
    images = ROOT / "data" / "t10k-images-idx3-ubyte.gz"
    labels = ROOT / "data" / "t10k-labels-idx1-ubyte.gz"
    ctl = write(tmp_path, text.format(images=images, labels=labels))
    result = invoke("check", ctl)
    assert result.exit_code == 2, result.output
    first = result.output.strip().splitlines()[-1]
    assert first.startswith(f"convnet: error: {ctl}:{line}: "), first
    assert message in first
    assert "Traceback" not in result.output


def test_run_error_goes_to_stderr_and_log_with_status_2(tmp_path):
    ctl = write(tmp_path, "MAKE IMAGE 4 4 1 2 10\nWPEN = -1\n")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "convnet", "run", str(ctl), "--out", str(out)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"convnet: error: {ctl}:2: WPEN must be at least 0.0, not -1"
    assert "Traceback" not in proc.stderr
    # a syntax error stops the run before any work: nothing but the log is written
    log = (out / "CONVNET.LOG").read_text()
    assert "ERROR:" in log and "WPEN must be at least 0.0" in log


def test_run_missing_control_file(tmp_path):
    result = invoke("run", tmp_path / "nope.ctl", "--out", tmp_path)
    assert result.exit_code == 2
    assert "control file not found" in result.output


def test_run_echoes_every_line_to_the_log(tmp_path):
    ctl = write(tmp_path, "// just data\nMAKE IMAGE 4 4 1 2 10\n\nKEEP CASES 2 5\n")
    result = invoke("run", ctl, "--out", tmp_path / "o", "--seed", "3", "--quiet")
    assert result.exit_code == 0, result.output
    log = (tmp_path / "o" / "CONVNET.LOG").read_text().splitlines()
    assert log[0].startswith("CONVNET.LOG format 1")
    assert "// just data" in log and "MAKE IMAGE 4 4 1 2 10" in log and "KEEP CASES 2 5" in log
    assert "Random seed = 3" in log
    assert any("4 cases of 4 rows" in line for line in log)


def test_tf32_precision_on_the_host_is_said_once(tmp_path):
    ctl = write(tmp_path, "MAKE IMAGE 4 4 1 2 20\nCUDA PRECISION = TF32\nFULLY CONNECTED LAYER 3\n"
                          "ANNEAL ITERS = 2\nMAXITERS = 2\nTRAIN\nTEST\n")
    result = invoke("run", ctl, "--out", tmp_path / "o", "--seed", "3", "--quiet",
                    "--device", "cpu", "--threads", "1")
    assert result.exit_code == 0, result.output
    log = (tmp_path / "o" / "CONVNET.LOG").read_text()
    note = "CUDA PRECISION = TF32 is for the GPU; the host path computes in float64"
    assert log.count(note) == 1


def test_cuda_yes_without_gpu_is_a_clear_error(tmp_path):
    pytest.importorskip("numpy")
    from convnet.devices import cuda_status
    if cuda_status()[0]:
        pytest.skip("a GPU is usable here")
    ctl = write(tmp_path, "MAKE IMAGE 4 4 1 2 10\nFULLY CONNECTED LAYER 2\nCUDA = YES\nTRAIN\n")
    result = invoke("run", ctl, "--out", tmp_path)
    assert result.exit_code == 2
    assert f"{ctl}:4: CUDA was requested but is not usable" in result.output



@pytest.mark.parametrize("command", [("log", "summary"), ("log", "plot"), ("log", "compare")])
def test_log_commands_refuse_a_missing_log_beside_other_results(tmp_path, command):
    (tmp_path / "results.json").write_text("{}")      # another run's results in that folder
    missing = tmp_path / "CONVNET.LOG"
    extra = {"summary": [], "plot": ["-o", tmp_path / "c.png"],
             "compare": [ROOT / "CONVNET.LOG.example"]}[command[1]]
    result = invoke(*command, missing, *extra)
    assert result.exit_code == 2
    assert result.output == f"convnet: error: {missing}: log file not found\n"
    assert not (tmp_path / "c.png").exists()


def test_log_example_is_a_real_log_of_the_manual_example():
    """CONVNET.LOG.example: a real run of controlfiles/manual_example.ctl --seed 1 (README says how
    to regenerate it); the summary reads it and its training error is far under the book's 17.87."""
    example = ROOT / "CONVNET.LOG.example"
    result = invoke("log", "summary", example)
    assert result.exit_code == 0, result.output
    text = example.read_text()
    assert "controlfiles/manual_example.ctl" in text and "Random seed = 1" in text
    assert "4267 Total weights for the entire model" in text
    from convnet.logs.reader import read_log
    run = read_log(str(example)).runs[0]
    assert run.misclassification < 17.87 / 2
