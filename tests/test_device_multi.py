"""Several CUDA devices in one run (device/multi.py): shards, fixed-order sums, CUDA.LOG.

Without a GPU the devices are numpy emulations of the CUDA runtime (test_device_emulated.py), one
per device with memory of its own; the real two-GPU tests are in test_device_multi_gpu.py.
"""

import numpy as np
import pytest

from convnet.architecture import Architecture
from convnet.control import parse_devices, parse_line
from convnet.device import backend as dbe
from convnet.device import multi, runtime
from convnet.device.plan import CHUNK, ModelPlan, simulate
from convnet.params import DeviceParams, Params
from convnet.errors import ConvnetError
from test_device_emulated import FakeRuntime


class _FakeDevice(FakeRuntime):
    def __init__(self, index):
        super().__init__()
        self.index = index

    def report(self):
        return [f"Device {self.index}: emulated", "   details"] + [
            f"Device {i}: emulated (not used)" for i in range(4) if i != self.index]


@pytest.fixture
def fake_devices(monkeypatch):
    """Three emulated devices, numbered 0 to 2."""
    devices = {i: _FakeDevice(i) for i in range(3)}
    monkeypatch.setattr(runtime.Runtime, "_instances", devices)
    monkeypatch.setattr(multi, "device_count", lambda: len(devices))
    return devices


def _problem(n=700, seed=3):
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 3 1 1 1 1 1 1", "POOLED MAX LAYER 2 2 2 2",
                                    "FULLY CONNECTED LAYER 5"], 8, 8, 1, 3)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, 1, 8, 8))
    c = rng.integers(0, 3, n)
    w = rng.normal(0, 0.5, arch.n_weights)
    return arch, x, c, w


def _rel(a, b):
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b))


# ---------------------------------------------------------------------------- which devices
def test_parse_devices():
    assert parse_devices("0,1") == "0,1" and parse_devices(" 2 , 0 ") == "2,0"
    assert parse_devices("all") == "ALL" and parse_devices("All") == "ALL"
    for bad, words in (("1,1", "named twice"), ("", "separated by commas"), ("0;1", "commas"),
                       ("-1", "commas"), ("0,", "commas"), ("x", "commas")):
        with pytest.raises(ValueError, match=words):
            parse_devices(bad)


def test_cuda_devices_parameter():
    assert parse_line("CUDA DEVICES = 0, 1").args == {"name": "CUDA DEVICES", "value": "0,1"}
    assert parse_line("cuda devices = all").args["value"] == "ALL"
    with pytest.raises(ConvnetError, match=r"^x.ctl:4: CUDA DEVICES: device 0 is named twice"):
        parse_line("CUDA DEVICES = 0,0", "x.ctl", 4)
    with pytest.raises(ConvnetError, match="CUDA DEVICES needs exactly one value"):
        parse_line("CUDA DEVICES =", "x.ctl", 4)


def test_resolve_devices(monkeypatch):
    monkeypatch.setattr(multi, "device_count", lambda: 2)
    assert multi.resolve_devices(None) == [0]
    assert multi.resolve_devices("ALL") == [0, 1]
    assert multi.resolve_devices("1,0") == [1, 0]
    with pytest.raises(ConvnetError, match=r"CUDA DEVICES = 0,2: there is no CUDA device 2 "
                                           r"\(this machine has 2"):
        multi.resolve_devices("0,2")
    assert multi.devices_phrase(DeviceParams()) == "CUDA device"
    assert multi.devices_phrase(DeviceParams(cuda_devices="1")) == "CUDA device 1"
    assert multi.devices_phrase(DeviceParams(cuda_devices="ALL")).startswith("CUDA devices 0, 1 ")


@pytest.mark.parametrize("n", [1, 2, 5, 255, 256, 300, 700, 1000, 10000, 60000])
@pytest.mark.parametrize("k", [1, 2, 3, 8])
def test_shard_bounds(n, k):
    bounds = multi.shard_bounds(n, k)
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a < b for a, b in bounds) and all(b == c for (_, b), (c, _) in zip(bounds, bounds[1:]))
    assert len(bounds) == min(n, k)
    sizes = [b - a for a, b in bounds]
    if all(a % CHUNK == 0 for a, _ in bounds):
        assert max(sizes) - min(sizes) < 2 * CHUNK       # on chunk boundaries, nearly equal
    else:
        assert max(sizes) - min(sizes) <= 1              # too few cases: equal shares


# ---------------------------------------------------------------------------- evaluations
@pytest.mark.slow
def test_any_device_count_agrees_with_one_device(fake_devices):
    arch, x, c, w = _problem()
    one = dbe.DeviceBackend(arch).evaluator(x, c, 0.01)
    crit1, grad1 = one.gradient(w)
    out1 = one.outputs(w)
    crit_ref, grad_ref, _, _ = simulate(ModelPlan(arch), w, x, c, 0.01)
    assert abs(crit1 - crit_ref) <= 1e-6 * crit_ref
    for spec in ("0,1", "ALL", "2,0"):
        backend = multi.device_backend(arch, DeviceParams(cuda_devices=spec))
        assert isinstance(backend, multi.MultiDeviceBackend)
        ev = backend.evaluator(x, c, 0.01)
        crit, grad = ev.gradient(w)
        assert abs(crit - crit1) <= 1e-6 * crit1 and _rel(grad, grad1) <= 1e-6
        assert abs(ev.criterion(w) - crit) <= 1e-12 * crit
        assert np.abs(ev.outputs(w) - out1).max() <= 1e-12
        backend.close()


@pytest.mark.slow
def test_same_device_count_same_bits(fake_devices):
    arch, x, c, w = _problem(n=600)
    results = []
    for _ in range(2):
        backend = multi.device_backend(arch, DeviceParams(cuda_devices="0,1"))
        ev = backend.evaluator(x, c, 0.02)
        results += [ev.gradient(w), ev.gradient(w + 0.0)]
        backend.close()
    for crit, grad in results[1:]:
        assert crit == results[0][0] and np.array_equal(grad, results[0][1])


def test_each_device_holds_its_shard_and_weights(fake_devices):
    arch, x, c, w = _problem(n=700)
    backend = multi.device_backend(arch, DeviceParams(cuda_devices="0,1,2", max_batch=128))
    ev = backend.evaluator(x, c)
    assert ev.bounds == [(0, 256), (256, 512), (512, 700)]
    for part, (a, b) in zip(ev.parts, ev.bounds):
        assert part.n_cases == b - a and part.nb <= 128 < 2 * part.nb   # MAX BATCH per device
    ev.gradient(w)
    assert [be.weight_uploads for be in backend.backends] == [1, 1, 1]
    for i, dev in fake_devices.items():
        assert "gemm_tn_" in " ".join(dev.launches), f"device {i} computed no gradient"
    backend.close()


def test_one_device_named_is_a_plain_backend(fake_devices):
    arch, x, c, w = _problem(n=50)
    backend = multi.device_backend(arch, DeviceParams(cuda_devices="2"))
    assert isinstance(backend, dbe.DeviceBackend) and backend.rt is fake_devices[2]
    # fewer cases than devices: fewer shards, still the whole sum
    many = multi.device_backend(arch, DeviceParams(cuda_devices="ALL"))
    ev = many.evaluator(x[:2], c[:2])
    assert ev.bounds == [(0, 1), (1, 2)]
    ref = dbe.DeviceBackend(arch).evaluator(x[:2], c[:2]).gradient(w)
    crit, grad = ev.gradient(w)
    assert abs(crit - ref[0]) <= 1e-12 * ref[0] and _rel(grad, ref[1]) <= 1e-6
    many.close()


def test_errors_of_a_device_reach_the_caller(fake_devices):
    arch, x, c, w = _problem(n=300)
    backend = multi.device_backend(arch, DeviceParams(cuda_devices="0,1"))
    with pytest.raises(ConvnetError, match="no classes|classes of the cases"):
        backend.evaluator(x, None).gradient(w)
    with pytest.raises(ConvnetError, match="weights"):
        backend.evaluator(x, c).gradient(w[:-1])
    backend.close()


@pytest.mark.slow
def test_cuda_log_has_a_section_per_device(fake_devices, tmp_path):
    from convnet.device.cuda_log import write_cuda_log
    arch, x, c, w = _problem(n=600)
    backend = multi.device_backend(arch, DeviceParams(cuda_devices="1,0", max_batch=256))
    ev = backend.evaluator(x, c)
    ev.gradient(w)
    ev.criterion(w * 0.5)
    text = open(write_cuda_log(str(tmp_path / "CUDA.LOG"), backend, arch,
                               Params.from_phrases({"CUDA DEVICES": "1,0"}))).read()
    assert "1. Devices and capabilities" in text
    head = text[text.index("1. Devices"):text.index("Each evaluation")].splitlines()[2:]
    assert head == ["Device 1: emulated", "   details", "Device 0: emulated", "   details",
                    "Device 2: emulated (not used)", "Device 3: emulated (not used)"]
    assert "device 1 cases 1 to 256, device 0 cases 257 to 600" in text
    assert "3. Device 1 (cases 1 to 256): memory allocations" in text
    assert "4. Device 0 (cases 257 to 600): memory allocations" in text
    assert text.count("Evaluations timed: 2") == 2
    assert text.count("Batch size 256 cases, 1 batch(es)") == 1      # device 1: one batch of 256
    assert "Batch size 256 cases, 2 batch(es)" in text              # device 0: 344 cases
    assert "CUDA DEVICES = 1,0" in text
    backend.close()


def test_session_on_two_emulated_devices(fake_devices, monkeypatch, tmp_path):
    """A control file's CUDA DEVICES and the command line's --gpus reach the backend and logs."""
    import convnet.devices
    from convnet.session import run
    monkeypatch.setattr(convnet.devices, "cuda_status", lambda: (True, "3 CUDA devices"))
    ctl = tmp_path / "two.ctl"
    ctl.write_text("MAKE IMAGE 6 6 1 2 300\nFULLY CONNECTED LAYER 3\nCUDA DEVICES = 0,1\n"
                   "ANNEAL ITERS = 3\nMAXITERS = 2\nTRAIN\n")
    session = run([str(ctl)], out=str(tmp_path / "a"), device="cuda", seed=4)
    assert isinstance(session.model.backend, multi.MultiDeviceBackend)
    log = (tmp_path / "a" / "CONVNET.LOG").read_text()
    assert "Computing on the CUDA devices 0, 1 (the cases split between them)" in log
    cuda_log = (tmp_path / "a" / "CUDA.LOG").read_text()
    assert "3. Device 0 (cases 1 to 256)" in cuda_log and "4. Device 1 (cases 257 to 300)" in cuda_log
    session = run([str(ctl)], out=str(tmp_path / "b"), device="cuda", seed=4, gpus="2")
    assert session.model.backend.rt is fake_devices[2]
    assert "Computing on the CUDA device 2" in (tmp_path / "b" / "CONVNET.LOG").read_text()
    # a device that is not there: the TRAIN line's error
    ctl.write_text(ctl.read_text().replace("0,1", "0,7"))
    with pytest.raises(ConvnetError, match=r"two.ctl:6: CUDA DEVICES = 0,7: there is no CUDA "
                                           r"device 7"):
        run([str(ctl)], out=str(tmp_path / "c"), device="cuda", seed=4)


def test_minibatch_descent_over_several_devices_steps_on_the_first(fake_devices):
    """SGD with CUDA DEVICES = 0,1: the steps run on the first device over every case (a
    batch is too small to split), so an epoch gives the bits of one device's epoch."""
    from convnet.minibatch import SGD, UpdateRule, batch_layout, learning_rates
    arch, x, c, w = _problem(n=300)
    rule = UpdateRule(SGD, momentum=0.9, nesterov=True)
    rates = learning_rates(0.1, "CONSTANT", 1, batch_layout(300, 32)[1])
    one = dbe.DeviceBackend(arch, DeviceParams()).evaluator(x, c, 0.01)
    backend = multi.device_backend(arch, DeviceParams(cuda_devices="1,0"))
    many = backend.evaluator(x, c, 0.01)
    ends = []
    for ev in (one, many):
        runner = ev.minibatches(rule, 32, rates, w)
        runner.start_epoch(np.arange(300)[::-1])
        while runner.steps_left:
            runner.step()
        likelihood, w_end = runner.end_epoch()
        ends.append((likelihood, runner.penalty(), w_end))
    assert ends[0][0] == ends[1][0] and ends[0][1] == ends[1][1]
    assert np.array_equal(ends[0][2], ends[1][2]) and not np.array_equal(ends[0][2], w)
    assert backend.minibatch_device == 1
    # the full-batch evaluations stay split across both devices
    crit, grad = many.gradient(ends[1][2])
    crit1, grad1 = one.gradient(ends[0][2])
    assert abs(crit - crit1) <= 1e-6 * crit1 and _rel(grad, grad1) <= 1e-6
    backend.close()


def test_session_sgd_with_validation_on_two_emulated_devices(fake_devices, monkeypatch, tmp_path):
    """TRAIN METHOD = SGD with held-out cases and CUDA DEVICES = 0,1: the epochs on device 0,
    the validation checks and the final pass split across both; CUDA.LOG says so."""
    import json
    import convnet.devices
    from convnet.session import run
    monkeypatch.setattr(convnet.devices, "cuda_status", lambda: (True, "3 CUDA devices"))
    ctl = tmp_path / "sgd.ctl"
    ctl.write_text("MAKE IMAGE 6 6 1 2 300\nFULLY CONNECTED LAYER 3\nCUDA DEVICES = 0,1\n"
                   "VALIDATION CASES 251 300\nTRAIN METHOD = SGD\nANNEAL ITERS = 0\n"
                   "BATCH SIZE = 50\nEPOCHS = 3\nKEEP BEST = YES\nTRAIN\n")
    run([str(ctl)], out=str(tmp_path / "a"), device="cuda", seed=4)
    train = json.loads((tmp_path / "a" / "results.json").read_text())["runs"][0]
    assert train["status"] == "done" and train["phases"][-1]["steps"] == 3
    assert [c["step"] for c in train["validation"] if c["phase"] == "sgd"] == [1, 2, 3]
    cuda_log = (tmp_path / "a" / "CUDA.LOG").read_text()
    assert "Mini-batch descent: every case on device 0, the steps there alone" in cuda_log
