"""Sizes that cannot fit: refused by `check` and `run` at their line with the size needed and the
size available; any allocation failure during a run becomes the same one-line error."""

import numpy as np
import pytest
from click.testing import CliRunner

from convnet import memory
from convnet.architecture import Architecture
from convnet.cli import main
from convnet.errors import ConvnetError
from convnet.session import Session

SP500 = "data/sp500-daily-1927-2020.csv"


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _check_refuses(tmp_path, text, line, *words):
    path = tmp_path / "big.ctl"
    path.write_text(text)
    for command in (("check",), ("run", "--out", tmp_path / "out", "--quiet", "--overwrite")):
        result = invoke(*command, path)
        assert result.exit_code == 2, result.output
        assert not isinstance(result.exception, (MemoryError, ValueError)) or \
            isinstance(result.exception, SystemExit)
        error = [l for l in result.output.splitlines() if l.startswith("convnet: error:")]
        assert len(error) == 1, result.output
        assert error[0].startswith(f"convnet: error: {path}:{line}: not enough host memory"), error
        assert "needed" in error[0] and "available" in error[0]
        for w in words:
            assert w in error[0]


# sizes within the control language's ranges (MAX_COUNT cases, MAX_SIDE bands) that no machine holds
@pytest.mark.parametrize("make, words", [
    ("MAKE IMAGE 16 16 3 5 2147483647", ("2147483647 images", "TiB needed")),
    ("MAKE IMAGE 12 12 65535 6 2147483647", ("65535 bands", "PiB needed")),
])
def test_make_image_too_big(tmp_path, make, words):
    _check_refuses(tmp_path, f"{make}\nFULLY CONNECTED LAYER 3\nTRAIN\n", 1, *words)


@pytest.mark.parametrize("resolution", ["65535", "32768"])
def test_series_resolution_too_big(tmp_path, monkeypatch, resolution):
    monkeypatch.setattr(memory, "host_available", lambda: 4 << 30)    # 23,263 images: 97-195 GB
    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    text = (f"SERIES HEADER\nSERIES COLUMN = 5\nSERIES RESOLUTION = {resolution}\n"
            f"READ SERIES \"{root / SP500}\"\n")
    _check_refuses(tmp_path, text, 4, f"{resolution} rows (SERIES RESOLUTION)")


def test_fully_connected_layer_too_big(tmp_path):
    # 65535 neurons of 2000 x 2000 inputs: 262 * 10**9 weights
    _check_refuses(tmp_path, "MAKE IMAGE 2000 2000 1 6 10\nFULLY CONNECTED LAYER 65535\nTRAIN\n", 3,
                   "line 2: FULLY CONNECTED LAYER 65535", "TiB needed")


def test_require_names_need_and_availability():
    memory.require(10, "ten bytes", available=10)
    with pytest.raises(ConvnetError) as e:
        memory.require(3 << 30, "three gibibytes", available=1 << 30)
    assert str(e.value) == ("not enough host memory for three gibibytes: 3.00 GiB needed, "
                            "1.00 GiB available")
    with pytest.raises(ConvnetError, match="not enough CUDA device memory"):
        memory.require(2 << 20, "a batch", available=1 << 20, where="device")
    memory.require(1 << 60, "unknown device", available=None, where="device")   # cannot tell: pass


def test_host_available_is_positive_and_bounded_by_rlimit(monkeypatch):
    have = memory.host_available()
    assert have is not None and have > 0
    monkeypatch.setattr(memory, "_rlimit_available", lambda: 12345)
    assert memory.host_available() == 12345


def test_format_bytes():
    assert memory.format_bytes(1) == "1 byte"
    assert memory.format_bytes(1023) == "1023 bytes"
    assert memory.format_bytes(1536) == "1.50 KiB"
    assert memory.format_bytes(1.28 * 2 ** 40) == "1.28 TiB"


def test_device_need_arithmetic():
    """The device count is the kernel plan's (the one CUDA.LOG prints), worked by hand for a small
    net (no GPU needed)."""
    from convnet.device.kernel_plan import plan_kernels
    from convnet.params import DeviceParams
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 2 1 1 1 1 1 1", "POOLED MAX LAYER 2 2 2 2"],
                                   rows=4, cols=4, bands=1, n_classes=3)
    # conv: 2 x 4 x 4 = 32 neurons, 2 x 10 = 20 weights; pool: 2 x 2 x 2 = 8 neurons;
    # output: 3 x (8 + 1) = 27 weights; 47 weights in all
    assert arch.n_weights == 47
    n, nw = 1000, 47
    data = 4 * n * 16 + 4 * n + 8 * n * 3 + 8 * n + 40 + 16 * nw
    # layouts: conv 10 rows x 32 columns, output 9 x 32; backward 9 x 2 and 8 x 3
    n_fwd, n_bwd = 320 + 288, 18 + 24
    # descriptors: 16 conv groups, one output group each way; tables: 16 windows of 10 and the
    # 10 B rows, the output's 9 + 9 forward and 3 + 3 backward offsets
    index = 4 * (5 * 16 + 5 + 5) + 4 * (16 * 10 + 10 + 2 * 9 + 2 * 3)
    static = index + 12 * nw + 4 * n_fwd + nw + 16 * nw + 8 * 1 + 4 * n_fwd + 4 * n_bwd
    assert static == 7539

    def batch_bytes(nb):
        plan = plan_kernels(arch).batch_plan(n, nb, DeviceParams())
        return sum(size for _, size in plan.buffers)

    per_case = 4 * (32 + 8 + 8 + 3) + 8 * 32       # activations, winners, two deltas
    assert batch_bytes(256) >= 256 * per_case
    assert memory.device_training_bytes(arch, n) == data + static + batch_bytes(256)
    assert memory.device_training_bytes(arch, n, max_batch=10) == data + static + batch_bytes(10)
    assert memory.device_training_bytes(arch, 7) == (4 * 7 * 16 + 4 * 7 + 8 * 7 * 3 + 8 * 7 + 40
                                                     + 16 * nw + static + batch_bytes(7))


def test_device_memory_is_checked_when_cuda_is_used(tmp_path, monkeypatch):
    import convnet.devices
    monkeypatch.setattr(convnet.devices, "cuda_status", lambda: (True, "1 CUDA device"))
    monkeypatch.setattr(memory, "device_available", lambda device=0: 1 << 20)
    path = tmp_path / "dev.ctl"
    path.write_text("CUDA = YES\nMAKE IMAGE 28 28 1 10 60000\nFULLY CONNECTED LAYER 100\nTRAIN\n")
    result = invoke("check", path)
    assert result.exit_code == 2
    assert f"{path}:4: not enough CUDA device memory for 60000 cases" in result.output
    assert "1.00 MiB available" in result.output
    # the host path is not limited by the device
    path.write_text("CUDA = NO\nMAKE IMAGE 28 28 1 10 60000\nFULLY CONNECTED LAYER 100\nTRAIN\n")
    assert invoke("check", path).exit_code == 0


@pytest.mark.parametrize("error", [MemoryError(), ValueError("Maximum allowed size exceeded"),
                                   type("MemoryError", (Exception,), {})("cuMemAlloc failed")])
def test_run_turns_an_allocation_failure_into_the_clear_error(tmp_path, monkeypatch, error):
    def fail(self, cmd):
        raise error
    monkeypatch.setitem(Session.HANDLERS, "MAKE IMAGE", fail)
    path = tmp_path / "a.ctl"
    path.write_text("// data\nMAKE IMAGE 8 8 1 2 10\n")
    result = invoke("run", "--out", tmp_path / "out", "--quiet", path)
    assert result.exit_code == 2, result.output
    assert f"convnet: error: {path}:2: not enough memory for MAKE IMAGE" in result.output
    assert "available" in result.output
    log = (tmp_path / "out" / "CONVNET.LOG").read_text()
    assert "ERROR:" in log and "not enough memory" in log


def test_a_program_error_is_not_disguised(tmp_path, monkeypatch):
    def fail(self, cmd):
        raise KeyError("bug")
    monkeypatch.setitem(Session.HANDLERS, "MAKE IMAGE", fail)
    path = tmp_path / "a.ctl"
    path.write_text("MAKE IMAGE 8 8 1 2 10\n")
    result = invoke("check", path)
    assert isinstance(result.exception, KeyError)


@pytest.mark.parametrize("grid", ["1000 1000", "500 1000"])
def test_display_grid_too_big(tmp_path, monkeypatch, grid):
    monkeypatch.setattr(memory, "host_available", lambda: 16 << 20)   # the picture: 160-330 MB
    _check_refuses(tmp_path, f'MAKE IMAGE 8 8 1 2 20\nDISPLAY TRAINING IMAGES 1 {grid} "x.png"\n', 2,
                   "a picture of", "pixels)")


def test_display_filter_and_activation_grids_too_big(tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "host_available", lambda: 16 << 20)
    text = ('MAKE IMAGE 8 8 1 2 20\nCONVOLUTIONAL LAYER 2 1 1 1 1 1 1\nANNEAL ITERS = 1\n'
            'MAXITERS = 1\nTRAIN\nDISPLAY FILTER IMAGES 1 1000 1000 "f.png"\n')
    _check_refuses(tmp_path, text, 6, "a picture of 1000 x 1000 images")
    text = text.replace("DISPLAY FILTER IMAGES 1 1000 1000", "DISPLAY ACTIVATION IMAGES 1 "
                        "1000 1000 1")
    _check_refuses(tmp_path, text, 6, "a picture of 1000 x 1000 images")


def test_a_gzip_file_that_expands_beyond_memory_is_refused(tmp_path, monkeypatch):
    import gzip
    bomb = tmp_path / "bomb-idx3-ubyte.gz"
    bomb.write_bytes(gzip.compress(b"\0\0\x08\x03" + b"\0" * (48 << 20), compresslevel=9))
    assert bomb.stat().st_size < 1 << 20
    monkeypatch.setattr(memory, "host_available", lambda: 16 << 20)
    path = tmp_path / "bomb.ctl"
    path.write_text(f'READ MNIST IMAGE "{bomb}"\n')
    result = invoke("check", path)
    assert result.exit_code == 2, result.output
    assert f"{path}:1: not enough host memory for MNIST image file '{bomb}' decompressed" \
        in result.output
    assert "16.00 MiB available" in result.output


@pytest.mark.parametrize("tail, ok", [(b"", True), (b"\0" * 10, True), (b"junk", False)])
def test_gunzip_in_pieces_reads_what_gzip_reads(tail, ok):
    import gzip
    from convnet.data._files import gunzip_if_gzip
    payload = bytes(range(256)) * 1000
    data = gzip.compress(payload[:100_000]) + gzip.compress(payload[100_000:]) + tail
    if ok:
        assert gunzip_if_gzip(data, "f", "file") == payload
    else:
        with pytest.raises(ConvnetError, match="cannot be decompressed"):
            gunzip_if_gzip(data, "f", "file")
    with pytest.raises(ConvnetError, match="corrupt or truncated"):
        gunzip_if_gzip(gzip.compress(payload)[:-100], "f", "file")


def test_a_model_file_larger_than_memory_is_refused(tmp_path, monkeypatch):
    model = tmp_path / "big.cnm"
    model.write_bytes(b"CONVNETM" + b"\0" * (3 << 20))
    monkeypatch.setattr(memory, "host_available", lambda: 1 << 20)
    path = tmp_path / "load.ctl"
    path.write_text(f'LOAD MODEL "{model}"\n')
    result = invoke("check", path)
    assert result.exit_code == 2
    assert f"{path}:1: not enough host memory for the model file '{model}'" in result.output


@pytest.mark.parametrize("command", ["READ MNIST IMAGE", "READ C10 IMAGE", "READ SERIES"])
def test_a_data_file_that_never_ends_is_refused(tmp_path, monkeypatch, command):
    import os
    if not os.path.exists("/dev/zero"):
        pytest.skip("needs /dev/zero")
    monkeypatch.setattr(memory, "host_available", lambda: 200 << 20)
    path = tmp_path / "zero.ctl"
    path.write_text(f'{command} "/dev/zero"\n')
    result = invoke("check", path)
    assert result.exit_code == 2
    assert f"{path}:1: not enough host memory for " in result.output
    assert "'/dev/zero' (at least" in result.output
