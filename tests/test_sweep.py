"""Sweeps: SWEEP lines expand to a grid of combinations x seeds; `convnet check` counts and checks
them; the statistics of each combination; a batch that resumes; --retry."""

import csv
import json
import math
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from convnet import stats
from convnet.batch import run_batch
from convnet.cli import main
from convnet.errors import ConvnetError
from convnet.resume import plan_runs
from convnet.sweep import expand, parse_control, read_sweep, sweep_of

DATA = Path(__file__).resolve().parents[1] / "data"

GRID = """\
SWEEP WPEN = 0, 0.0001, 0.001
SWEEP WIDTH = 16, 32
SWEEP SEEDS = 3
MAKE IMAGE 6 6 1 2 20
FULLY CONNECTED LAYER $width
TRAIN
"""

TINY = """\
SWEEP WPEN = 0, 0.01
SWEEP SEEDS = 2
MAKE IMAGE 6 6 1 2 30
CONVOLUTIONAL LAYER 2 1 1 1 1 1 1
ANNEAL ITERS = 2
MAXITERS = 2
TRAIN
"""


def _write(folder, name, text):
    path = folder / name
    path.write_text(text)
    return str(path)


def test_grid_times_seeds_named_by_values(tmp_path):
    path = _write(tmp_path, "grid.ctl", GRID)
    sweep = sweep_of(path)
    assert (sweep.combinations, sweep.seeds, sweep.runs) == (6, 3, 18)
    assert sweep.describe() == "6 combinations x 3 seeds = 18 runs"
    assert sweep.values(1) == {"WPEN": "0", "WIDTH": "16"}
    assert sweep.values(6) == {"WPEN": "0.001", "WIDTH": "32"}
    runs = plan_runs([path], str(tmp_path / "out"), seed=10)
    assert len(runs) == 18
    assert [r.seed for r in runs[:4]] == [10, 11, 12, 10]
    assert os.path.relpath(runs[4].folder, tmp_path / "out") == \
        os.path.join("grid", "WPEN=0_WIDTH=32_seed=11")
    assert len({r.folder for r in runs}) == 18
    assert [r.seed for r in plan_runs([path], "o")[:3]] == [1, 2, 3]     # default seeds 1..n


def test_expansion_sets_parameters_and_fills_placeholders(tmp_path):
    path = _write(tmp_path, "grid.ctl", GRID)
    lines = expand(sweep_of(path), 4)                  # WPEN 0.0001, WIDTH 32
    assert lines[0] == "WPEN = 0.0001"                 # a parameter's SWEEP line sets it
    assert lines[1].startswith("// SWEEP WIDTH") and lines[4] == "FULLY CONNECTED LAYER 32"
    commands, _, (_, values) = parse_control(path, sweep_run=4)
    assert values == {"WPEN": "0.0001", "WIDTH": "32"}
    assert [c.args["value"] for c in commands if c.name == "SET"] == [0.0001]
    layer = next(c for c in commands if c.name == "LAYER")
    assert layer.line == 5 and layer.args["spec"].control_line() == "FULLY CONNECTED LAYER 32"


@pytest.mark.parametrize("text, line, words", [
    ("SWEEP WPEN =\nTRAIN\n", 1, "the list of values is empty"),
    ("SWEEP WPEN = 0,,1\n", 1, "an empty value between commas"),
    ("SWEEP WPEN = 0, x\n", 1, "WPEN must be a number"),
    ("SWEEP A = 1, 2\nFULLY CONNECTED LAYER $A\nFULLY CONNECTED LAYER $B\n", 3,
     "the placeholder $B has no value"),
    ("MAKE IMAGE 8 8 1 2 32\nFULLY CONNECTED LAYER $WIDTH\n", 2,
     "the placeholder $WIDTH has no value"),          # a file that sweeps nothing
    ("SWEEP A = 1\nSWEEP a = 2\nFULLY CONNECTED LAYER $A\n", 2, "SWEEP A is given twice"),
    ("SWEEP WPEN = 0, 1\nWPEN = 0.1\n", 2, "WPEN is swept at line 1"),
    ("SWEEP WPN = 0, 1\nTRAIN\n", 1, "no line uses $WPN"),
    ("SWEEP SEEDS = 0\n", 1, "at least 1"),
    ("SWEEP SEEDS = 2\nRANDOM SEED = 4\n", 2, "RANDOM SEED would give"),
    ("SWEEP A = " + ", ".join(map(str, range(101))) + "\nSWEEP SEEDS = 100\n"
     "FULLY CONNECTED LAYER $A\n", 2, "this sweep makes 10,100 runs"),
])
def test_refused_at_their_line(tmp_path, text, line, words):
    path = _write(tmp_path, "bad.ctl", text)
    with pytest.raises(ConvnetError) as e:
        sweep_of(path)
    assert e.value.line == line and words in e.value.message
    result = CliRunner().invoke(main, ["check", path])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1].startswith(f"convnet: error: {path}:{line}: ")


def test_a_large_sweep_with_the_flag(tmp_path):
    text = ("SWEEP A = " + ", ".join(map(str, range(101))) + "\nSWEEP SEEDS = 100\n"
            "FULLY CONNECTED LAYER $A\n")
    assert read_sweep(text.splitlines(), "big.ctl", allow_large=True).runs == 10_100


def test_check_counts_the_runs_and_checks_every_combination(tmp_path):
    path = _write(tmp_path, "grid.ctl", GRID)
    result = CliRunner().invoke(main, ["check", path])
    assert result.exit_code == 0, result.output
    assert f"convnet: {path}: 6 combinations x 3 seeds = 18 runs; every combination is " \
        "checked" in result.output and result.output.endswith(f"convnet: {path}: OK\n")
    # a value that only one combination makes wrong is found
    bad = _write(tmp_path, "bad.ctl", GRID.replace("16, 32", "16, 0"))
    result = CliRunner().invoke(main, ["check", bad])
    assert result.exit_code == 2 and f"{bad}:5:" in result.output


def test_run_refuses_a_sweep_file_without_a_combination(tmp_path):
    path = _write(tmp_path, "grid.ctl", GRID)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["run", path, "--out", str(out)])
    assert result.exit_code == 2 and not out.exists()
    assert f"{path}:1: this file sweeps values: `convnet batch FILE --out DIR`" in result.output
    result = CliRunner().invoke(main, ["run", path, "--out", str(out), "--sweep-run", "7"])
    assert result.exit_code == 2 and "the file has combinations 1 to 6" in result.output


def test_statistics_against_hand_computed_values():
    s = stats.describe([1.0, 2.0, 3.0, 4.0])
    std = math.sqrt(((1.5 ** 2) * 2 + (0.5 ** 2) * 2) / 3)          # 1.29099
    half = 3.1824 * std / 2                                          # t(0.975, 3) s / sqrt(4)
    assert s.n == 4 and s.mean == 2.5 and s.std == pytest.approx(std)
    assert (s.low, s.high) == (pytest.approx(2.5 - half), pytest.approx(2.5 + half))
    one = stats.describe([0.7, None])
    assert one.n == 1 and one.std is None and one.low is None
    assert stats.describe([]) is None
    assert stats.t95(1) == 12.7062 and stats.t95(35) == stats.T95[30] and stats.t95(500) == 1.96


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_a_batch_resumes_reruns_failed_and_changed_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(DATA / "t10k-images-idx3-ubyte.gz", tmp_path / "images.gz")
    shutil.copy(DATA / "t10k-labels-idx1-ubyte.gz", tmp_path / "labels.gz")
    _write(tmp_path, "tiny.ctl", TINY)
    _write(tmp_path, "mnist.ctl", 'READ MNIST IMAGE "images.gz"\nREAD MNIST LABELS "labels.gz"\n'
           "KEEP CASES 1 40\nFULLY CONNECTED LAYER 2\nANNEAL ITERS = 2\nMAXITERS = 2\nTRAIN\n")
    files = ["tiny.ctl", "mnist.ctl"]
    first = run_batch(files, "out", jobs=2, device="cpu")
    assert [r.ok for r in first] == [True] * 5 and not any(r.reused for r in first)
    data = json.loads(Path(first[0].out, "results.json").read_text())
    assert data["inputs"]["seed"] == 1 and data["session"]["sweep"]["values"] == {"WPEN": "0"}
    assert "Sweep run of tiny.ctl: WPEN = 0 (combination 1 of 2), seed 1" in \
        Path(first[0].out, "CONVNET.LOG").read_text()
    # an interrupted run, and a data file whose content changed, run again; the rest is reused
    results = Path(first[1].out, "results.json")
    results.write_text(results.read_text().replace('"status": "done"', '"status": "interrupted"'))
    shutil.copy(DATA / "mnist-3000-images-idx3-ubyte.gz", tmp_path / "images.gz")
    shutil.copy(DATA / "mnist-3000-labels-idx1-ubyte.gz", tmp_path / "labels.gz")
    result = CliRunner().invoke(main, ["batch", *files, "--out", "out", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    rows = _rows("out/summary.csv")
    assert [r["reused"] for r in rows] == ["yes", "", "yes", "yes", ""]
    assert "(3 reused from an earlier start)" in result.output
    assert "reused tiny.ctl [WPEN = 0; seed 1]: finished earlier with the same inputs" in \
        result.output
    groups = _rows("out/groups.csv")
    assert [(g["WPEN"], g["runs"]) for g in groups] == [("0", "2"), ("0.01", "2")]
    finals = [float(r["final_criterion"]) for r in rows[:2]]
    assert float(groups[0]["final_criterion_mean"]) == pytest.approx(sum(finals) / 2, rel=1e-5)
    # another batch into the folder is refused; --overwrite reruns everything
    result = CliRunner().invoke(main, ["batch", "tiny.ctl", "--out", "out", "--device", "cpu"])
    assert result.exit_code == 2 and "holds the results of another batch" in result.output


@pytest.mark.slow
def test_retry_runs_a_failing_session_again(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "broken.ctl", "MAKE IMAGE 6 6 1 2 20\nCONVOLUTIONAL LAYER 2 9 9 0 0 1 1\n"
           "TRAIN\n")
    result = CliRunner().invoke(main, ["batch", "broken.ctl", "--out", "out", "--retry", "2"])
    assert result.exit_code == 2
    assert result.output.count("started broken.ctl") == 3
    (row,) = _rows("out/summary.csv")
    assert row["status"].startswith("error: broken.ctl:2:") and row["status"].endswith(
        "(3 attempts)")
