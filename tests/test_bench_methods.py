"""benchmarks/methods.py: the presets, the lines a method's run gets (device, --set overrides),
and one small real comparison on the host (its JSON rows and its plot)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scripts import load_script
from test_device_emulated import fake_runtime  # noqa: F401  (the emulated CUDA runtime)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "methods.py"

TINY = """MAKE IMAGE 8 8 1 3 60
CONVOLUTIONAL LAYER 2 1 1 1 1 1 1
POOLED MAX LAYER 2 2 2 2
FULLY CONNECTED LAYER 4
MAXITERS = 2
ANNEAL ITERS = 5
TRAIN
CLEAR
MAKE IMAGE 8 8 1 3 30
TEST
"""


@pytest.fixture(scope="module")
def methods():
    return load_script("benchmarks/methods.py", "methods_bench")


def test_presets_keep_the_host_settings_and_add_the_gpu_ones(methods):
    assert methods.PRESETS["CG"] == []
    assert set(methods.PRESETS) >= {"CG", "SGD", "ADAM", "ADAM-WPEN", "SGD-GPU", "ADAM-GPU"}
    assert "BATCH SIZE = 256" in methods.PRESETS["SGD"]
    assert "EPOCHS = 600" in methods.PRESETS["ADAM"]
    assert "WPEN = 0.01" in methods.PRESETS["ADAM-WPEN"]
    sgd_gpu, adam_gpu = methods.PRESETS["SGD-GPU"], methods.PRESETS["ADAM-GPU"]
    for lines in (sgd_gpu, adam_gpu):
        assert {"ANNEAL ITERS = 0", "BATCH SIZE = 128", "EPOCHS = 16",
                "LR SCHEDULE = ONE CYCLE"} <= set(lines)
    assert "NESTEROV = YES" in sgd_gpu and "LEARNING RATE = 1" in sgd_gpu
    assert "TRAIN METHOD = ADAM" in adam_gpu and "LEARNING RATE = 0.002" in adam_gpu
    # the moved-case presets are the plain ones with AUGMENT SHIFT = 1 (Adam's batches, epochs and
    # rate as NOTES found best)
    assert methods.PRESETS["SGD-GPU-SHIFT"] == sgd_gpu + ["AUGMENT SHIFT = 1"]
    assert {"BATCH SIZE = 256", "EPOCHS = 40", "LEARNING RATE = 0.004",
            "AUGMENT SHIFT = 1"} <= set(methods.PRESETS["ADAM-GPU-SHIFT"])
    # every preset is a valid line of the control language
    from convnet.control import parse_line
    for name, lines in methods.PRESETS.items():
        for number, line in enumerate(lines, start=1):
            parse_line(line, f"{name}.ctl", number)


def test_method_lines_put_the_device_then_the_overrides_after_the_preset(methods):
    preset = methods.PRESETS["ADAM-GPU"]
    assert methods.method_lines("ADAM-GPU") == preset
    lines = methods.method_lines("ADAM-GPU", "cuda", ["EPOCHS = 24", "BATCH SIZE = 256"])
    assert lines == preset + ["CUDA = YES", "EPOCHS = 24", "BATCH SIZE = 256"]
    assert methods.method_lines("CG", "cpu", ["MAXITERS = 5"]) == ["MAXITERS = 5"]
    assert not any("THREADS" in line for line in lines)
    with pytest.raises(SystemExit, match="unknown method 'RMSPROP'"):
        methods.method_lines("RMSPROP")
    with pytest.raises(SystemExit, match="unknown device"):
        methods.method_lines("CG", "tpu")
    with pytest.raises(SystemExit, match="write a parameter line"):
        methods.method_lines("CG", "cpu", ["EPOCHS 24"])


def test_the_lines_go_before_the_first_train(methods):
    text = methods.with_lines(TINY, ["EPOCHS = 3", "CUDA = YES"])
    body = text.splitlines()
    at = body.index("TRAIN")
    assert body[at - 2:at] == ["EPOCHS = 3", "CUDA = YES"]
    assert body.count("EPOCHS = 3") == 1 and body[-1] == "TEST"
    with pytest.raises(SystemExit, match="no TRAIN"):
        methods.with_lines("MAKE IMAGE 8 8 1 3 60\n", ["EPOCHS = 3"])


def test_a_bad_override_stops_before_any_run(methods, tmp_path):
    ctl = tmp_path / "tiny.ctl"
    ctl.write_text(TINY)
    lines = methods.method_lines("SGD", "cpu", ["EPOCHZ = 3"])
    with pytest.raises(SystemExit, match=r"SGD: .*unknown parameter 'EPOCHZ'"):
        methods.check_methods(ctl, {"SGD": lines})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.ctl"]      # nothing left behind


def test_the_axis_names_the_device(methods):
    rows = [{"device_label": "NVIDIA H100 80GB HBM3"}, {"device_label": "NVIDIA H100 80GB HBM3"}]
    assert methods.axis_device({"rows": rows}) == "NVIDIA H100 80GB HBM3"
    # a file from before the device was recorded: the host and its threads
    assert methods.axis_device({"rows": [{}], "threads": 2}) == "host, 2 threads"


def test_a_small_comparison_on_the_host_writes_its_rows_and_plot(tmp_path):
    ctl = tmp_path / "tiny.ctl"
    ctl.write_text(TINY)
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(ctl), "--methods", "CG,SGD", "--seeds", "1",
         "--threads", "1", "--every", "0", "--set", "EPOCHS = 2", "--set", "BATCH SIZE = 32",
         "--target-error", "1", "--target-error", "0.9", "--target-seconds", "0.5",
         "--json", "out.json", "--png", "out.png"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["device"] == "cpu" and data["threads"] == 1 and data["machine"]
    assert data["overrides"] == ["EPOCHS = 2", "BATCH SIZE = 32"]
    assert data["methods"]["CG"] == ["EPOCHS = 2", "BATCH SIZE = 32"]
    assert [(r["method"], r["seed"]) for r in data["rows"]] == [("CG", 1), ("SGD", 1)]
    for row in data["rows"]:
        assert row["device"] == "cpu" and row["device_label"] == "host, 1 thread"
        assert 0 <= row["test_error"] <= 100 and row["train_s"] > 0
        seconds = [point[0] for point in row["curve"]]
        assert seconds == sorted(seconds)
        assert row["curve"][-1][1] == row["test_error"]
    cg, sgd = data["rows"]
    assert len(cg["curve"]) == 2 + 1          # --every 0: each of the 2 iterations, then the end
    assert len(sgd["curve"]) == 2 + 1         # each of the 2 epochs (--set EPOCHS = 2), the end
    assert (tmp_path / "out.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "out.png", "tiny.ctl"]


def test_the_device_label_comes_from_the_model_s_runtime(methods, fake_runtime, monkeypatch):
    import numpy as np
    from types import SimpleNamespace
    from convnet.architecture import Architecture
    from convnet.model import Model
    monkeypatch.setattr(fake_runtime, "device", SimpleNamespace(name=lambda: "Emulated GPU"),
                        raising=False)
    arch = Architecture.from_lines(["FULLY CONNECTED LAYER 3"], 4, 4, 1, 2)
    model = Model(arch, device="cuda")
    rng = np.random.default_rng(1)
    model.weights = rng.normal(0, 0.1, arch.n_weights)
    model.evaluator(rng.uniform(-1, 1, (5, 1, 4, 4)), rng.integers(0, 2, 5), 0.0)
    assert methods.device_label(model, None) == "Emulated GPU"
    several = SimpleNamespace(backend=SimpleNamespace(backends=[model.backend] * 2))
    assert methods.device_label(several, None) == "2 x Emulated GPU"
    host = Model(arch, device="cpu", threads=1)
    assert methods.device_label(host, 1) == "host, 1 thread"
