"""A run that may compute on a GPU starts the CUDA driver in a thread beside its own start
(devices.start_cuda_early); a CPU run does not."""

import convnet.devices as devices
from convnet import cli


def _record(monkeypatch):
    started = []
    monkeypatch.setattr(devices, "start_cuda_early", lambda indices=(0,): started.append(indices))
    return started


def test_which_runs_start_cuda_early(tmp_path, monkeypatch):
    started = _record(monkeypatch)
    gpu, cpu, plain = (tmp_path / n for n in ("gpu.ctl", "cpu.ctl", "plain.ctl"))
    gpu.write_text("MAKE IMAGE 4 4 1 2 10\nCUDA = YES\nTRAIN\n")
    cpu.write_text("MAKE IMAGE 4 4 1 2 10\nCUDA = NO\nTRAIN\n")
    plain.write_text("MAKE IMAGE 4 4 1 2 10\nTRAIN\n")
    cli._start_cuda_early([str(gpu)], "auto", None, None)
    cli._start_cuda_early([str(plain)], "auto", "1,0", None)        # AUTO: a GPU where there is one
    cli._start_cuda_early([str(plain)], "cuda", "ALL", None)
    assert started == [[0], [1, 0], [0]]
    cli._start_cuda_early([str(gpu)], "cpu", None, None)             # --device cpu wins
    cli._start_cuda_early([str(plain), str(cpu)], "auto", None, None)
    cli._start_cuda_early([str(tmp_path / "missing.ctl")], "auto", None, None)
    assert len(started) == 3


def test_start_cuda_early_ends_quietly_without_a_driver():
    """Here (CI has no GPU) or on a GPU machine: the thread ends by itself, raising nothing."""
    thread = devices.start_cuda_early([0])
    thread.join(timeout=60)
    assert not thread.is_alive()
