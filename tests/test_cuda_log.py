"""CUDA.LOG keeps every device TRAIN and TEST of a session: appended parts, each headed by the
command and its control-file line, each with the four sections and a timing table that names every
activity of the book's table. Run against the emulated device here, and on a GPU where there is one."""

import re

import pytest

from convnet.device import device_available
from convnet.device import runtime
from convnet.device.cuda_log import BOOK_ACTIVITIES
from convnet.session import run

from test_device_emulated import FakeRuntime

CONTROL = """MAKE IMAGE 8 8 1 3 120
CONVOLUTIONAL LAYER 4 1 1 1 1 1 1
POOLED MAX LAYER 2 2 2 2
FULLY CONNECTED LAYER 5
ANNEAL ITERS = 4
MAXITERS = 3
CUDA = YES
TRAIN
FULLY CONNECTED LAYER 3
MAX BATCH = 50
TRAIN
TEST
"""

SECTIONS = ("1. Device and capabilities", "2. Architecture and training parameters",
            "3. Device memory allocations", "4. Device time by layer and activity")


def _parts(text):
    """(heading, body) of each part, split at the ruled headings."""
    pieces = re.split(r"^=+\n(.+)\n=+\n", text, flags=re.M)
    return list(zip(pieces[1::2], pieces[2::2]))


def check_session_cuda_log(tmp_path):
    ctl = tmp_path / "two.ctl"
    ctl.write_text(CONTROL)
    out = tmp_path / "out"
    run([str(ctl)], out=str(out), seed=4)
    text = (out / "CUDA.LOG").read_text()
    assert text.startswith("CUDA.LOG, convnet ")
    parts = _parts(text)
    assert [h for h, _ in parts] == [f"TRAIN ({ctl}, line 8: TRAIN)",
                                     f"TRAIN ({ctl}, line 11: TRAIN)",
                                     f"TEST ({ctl}, line 12: TEST)"]
    for heading, body in parts:
        positions = [body.index(title) for title in SECTIONS]
        assert positions == sorted(positions), heading
        book = body[body.index("The book's activities:"):].splitlines()[1:len(BOOK_ACTIVITIES) + 1]
        assert [line.split(":")[0].strip() for line in book] == [b for b, _ in BOOK_ACTIVITIES]
    first, second, test = (body for _, body in parts)
    # each part shows its own architecture and parameters
    assert "Layer 3 is fully connected, with 5 slices" in first
    assert "Layer 1 is fully connected, with 3 slices" in second and "Layer 3" not in second
    assert "MAX BATCH = 50" in second and "MAX BATCH = 50" not in first
    # the steps on the tensor cores are named (the weight gradients of gather products)
    cores = re.search(r"^Tensor cores \(split TF32.*: weight gradients of (.*?)(;|$)", first, re.M)
    assert cores and "Output" in cores.group(1), first[:2000]
    # a TRAIN times gradients; the TEST only criteria and outputs, and says why the rest is absent
    assert re.search(r"^Layer 1 CONV\s+gradient\s", first, re.M)
    assert re.search(r"^Output\s+softmax\s", test, re.M)
    assert not re.search(r"^\S.*\s(gradient|delta)\s+\d", test, re.M)
    assert "   gradient: no launches here: only criteria and outputs were evaluated" in test
    assert "   delta move: no launch of its own" in test
    assert "   activation: the 'forward' rows" in test
    evaluations = [int(re.search(r"Evaluations timed: (\d+)", b).group(1)) for b in
                   (first, second, test)]
    assert evaluations[0] > 4 and evaluations[2] == 2      # TEST: the criterion and the outputs
    # the refinement's line searches formed their trial points on the device
    points = [re.search(r"Line search trial points formed on the device \(x \+ t d, no copy\): (\d+)", b)
              for b in (first, second, test)]
    assert points[0] and points[1] and int(points[0].group(1)) >= 1 and points[2] is None
    return text


@pytest.mark.slow
def test_cuda_log_keeps_two_trains_and_a_test_emulated(monkeypatch, tmp_path):
    monkeypatch.setattr(runtime.Runtime, "_instances", {0: FakeRuntime()})
    monkeypatch.setattr("convnet.devices.cuda_status", lambda: (True, "emulated device"))
    check_session_cuda_log(tmp_path)


_OK, _WHY = device_available()


@pytest.mark.cuda
@pytest.mark.skipif(not _OK, reason=f"no CUDA device: {_WHY}")
def test_cuda_log_keeps_two_trains_and_a_test_on_the_gpu(tmp_path):
    text = check_session_cuda_log(tmp_path)
    assert "Compute capability" in text


def test_product_lines_name_the_steps_on_the_tensor_cores():
    from types import SimpleNamespace

    from convnet.architecture import Architecture
    from convnet.device.cuda_log import product_lines
    from convnet.device.kernel_plan import plan_kernels
    from convnet.device.options import DeviceOptions
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 20 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
                                    "CONVOLUTIONAL LAYER 50 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
                                    "FULLY CONNECTED LAYER 500"], 28, 28, 1, 10)
    plan = plan_kernels(arch, DeviceOptions(), 227 * 1024)
    lines = product_lines(SimpleNamespace(kernels=plan))
    assert lines == ["Products of FC, LOCAL and CONV layers: float32 fused multiply-adds, except "
                     "on the tensor cores",
                     "Tensor cores (split TF32: float32 accuracy, sums in stages of 16 terms): "
                     "weight gradients of Layer 3 CONV, Layer 5 FC, Output; activations of "
                     "Layer 3 CONV, Layer 5 FC; deltas backpropagated from Layer 5 FC"]
    none = plan_kernels(arch, DeviceOptions(tensor_cores=False), 227 * 1024)
    assert product_lines(SimpleNamespace(kernels=none)) == [
        "Products of FC, LOCAL and CONV layers: float32 fused multiply-adds"]
    tf32 = plan_kernels(arch, DeviceOptions(), 227 * 1024, "TF32")
    assert product_lines(SimpleNamespace(kernels=tf32))[1] == (
        "Tensor cores (one TF32 product, CUDA PRECISION = TF32: operands rounded to 11 "
        "significant bits, sums in stages of 16 terms): weight gradients of Layer 3 CONV, "
        "Layer 5 FC, Output; activations of Layer 3 CONV, Layer 5 FC; deltas backpropagated "
        "from Layer 5 FC")
