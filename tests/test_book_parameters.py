"""The book's meaning of the training parameters: ANNEAL RANGE flat by default (FANIN on request),
and every parameter in force written to CONVNET.LOG at each TRAIN and TEST."""

import math
import re
from pathlib import Path

import pytest

from convnet.control import keyword_reference, parse_line
from convnet.errors import ConvnetError
from convnet.logs.reader import read_log
from convnet.session import LOGGED_PARAMETERS, run

ROOT = Path(__file__).resolve().parents[1]
MANUAL = (ROOT / "controlfiles" / "manual_example.ctl").read_text()


def _manual_annealing_only(tmp_path, extra=""):
    """The manual's example with its annealing only (MAXITERS = 0), seed 1."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    ctl = tmp_path / "manual.ctl"
    ctl.write_text(MANUAL.replace("TRAIN", extra + "MAXITERS = 0\nTRAIN"))
    session = run([str(ctl)], out=str(tmp_path / "out"), seed=1, device="cpu")
    return session.results[0], (tmp_path / "out" / "CONVNET.LOG").read_text()


@pytest.mark.slow
def test_flat_annealing_starts_below_all_zero_weights(tmp_path):
    """With the book's flat ANNEAL RANGE the annealed start of the manual's example is better
    than all-zero weights, whose criterion is ln(classes) / classes."""
    result, log = _manual_annealing_only(tmp_path)
    zero_weights = math.log(6) / 6                     # 0.29863
    assert result.phase("annealing").criterion < zero_weights
    assert "ANNEAL RANGE = 0.1, ANNEAL SCALE = FLAT," in log


@pytest.mark.slow
def test_fanin_scaling_is_an_option(tmp_path):
    flat, _ = _manual_annealing_only(tmp_path / "flat")
    fanin, log = _manual_annealing_only(tmp_path / "fanin", "ANNEAL SCALE = FANIN\n")
    assert "ANNEAL SCALE = FANIN," in log
    assert fanin.phase("annealing").criterion != flat.phase("annealing").criterion


def test_anneal_scale_is_in_the_registry_and_checked():
    cmd = parse_line("anneal scale = fanin")
    assert cmd.args == {"name": "ANNEAL SCALE", "value": "FANIN"}
    with pytest.raises(ConvnetError, match="FLAT or FANIN"):
        parse_line("ANNEAL SCALE = WIDE", "x.ctl", 3)
    ref = keyword_reference()
    assert "| `ANNEAL SCALE = FLAT \\| FANIN` | FLAT or FANIN | FLAT (the book" in ref
    assert "compares the two) (default FLAT) |" in ref
    assert (ROOT / "docs" / "control-language.md").read_text() == ref   # the doc is generated


def test_tol_rule_is_documented_from_the_registry():
    tol = next(line for line in keyword_reference().splitlines() if line.startswith("| `TOL ="))
    for words in ("(f_before - f_after) / abs(f_before)", "restarts along the negative gradient",
                  "below TOL too", "MAXITERS"):
        assert words in tol


SESSION = """MAKE IMAGE 6 6 1 3 40
FULLY CONNECTED LAYER 3
ANNEAL ITERS = 5
MAXITERS = 4
MAX BATCH = 17
TOL = 0.001
TRAIN
WPEN = 0.01
ANNEAL SCALE = FANIN
RANDOM SEED = 12
TEST
"""


def test_every_parameter_in_force_is_logged_at_train_and_test(tmp_path):
    ctl = tmp_path / "p.ctl"
    ctl.write_text(SESSION)
    out = tmp_path / "out"
    run([str(ctl)], out=str(out), seed=3, threads=1, device="cpu")
    text = (out / "CONVNET.LOG").read_text()
    train_line = ("Training parameters: MAX BATCH = 17, MAX HID GRAD = 65535, MAX MEM GRAD = 2047, "
                  "ANNEAL ITERS = 5, ANNEAL RANGE = 0.1, ANNEAL SCALE = FLAT, MAXITERS = 4, "
                  "TOL = 0.001, WPEN = 0.0, RANDOM SEED = 3")
    test_line = ("Parameters in force: MAX BATCH = 17, MAX HID GRAD = 65535, MAX MEM GRAD = 2047, "
                 "ANNEAL ITERS = 5, ANNEAL RANGE = 0.1, ANNEAL SCALE = FANIN, MAXITERS = 4, "
                 "TOL = 0.001, WPEN = 0.01, RANDOM SEED = 12")
    lines = text.splitlines()
    assert lines[lines.index("TRAIN") + 1:].count(train_line) == 1
    after_test = lines[lines.index("TEST") + 1:]
    assert after_test[:2] == [test_line, "Computing on the host (1 threads)"]
    # the reader takes them for both runs
    log = read_log(str(out / "CONVNET.LOG"))
    train, test = log.runs
    assert list(train.params) == list(LOGGED_PARAMETERS) + ["RANDOM SEED"]
    assert train.params["MAX BATCH"] == "17" and test.params["WPEN"] == "0.01"
    assert test.params["ANNEAL SCALE"] == "FANIN" and test.params["RANDOM SEED"] == "12"
    assert (train.device, train.threads, test.device) == ("cpu", "1", "cpu")


def test_automatic_max_batch_is_named(tmp_path):
    ctl = tmp_path / "p.ctl"
    ctl.write_text(SESSION.replace("MAX BATCH = 17\n", ""))
    run([str(ctl)], out=str(tmp_path / "out"), seed=3, threads=1, device="cpu")
    text = (tmp_path / "out" / "CONVNET.LOG").read_text()
    assert len(re.findall(r"^(Training parameters|Parameters in force): MAX BATCH = automatic, ",
                          text, re.M)) == 2
