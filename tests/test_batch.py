"""`convnet batch`: sessions in parallel, summary.csv; one failure does not stop the rest."""

import csv
import os
import re

import pytest
from click.testing import CliRunner

from convnet.batch import COLUMNS, _error_from, output_folders
from convnet.cli import main
from convnet.errors import ConvnetError

CONV = """\
MAKE IMAGE 6 6 1 2 40
CONVOLUTIONAL LAYER 2 1 1 1 1 1 1
ANNEAL ITERS = 5
MAXITERS = 5
TRAIN
"""

FC_WITH_TEST = """\
MAKE IMAGE 6 6 1 3 40
FULLY CONNECTED LAYER 3
ANNEAL ITERS = 5
MAXITERS = 5
TRAIN
CLEAR
MAKE IMAGE 6 6 1 3 30
TEST
"""

# the filter (19 high) does not fit the 6-row image: an error naming line 2
BROKEN = """\
MAKE IMAGE 6 6 1 2 40
CONVOLUTIONAL LAYER 2 9 9 0 0 1 1
TRAIN
"""


@pytest.mark.slow
def test_batch_two_results_and_one_clear_failure(tmp_path):
    files = []
    for name, text in (("conv.ctl", CONV), ("broken.ctl", BROKEN), ("fc.ctl", FC_WITH_TEST)):
        path = tmp_path / name
        path.write_text(text)
        files.append(str(path))
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["batch", *files, "--out", str(out), "--jobs", "2",
                                       "--device", "cpu", "--seed", "5"])
    assert result.exit_code == 2, result.output
    with open(out / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0].keys()) == COLUMNS
    assert [r["file"] for r in rows] == files                 # the order of the command line
    conv, broken, fc = rows
    # conv: 2 slices of (9 + 1) weights, output 2 x (6 * 6 * 2 + 1)
    assert conv["status"] == "ok" and conv["weights"] == str(2 * 10 + 2 * 73)
    # fc: 3 x (36 + 1), output 3 x (3 + 1)
    assert fc["status"] == "ok" and fc["weights"] == str(3 * 37 + 3 * 4)
    for row in (conv, fc):
        assert row["device"] == "cpu"
        anneal, final = float(row["annealing_criterion"]), float(row["final_criterion"])
        assert 0 < final <= anneal + 1e-5                    # refinement never goes up
        assert 0 <= float(row["train_misclassification"]) <= 100
        assert float(row["seconds"]) > 0
    assert conv["test_misclassification"] == ""               # no TEST in that file
    assert 0 <= float(fc["test_misclassification"]) <= 100
    assert broken["status"].startswith(f"error: {files[1]}:2: ")
    assert "larger than the height of the input image" in broken["status"]
    assert broken["final_criterion"] == "" and broken["weights"] == ""
    # every session has its own folder, log and curve
    for stem in ("conv", "fc"):
        assert (out / stem / "CONVNET.LOG").exists() and (out / stem / "criterion.png").exists()
    assert "ERROR:" in (out / "broken" / "CONVNET.LOG").read_text()
    # a line as each file starts and ends (not a terminal: no status line), then the table: a
    # header and one line per file, then the count
    lines = result.output.splitlines()
    for path in files:
        assert sum(re.fullmatch(rf"\[\d+:\d\d\] started {re.escape(path)}", line) is not None
                   for line in lines) == 1
        assert sum(re.fullmatch(rf"\[\d+:\d\d\] ended {re.escape(path)} in [0-9.]+ s: "
                                rf"(ok|error: .*)", line) is not None for line in lines) == 1
    assert not any("running" in line and "waiting" in line for line in lines)
    head = [i for i, line in enumerate(lines) if line.split()[:2] == ["file", "weights"]]
    assert head == [len(files) * 2]
    table = lines[head[0]:]
    assert table[2].startswith(files[1]) and "error:" in table[2]
    assert lines[-1].startswith("convnet: 2 of 3 files ran without error")


def test_batch_all_ok_exits_zero_and_missing_files_are_rows(tmp_path):
    good = tmp_path / "pictures.ctl"
    good.write_text('MAKE IMAGE 6 6 1 2 10\nDISPLAY TRAINING IMAGES 1 2 2 "t.png"\n')
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["batch", str(good), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "pictures" / "t.png").exists()
    again = CliRunner().invoke(main, ["batch", str(good), "--out", str(out)])
    assert again.exit_code == 0 and "(1 reused from an earlier start)" in again.output
    other = CliRunner().invoke(main, ["batch", str(good), str(tmp_path / "none.ctl"),
                                      "--out", str(out)])
    assert other.exit_code == 2 and "another batch" in other.output   # never replaced unasked
    result = CliRunner().invoke(main, ["batch", str(good), str(tmp_path / "none.ctl"),
                                       "--out", str(out), "--overwrite"])
    assert result.exit_code == 2
    with open(out / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["status"] == "ok"
    assert rows[1]["status"] == f"error: {tmp_path / 'none.ctl'}: no such control file"


def test_output_folders_and_error_lines():
    assert output_folders(["a/x.ctl", "b/x.ctl", "y.ctl", "c/x.txt"], "o") == [
        "o/x", "o/x-2", "o/y", "o/x-3"]
    stderr = "some warning\nconvnet: error: f.ctl:3: bad thing\n"
    assert _error_from(stderr, 2) == "f.ctl:3: bad thing"
    assert _error_from("Traceback ...\nValueError: boom\n", 1) == "exit status 1: ValueError: boom"
    assert _error_from("", -9) == "exit status -9"


def test_gpu_share_round_robin_and_least_busy():
    from convnet.batch import GpuShare
    share = GpuShare([0, 1, 2])
    assert [share.take() for _ in range(3)] == [0, 1, 2]
    assert share.take() == 0                      # all busy once: round robin goes on
    share.give_back(1)
    assert share.take() == 1                      # the only GPU with nothing running
    share.give_back(0)
    share.give_back(0)
    assert [share.take() for _ in range(3)] == [0, 1, 2]


@pytest.mark.slow
def test_batch_gpus_option(tmp_path, monkeypatch):
    """--gpus gives each session one GPU (a CPU session takes it and ignores it), --jobs defaults
    to the number of GPUs; a GPU that is not there is one clear error."""
    import convnet.batch as batch
    from convnet.device import multi
    ctl = tmp_path / "conv.ctl"
    ctl.write_text(CONV)
    monkeypatch.setattr(multi, "device_count", lambda: 2)
    started = []
    real = batch._environment

    locks = []

    def spy(gpu=None, on_gpu=False, start_lock=None):
        env = real(gpu, on_gpu, start_lock)
        started.append(env["CUDA_VISIBLE_DEVICES"])     # the session sees its GPU alone
        locks.append(env["CONVNET_CUDA_START_LOCK"])    # and takes turns to start CUDA
        assert os.path.isfile(locks[-1])
        return env
    monkeypatch.setattr(batch, "_environment", spy)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    jobs = []
    real_pool = batch.ThreadPoolExecutor
    monkeypatch.setattr(batch, "ThreadPoolExecutor",
                        lambda max_workers: jobs.append(max_workers) or real_pool(max_workers))
    rows = batch.run_batch([str(ctl), str(ctl), str(ctl)], str(tmp_path / "out"), device="cpu",
                           seed=2, gpus="all")
    assert [r.status for r in rows] == ["ok"] * 3 and jobs == [2]
    assert sorted(started[:2]) == ["0", "1"] and started[2] in ("0", "1")   # the free one
    assert len(set(locks)) == 1 and not os.path.exists(locks[0])   # one file, gone afterwards
    result = CliRunner().invoke(main, ["batch", str(ctl), "--out", str(tmp_path / "o2"),
                                       "--gpus", "0,5"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "convnet: error: --gpus 0,5: CUDA DEVICES = 0,5: there is no CUDA device 5 "
        "(this machine has 2, numbered from 0)")
    result = CliRunner().invoke(main, ["batch", str(ctl), "--out", str(tmp_path / "o3"),
                                       "--gpus", "0,0"])
    assert result.exit_code == 2 and "named twice" in result.output


def test_batch_gpus_without_cuda_is_one_error(tmp_path, monkeypatch):
    import convnet.devices
    monkeypatch.setattr(convnet.devices, "cuda_status", lambda: (False, "no CUDA device found"))
    ctl = tmp_path / "conv.ctl"
    ctl.write_text(CONV)
    result = CliRunner().invoke(main, ["batch", str(ctl), "--out", str(tmp_path / "o"),
                                       "--gpus", "all"])
    assert result.exit_code == 2
    assert result.output.strip() == ("convnet: error: --gpus all: CUDA requested but not usable: "
                                     "no CUDA device found")
    assert not (tmp_path / "o").exists()


def test_gpus_are_counted_from_the_drivers_list_without_cuda(tmp_path, monkeypatch):
    """The batch counts GPUs from the driver's list (a folder a GPU) and CUDA_VISIBLE_DEVICES, as
    CUDA would, and starts no CUDA of its own; without the list CUDA counts them."""
    import convnet.devices as devices
    from convnet.batch import batch_gpus
    from convnet.device import multi
    listing = tmp_path / "gpus"
    for bus in ("0000:19:00.0", "0000:3b:00.0", "0000:4c:00.0"):
        (listing / bus).mkdir(parents=True)
    count = devices.listed_gpu_count
    assert count({}, listing) == 3
    assert count({"CUDA_VISIBLE_DEVICES": "2,0"}, listing) == 2
    assert count({"CUDA_VISIBLE_DEVICES": "1,7,0"}, listing) == 1     # up to the first missing
    assert count({"CUDA_VISIBLE_DEVICES": "GPU-1a2b"}, listing) is None
    assert count({}, tmp_path / "none") is None
    monkeypatch.setattr(devices, "GPU_LISTING", str(listing))
    monkeypatch.setattr(devices, "pycuda_installed", lambda: True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def no_cuda():
        raise AssertionError("the batch started CUDA")
    monkeypatch.setattr(multi, "device_count", no_cuda)
    assert batch_gpus("all") == [0, 1, 2] and batch_gpus("2,0") == [2, 0]
    with pytest.raises(ConvnetError, match="there is no CUDA device 3 .this machine has 3"):
        batch_gpus("3")
    monkeypatch.setattr(devices, "GPU_LISTING", str(tmp_path / "none"))
    monkeypatch.setattr(multi, "device_count", lambda: 2)
    assert batch_gpus("all") == [0, 1]
    monkeypatch.setattr(devices, "GPU_LISTING", str(listing))
    monkeypatch.setattr(devices, "pycuda_installed", lambda: False)    # CUDA says why not
    assert batch_gpus("all") == [0, 1]


def test_cuda_starts_take_turns_on_the_lock_a_batch_names(tmp_path):
    """devices.cuda_start_lock holds the named file's lock while CUDA starts: a second process
    waits for the first; with no name, or a name that cannot be opened, nothing is held."""
    import subprocess
    import sys
    import time
    from convnet.devices import START_LOCK_VARIABLE, cuda_start_lock
    lock = tmp_path / "start.lock"
    lock.write_bytes(b"")                   # made by the batch
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom convnet.devices import cuda_start_lock\n"
         "with cuda_start_lock():\n    print('held', flush=True)\n    time.sleep(1.0)\n"],
        env={**os.environ, START_LOCK_VARIABLE: str(lock)}, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    t0 = time.perf_counter()
    with cuda_start_lock({START_LOCK_VARIABLE: str(lock)}):
        waited = time.perf_counter() - t0
    holder.wait()
    assert waited > 0.5                     # until the other process let go
    t0 = time.perf_counter()
    with cuda_start_lock({}):
        pass
    with cuda_start_lock({START_LOCK_VARIABLE: str(tmp_path / "no" / "such.lock")}):
        pass
    assert time.perf_counter() - t0 < 0.5
    assert not (tmp_path / "no").exists()


def test_a_batch_names_a_start_lock_only_for_sessions_side_by_side():
    from convnet.batch import _start_lock
    with _start_lock(False) as none:
        assert none is None
    with _start_lock(True) as path:
        assert os.path.isfile(path)
    assert not os.path.exists(path)


def test_a_session_given_a_gpu_sees_it_alone_and_logs_name_it():
    """A batch session's environment shows it its GPU alone (CUDA_VISIBLE_DEVICES, mapped through
    the batch's own), and logs name that device by its number on the machine."""
    from convnet.devices import device_label, session_environment, visible_devices
    assert session_environment(1, {})["CUDA_VISIBLE_DEVICES"] == "1"
    assert session_environment(1, {"CUDA_VISIBLE_DEVICES": "4,6"})["CUDA_VISIBLE_DEVICES"] == "6"
    assert session_environment(0, {"PATH": "/bin"})["PATH"] == "/bin"
    # a session computing on its GPU: one host BLAS thread unless the environment says otherwise
    env = session_environment(0, {"OMP_NUM_THREADS": "4"})
    assert env["OPENBLAS_NUM_THREADS"] == "1" and env["OMP_NUM_THREADS"] == "4"
    assert "OPENBLAS_NUM_THREADS" not in session_environment(0, {}, on_gpu=False)
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "GPU-1a2b"}) is None
    assert visible_devices({"CUDA_VISIBLE_DEVICES": " 3, 1 "}) == [3, 1]
    assert device_label(0, {}) == "0"
    assert device_label(0, {"CUDA_VISIBLE_DEVICES": "0,1"}) == "0"
    assert device_label(0, {"CUDA_VISIBLE_DEVICES": "1"}) == "1 (CUDA_VISIBLE_DEVICES=1)"
    assert device_label(1, {"CUDA_VISIBLE_DEVICES": "3,2"}) == "2 (CUDA_VISIBLE_DEVICES=3,2)"
