"""Ctrl-C with a real SIGINT sent to a `convnet run` process (the original's Escape key).

First press during annealing: refinement starts from the best weights so far. First press during
refinement: it stops, the book's warning is logged, the run goes on. Second press: the run ends at
once (status 130) with CONVNET.LOG complete up to that point.
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

ROOT = Path(__file__).resolve().parents[1]

# Random labels on 600 cases: refinement has thousands of iterations of work before it could
# converge, and annealing is made endless, so only Ctrl-C ends them.
CONTROL = """\
MAKE IMAGE 8 8 1 4 600
CONVOLUTIONAL LAYER 4 1 1 1 1 1 1
FULLY CONNECTED LAYER 8
ANNEAL ITERS = 100000000
MAXITERS = 100000000
TOL = 1e-300
TRAIN
SAVE MODEL "after.cnm"
"""


def _start(tmp_path, text=CONTROL):
    ctl = tmp_path / "run.ctl"
    ctl.write_text(text)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "convnet", "run", str(ctl), "--out", str(out),
                             "--seed", "3", "--threads", "1", "--quiet"],
                            cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return proc, out / "CONVNET.LOG"


def _wait_for(proc, log, pattern, timeout=180.0):
    """Poll the log until a line matches (the log is flushed line by line)."""
    deadline = time.monotonic() + timeout
    rx = re.compile(pattern, re.M)
    while time.monotonic() < deadline:
        if log.exists() and rx.search(log.read_text()):
            return
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the run ended (status {proc.returncode}) before '{pattern}':\n{err}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"no '{pattern}' in the log after {timeout} s")


def _finish(proc, timeout=120.0):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the run did not end after Ctrl-C")
    return proc.returncode, out, err


@pytest.mark.slow
def test_first_presses_move_through_the_phases(tmp_path):
    proc, log = _start(tmp_path)
    _wait_for(proc, log, r"^Annealing evaluations 21-30: ")
    proc.send_signal(signal.SIGINT)
    _wait_for(proc, log, r"^Iteration 5 criterion = ")
    proc.send_signal(signal.SIGINT)
    status, _, err = _finish(proc)
    assert status == 0, err
    text = log.read_text()
    assert re.search(r"^Annealing ended by the user \(Ctrl-C\) after \d+ of 100000000 evaluations",
                     text, re.M)
    anneal = float(re.search(r"^Simulated annealing for starting weights is complete with mean "
                             r"negative log likelihood = (\S+)", text, re.M).group(1))
    lines = text.splitlines()
    i = lines.index("WARNING... User pressed ESCape during optimization")
    assert lines[i + 1] == "Results are incomplete and may be seriously incorrect"
    final = float(re.search(r"^Optimization is complete with negative log likelihood = (\S+)", text,
                            re.M).group(1))
    assert final <= anneal
    assert re.search(r"^Total misclassification = \d+\.\d{4} percent$", text, re.M)
    # the run went on to the next command
    assert (tmp_path / "out" / "after.cnm").exists()


@pytest.mark.slow
def test_second_press_ends_the_run_with_the_log_complete(tmp_path):
    # Whether the second press lands in what is left of TRAIN or in the TESTs after it (where any
    # press ends the run), the run must end at once; the TESTs give it time to arrive before SAVE.
    text = CONTROL.replace("ANNEAL ITERS = 100000000", "ANNEAL ITERS = 20")
    text = text.replace("TRAIN\n", "TRAIN\n" + "TEST\n" * 200)
    proc, log = _start(tmp_path, text)
    _wait_for(proc, log, r"^Iteration 3 criterion = ")
    proc.send_signal(signal.SIGINT)
    time.sleep(0.1)           # let the first press be counted before the second arrives
    proc.send_signal(signal.SIGINT)
    status, _, err = _finish(proc)
    assert status == 130
    assert "Ctrl-C" in err and "Traceback" not in err
    text = log.read_text()
    assert text.endswith("\n")
    assert "Iteration 3 criterion = " in text
    assert "Run ended by the user" in text.splitlines()[-1]
    assert not (tmp_path / "out" / "after.cnm").exists()
    # no half-written model or temporary file anywhere
    assert not [p for p in (tmp_path / "out").iterdir() if p.suffix in (".cnm", ".tmp")]
