"""What a seed reproduces: on one machine, the same CONVNET.LOG numbers whatever the thread count.

The host path cuts the cases into blocks and chunks that depend only on the data and the
architecture, and adds the per-chunk partial sums in a fixed order, so 1, 2 or 3 threads train to
the same bits. (Another machine may differ: its BLAS library can sum a product in another order.)
"""

import re

import pytest

from convnet.session import run

CONTROL = """MAKE IMAGE 10 10 1 4 150
CONVOLUTIONAL LAYER 3 1 1 1 1 1 1
POOLED MAX LAYER 2 2 2 2
FULLY CONNECTED LAYER 3
ANNEAL ITERS = 15
MAXITERS = 25
WPEN = 0.001
TRAIN
TEST
"""

# lines that hold times, or name the thread count, differ from run to run by design
_VARYING = re.compile(r"seconds|Elapsed time|Computing on| s$|ms|^Layer|^Output|^All|Threads|"
                      r"threads|^CONVNET.LOG format|^Total  |^Session|^Control file|^Timing|^-+$|^\s*$")


def _numbers(log_path):
    kept = []
    with open(log_path, encoding="utf-8") as f:
        for line in f:
            if not _VARYING.search(line.rstrip()):
                kept.append(line.rstrip())
    return kept


@pytest.mark.slow
def test_thread_count_does_not_change_a_seeded_run(tmp_path):
    ctl = tmp_path / "small.ctl"
    ctl.write_text(CONTROL)
    logs, results = [], []
    for threads in (1, 2, 3):
        out = tmp_path / f"t{threads}"
        session = run([str(ctl)], out=str(out), seed=7, threads=threads, device="cpu")
        logs.append(_numbers(out / "CONVNET.LOG"))
        train, test = session.results
        results.append(([(p.criterion, p.steps, p.trace) for p in train.phases],
                        train.final_criterion,
                        test.criterion, session.model.weights.tobytes()))
    assert any(line.startswith("Iteration 20 criterion") for line in logs[0])
    assert results[0] == results[1] == results[2]          # same bits, not merely close
    assert logs[0] == logs[1] == logs[2]
