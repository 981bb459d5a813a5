"""A run's life: it owns its --out folder (a lock naming the owner), SIGTERM ends it like a second
Ctrl-C (exit status 143, a closing line, a previous model file left whole), saved models honour
the umask, `check` checks files one by one, and the run ends with a short summary."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import convnet.modelfile as modelfile
from convnet import runlock
from convnet.cli import main
from convnet.display.progress import CompileNotice
from convnet.runlock import LOCK_NAME, RunLock

ROOT = Path(__file__).resolve().parents[1]
SMALL = ("MAKE IMAGE 8 8 1 2 20\nFULLY CONNECTED LAYER 2\nANNEAL ITERS = 2\nMAXITERS = 2\n"
         "TRAIN\nTEST\n")
ENDLESS = """\
MAKE IMAGE 8 8 1 4 300
FULLY CONNECTED LAYER 8
ANNEAL ITERS = 100000000
TRAIN
"""


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _start(ctl, out):
    return subprocess.Popen([sys.executable, "-m", "convnet", "run", str(ctl), "--out", str(out),
                             "--seed", "2", "--threads", "1", "--quiet"], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_log(proc, log, pattern, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and re.search(pattern, log.read_text(), re.M):
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended early: {proc.communicate()}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"no '{pattern}' in {log}")


# ---------------------------------------------------------------------------------- the lock
def test_second_run_into_a_busy_folder_is_refused_and_sigterm_ends_the_first(tmp_path):
    ctl = tmp_path / "endless.ctl"
    ctl.write_text(ENDLESS)
    out = tmp_path / "out"
    first = _start(ctl, out)
    try:
        _wait_for_log(first, out / "CONVNET.LOG", r"^TRAIN")
        lock = json.loads((out / LOCK_NAME).read_text())
        assert lock["pid"] == first.pid and lock["start"] == runlock.process_start_time(first.pid)
        before = (out / "CONVNET.LOG").read_text()
        (tmp_path / "small.ctl").write_text(SMALL)
        second = subprocess.run([sys.executable, "-m", "convnet", "run", str(tmp_path / "small.ctl"),
                                 "--out", str(out)], env=_env(), capture_output=True, text=True,
                                timeout=300)
        assert second.returncode == 2, second.stderr
        assert second.stderr.startswith(f"convnet: error: the output folder '{out}' is in use by "
                                        f"another run (process {first.pid} on ")
        assert len(second.stderr.strip().splitlines()) == 1
        assert (out / "CONVNET.LOG").read_text().startswith(before)     # untouched
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 143, err
    assert err.strip().splitlines()[-1] == "convnet: run ended by SIGTERM", err
    assert "Traceback" not in err, err
    log = (out / "CONVNET.LOG").read_text().splitlines()
    assert log[-1] == "Run ended by SIGTERM; the log is complete up to here"
    assert not (out / LOCK_NAME).exists()
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "interrupted"
    assert results["error"]["text"] == "run ended by SIGTERM"


def _finished_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.slow
@pytest.mark.parametrize("holder", ["dead", "reused", "own", "garbage"])
def test_a_stale_lock_is_taken_over(tmp_path, holder):
    import socket
    out = tmp_path / "out"
    out.mkdir()
    fields = {"host": socket.gethostname(), "started": "2020-01-01T00:00:00"}
    if holder == "dead":
        fields.update(pid=_finished_pid(), start=None)
    elif holder == "reused":       # a live process, but not the one that wrote the lock
        fields.update(pid=os.getppid(), start=(runlock.process_start_time(os.getppid()) or 0) + 1)
    elif holder == "own":          # this process, from a session that never closed
        fields.update(pid=os.getpid(), start=runlock.process_start_time(os.getpid()))
    lock = out / LOCK_NAME
    lock.write_text("{not json" if holder == "garbage" else json.dumps(fields))
    if holder == "garbage":
        os.utime(lock, (time.time() - 60, time.time() - 60))
    ctl = tmp_path / "a.ctl"
    ctl.write_text(SMALL)
    result = invoke("run", ctl, "--out", out, "--quiet", "--seed", "1")
    assert result.exit_code == 0, result.output
    assert not lock.exists()
    assert "Total misclassification" in (out / "CONVNET.LOG").read_text()


def test_a_live_lock_is_respected_in_process_and_released(tmp_path):
    held = RunLock.acquire(str(tmp_path))
    assert runlock.holder_is_alive(json.loads((tmp_path / LOCK_NAME).read_text()),
                                   str(tmp_path / LOCK_NAME))
    ctl = tmp_path / "a.ctl"
    ctl.write_text(SMALL)
    result = invoke("run", ctl, "--out", tmp_path, "--quiet")
    assert result.exit_code == 2 and "is in use by another run" in result.output
    held.release()
    assert not (tmp_path / LOCK_NAME).exists()
    assert invoke("run", ctl, "--out", tmp_path, "--quiet").exit_code == 0


def test_a_lock_from_another_host_is_respected(tmp_path):
    (tmp_path / LOCK_NAME).write_text(json.dumps({"host": "elsewhere.invalid", "pid": 1,
                                                   "start": 1, "started": "x"}))
    ctl = tmp_path / "a.ctl"
    ctl.write_text(SMALL)
    result = invoke("run", ctl, "--out", tmp_path, "--quiet")
    assert result.exit_code == 2
    assert f"remove {tmp_path / LOCK_NAME} if that run has ended" in result.output


@pytest.mark.slow
def test_batch_runs_each_file_in_its_own_locked_folder(tmp_path):
    a, b = tmp_path / "a.ctl", tmp_path / "b.ctl"
    a.write_text(SMALL)
    b.write_text(SMALL)
    result = invoke("batch", a, b, "--out", tmp_path / "out", "--jobs", "2", "--threads", "1",
                    "--seed", "1")
    assert result.exit_code == 0, result.output
    for stem in ("a", "b"):
        assert not (tmp_path / "out" / stem / LOCK_NAME).exists()
        assert "Total misclassification" in (tmp_path / "out" / stem / "CONVNET.LOG").read_text()


# ---------------------------------------------------------------------------------- SIGTERM, SAVE
def test_sigterm_during_save_model_leaves_the_previous_file_whole(tmp_path, monkeypatch):
    ctl = tmp_path / "save.ctl"
    ctl.write_text(SMALL + 'SAVE MODEL "m.cnm"\nANNEAL ITERS = 3\nTRAIN\nSAVE MODEL "m.cnm"\n')
    real_fsync = os.fsync
    calls = []

    def fsync_then_sigterm(fd):
        real_fsync(fd)
        calls.append(fd)
        if len(calls) == 2:                       # the second SAVE MODEL, its bytes written
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)                       # the handler runs here at the latest
    monkeypatch.setattr(modelfile.os, "fsync", fsync_then_sigterm)
    saved = []
    real_save = modelfile.save_model

    def save_and_remember(path, model, **kw):
        saved.append(model.weights.copy())
        return real_save(path, model, **kw)
    monkeypatch.setattr(modelfile, "save_model", save_and_remember)
    out = tmp_path / "out"
    result = invoke("run", ctl, "--out", out, "--quiet", "--seed", "5", "--threads", "1")
    assert result.exit_code == 143, (result.output, result.exception)
    assert len(saved) == 2 and not np.array_equal(saved[0], saved[1])
    kept = modelfile.load_model(str(out / "m.cnm"))
    assert np.array_equal(kept.weights, saved[0])
    assert sorted(p.name for p in out.iterdir()) == ["CONVNET.LOG", "criterion.png", "m.cnm",
                                                     "most_wrong", "report.html", "results.json"]
    assert json.loads((out / "results.json").read_text())["status"] == "interrupted"
    assert (out / "CONVNET.LOG").read_text().splitlines()[-1] == \
        "Run ended by SIGTERM; the log is complete up to here"


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_saved_models_honour_the_umask(tmp_path, umask, mode):
    ctl = tmp_path / "save.ctl"
    ctl.write_text(SMALL + 'SAVE MODEL "m.cnm"\n')
    old = os.umask(umask)
    try:
        result = invoke("run", ctl, "--out", tmp_path / "out", "--quiet", "--seed", "1")
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "m.cnm").stat().st_mode & 0o777 == mode
    assert (tmp_path / "out" / "CONVNET.LOG").stat().st_mode & 0o777 == mode


# ---------------------------------------------------------------------------------- check, summary
def test_check_takes_each_file_on_its_own_by_default(tmp_path):
    a, b, bad = tmp_path / "a.ctl", tmp_path / "b.ctl", tmp_path / "bad.ctl"
    a.write_text(SMALL)
    b.write_text(SMALL)                 # its MAKE IMAGE finds a's data when run as one session
    bad.write_text("MAKE IMAGE 8 8 1 2 20\nTRAIN\n")
    result = invoke("check", a, b)
    assert result.exit_code == 0, result.output
    assert f"convnet: {a}: OK" in result.output and f"convnet: {b}: OK" in result.output
    result = invoke("check", "--session", a, b)
    assert result.exit_code == 2
    assert f"convnet: error: {b}:1: MAKE IMAGE: data is already present" in result.output
    result = invoke("check", a, bad, b)
    assert result.exit_code == 2
    verdicts = [l for l in result.output.splitlines() if l.startswith("convnet:")]
    assert verdicts == [f"convnet: {a}: OK",
                        f"convnet: error: {bad}:2: TRAIN needs at least one layer line before it",
                        f"convnet: {b}: OK"]


def test_check_every_example_control_file_on_its_own():
    files = sorted((ROOT / "controlfiles").glob("*.ctl"))
    result = invoke("check", *files)
    assert result.exit_code == 0, result.output
    assert sum(l.endswith(": OK") for l in result.output.splitlines()) == len(files)


def test_a_run_ends_with_a_summary_and_quiet_keeps_to_errors(tmp_path):
    ctl = tmp_path / "a.ctl"
    elsewhere = tmp_path / "elsewhere.cnm"
    ctl.write_text(SMALL + f'SAVE MODEL "m.cnm"\nSAVE MODEL "{elsewhere}"\n')
    out = tmp_path / "out"
    result = invoke("run", ctl, "--out", out, "--seed", "1")
    assert result.exit_code == 0, result.output
    # a first run on a cold Numba cache says first that the kernels compile
    # (without a terminal the progress comes as whole lines, each naming its phase)
    lines = [line for line in result.output.strip().splitlines()
             if line != CompileNotice.MESSAGE and "  iteration " not in line]
    assert re.fullmatch(rf"TRAIN at {re.escape(str(ctl))}:5: criterion [0-9.e-]+, [0-9.]+ % "
                        r"misclassified, [0-9.]+ s", lines[0]), lines
    assert re.fullmatch(rf"TEST at {re.escape(str(ctl))}:6: criterion [0-9.e-]+, [0-9.]+ % "
                        r"misclassified, [0-9.]+ s", lines[1]), lines
    assert lines[2] == (f"Wrote in {out}: CONVNET.LOG, results.json, report.html, criterion.png, "
                        "most_wrong, m.cnm")
    assert lines[3] == f"Wrote also: {elsewhere}"
    assert lines[4] == f"Open the report in a browser: {out / 'report.html'}"
    assert len(lines) == 5
    result = invoke("run", ctl, "--out", out, "--seed", "1", "--quiet", "--overwrite")
    assert result.exit_code == 0 and result.output == ""


def test_exit_status_of_an_interruption():
    from convnet.errors import Interrupted
    assert Interrupted("x", signal.SIGTERM).exit_status == 143
    assert Interrupted("x", signal.SIGINT).exit_status == 130
