"""Two real GPUs: one run split across them, and a batch with --gpus (skipped below two GPUs)."""

import csv
import os
import re

import numpy as np
import pytest
from click.testing import CliRunner

from convnet.architecture import Architecture
from convnet.devices import cuda_status
from convnet.params import DeviceParams


def _gpu_count():
    usable, _ = cuda_status()
    if not usable:
        return 0
    import pycuda.driver as cuda
    return cuda.Device.count()


_COUNT = _gpu_count()
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(_COUNT < 2, reason=f"needs two CUDA devices ({_COUNT} found)")]

LENET = ["CONVOLUTIONAL LAYER 20 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
         "CONVOLUTIONAL LAYER 50 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
         "FULLY CONNECTED LAYER 500"]


def _rel(a, b):
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b))


def test_two_gpus_agree_with_one_and_repeat_their_bits():
    from convnet.device.backend import DeviceBackend
    from convnet.device.multi import MultiDeviceBackend, device_backend
    arch = Architecture.from_lines(LENET, 28, 28, 1, 10)
    rng = np.random.default_rng(11)
    n = 3000
    x = rng.uniform(-1, 1, (n, 1, 28, 28))
    c = rng.integers(0, 10, n)
    w = rng.normal(0, 0.1, arch.n_weights)
    one = DeviceBackend(arch).evaluator(x, c, 0.001)
    crit1, grad1 = one.gradient(w)
    both = device_backend(arch, DeviceParams(cuda_devices="0,1"))
    assert isinstance(both, MultiDeviceBackend)
    ev = both.evaluator(x, c, 0.001)
    crit2, grad2 = ev.gradient(w)
    assert abs(crit2 - crit1) <= 1e-6 * crit1 and _rel(grad2, grad1) <= 1e-6
    assert abs(ev.criterion(w) - crit1) <= 1e-6 * crit1
    assert np.abs(ev.outputs(w) - one.outputs(w)).max() <= 1e-6
    # same GPUs, same bits, every time: timed evaluations and, past TIMED_FIRST, untimed ones
    # (their gradients beside the deltas)
    for _ in range(12):
        crit, grad = ev.gradient(w + 0.0)
        assert crit == crit2 and np.array_equal(grad, grad2)
    again = device_backend(arch, DeviceParams(cuda_devices="0,1")).evaluator(x, c, 0.001).gradient(w)
    assert again[0] == crit2 and np.array_equal(again[1], grad2)
    assert [b.rt.index for b in both.backends] == [0, 1]
    assert all(b.weight_uploads >= 1 for b in both.backends)


def test_run_with_gpus_writes_a_section_per_gpu(tmp_path):
    from convnet.cli import main
    ctl = tmp_path / "two.ctl"
    ctl.write_text("MAKE IMAGE 12 12 1 4 2000\nCONVOLUTIONAL LAYER 6 1 1 1 1 1 1\n"
                   "POOLED MAX LAYER 2 2 2 2\nFULLY CONNECTED LAYER 8\nANNEAL ITERS = 10\n"
                   "MAXITERS = 10\nTRAIN\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["run", str(ctl), "--out", str(out), "--device", "cuda",
                                       "--gpus", "0,1", "--seed", "2", "--quiet"])
    assert result.exit_code == 0, result.output
    log = (out / "CONVNET.LOG").read_text()
    assert "Computing on the CUDA devices 0, 1" in log
    cuda_log = (out / "CUDA.LOG").read_text()
    assert "device 0 cases 1 to 1024, device 1 cases 1025 to 2000" in cuda_log
    assert "3. Device 0 (cases 1 to 1024)" in cuda_log
    assert "4. Device 1 (cases 1025 to 2000)" in cuda_log


def test_batch_gives_each_session_a_gpu(tmp_path):
    from convnet.cli import main
    files = []
    for k in range(4):
        ctl = tmp_path / f"run{k}.ctl"
        ctl.write_text(f"MAKE IMAGE 12 12 1 4 {500 + 100 * k}\nCONVOLUTIONAL LAYER 4 1 1 1 1 1 1\n"
                       "FULLY CONNECTED LAYER 6\nCUDA = YES\nANNEAL ITERS = 10\nMAXITERS = 10\n"
                       "TRAIN\n")
        files.append(str(ctl))
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["batch", *files, "--out", str(out), "--gpus", "all",
                                       "--seed", "1"])
    assert result.exit_code == 0, result.output
    with open(out / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["status"] for r in rows] == ["ok"] * 4 and {r["device"] for r in rows} == {"cuda"}
    used = set()
    for k in range(4):
        log = (out / f"run{k}" / "CONVNET.LOG").read_text()
        used.add(int(re.search(r"Computing on the CUDA device (\d+)", log).group(1)))
        assert os.path.exists(out / f"run{k}" / "CUDA.LOG")
    assert used == set(range(_COUNT)) if _COUNT <= 4 else len(used) == 4
