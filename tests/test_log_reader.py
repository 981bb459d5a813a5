"""The CONVNET.LOG reader and the `convnet log` commands built on it."""

from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from convnet.cli import main
from convnet.errors import ConvnetError
from convnet.logs.reader import compare_lines, parse_log, read_log, summary_lines

FIXTURES = Path(__file__).resolve().parent / "fixtures"

# A log laid out as the session writes it, with the book's result lines (p.166-168).
BOOK_LOG = """\
CONVNET.LOG format 1, convnet 0.1.0, 2024-01-01T12:00:00
Session: convnet 0.1.0; control files: book.ctl
Random seed = 7
Control file book.ctl
MAKE IMAGE 12 12 1 6 1024
   Data: 1024 cases of 12 rows, 12 columns and 1 bands, 6 classes
CONVOLUTIONAL LAYER 6 1 1 1 1 1 1
POOLED MAX LAYER 3 3 2 2
LOCAL LAYER 3 1 1 1 1 1 1
POOLED AVERAGE LAYER 3 3 2 2
FULLY CONNECTED LAYER 4
WPEN = 0.001
TRAIN
Input has 12 rows, 12 columns, and 1 bands
Model architecture...
Model has 6 layers, including fully connected output
Layer 1 is convolutional, with 6 slices, each 12 high and 12 wide
   Horz half-width=1, padding=1, stride=1
   Vert half-width=1, padding=1, stride=1
   864 neurons and 10 prior weights per slice gives 60 weights
Layer 2 is 3 by 3 pooling max, with stride 2 by 2, 5 high, 5 wide, and 6 deep
Layer 3 is locally connected, with 3 slices, each 5 high and 5 wide
   Horz half-width=1, padding=1, stride=1
   Vert half-width=1, padding=1, stride=1
   75 neurons and 55 prior weights per neuron gives 4125 weights
Layer 4 is 3 by 3 pooling average, with stride 2 by 2, 2 high, 2 wide, and 3 deep
Layer 5 is fully connected, with 4 slices, each 1 high and 1 wide
   4 neurons and 13 prior weights per neuron gives 52 weights
Layer 6 (output) is fully connected, with 6 slices (classes)
   6 neurons and 5 prior weights per neuron gives 30 weights
4267 Total weights for the entire model
Training parameters: ANNEAL ITERS = 100, ANNEAL RANGE = 0.1, MAXITERS = 1000, TOL = 5e-05, WPEN = 0.001
Computing on the host (2 threads)
Simulated annealing for starting weights is complete with mean negative log likelihood = 0.29804
WARNING... User pressed ESCape during optimization
Results are incomplete and may be seriously incorrect
Optimization is complete with negative log likelihood = 0.09214
\t1\t2\t3\t4\t5\t6
1\t168\t0\t2\t0\t2\t0
\t97.67\t0.00\t1.16\t0.00\t1.16\t0.00
\t16.41\t0.00\t0.20\t0.00\t0.20\t0.00
2\t1\t127\t18\t0\t1\t31
\t0.56\t71.35\t10.11\t0.00\t0.56\t17.42
\t0.10\t12.40\t1.76\t0.00\t0.10\t3.03
3\t1\t12\t120\t2\t4\t11
\t0.67\t8.00\t80.00\t1.33\t2.67\t7.33
\t0.10\t1.17\t11.72\t0.20\t0.39\t1.07
4\t8\t0\t1\t124\t48\t1
\t4.40\t0.00\t0.55\t68.13\t26.37\t0.55
\t0.78\t0.00\t0.10\t12.11\t4.69\t0.10
5\t6\t1\t0\t11\t178\t0
\t3.06\t0.51\t0.00\t5.61\t90.82\t0.00
\t0.59\t0.10\t0.00\t1.07\t17.38\t0.00
6\t0\t20\t1\t0\t1\t124
\t0.00\t13.70\t0.68\t0.00\t0.68\t84.93
\t0.00\t1.95\t0.10\t0.00\t0.10\t12.11

Total misclassification = 17.8711 percent
CLEAR
MAKE IMAGE 12 12 1 6 100
TEST
\t1\t2\t3\t4\t5\t6
1\t10\t0\t2\t0\t2\t0
\t71.43\t0.00\t14.29\t0.00\t14.29\t0.00
\t10.00\t0.00\t2.00\t0.00\t2.00\t0.00

Total misclassification = 81.0000 percent
"""


def test_book_log_gives_a_train_and_a_test():
    log = parse_log(BOOK_LOG, "book.log")
    assert log.format_version == 1 and log.convnet_version == "0.1.0" and log.seed == 7
    assert log.control_files == ["book.ctl"]
    train, test = log.runs
    assert train.command == "TRAIN" and test.command == "TEST"
    assert (train.index, test.index) == (1, 2)
    assert train.weights == 4267 and test.weights == 4267
    assert (train.rows, train.cols, train.bands, train.n_classes) == (12, 12, 1, 6)
    assert train.architecture[0] == "Input has 12 rows, 12 columns, and 1 bands"
    assert train.architecture[-1] == "4267 Total weights for the entire model"
    assert train.params == {"ANNEAL ITERS": "100", "ANNEAL RANGE": "0.1", "MAXITERS": "1000",
                            "TOL": "5e-05", "WPEN": "0.001"}
    assert train.device == "cpu" and train.threads == "2"
    assert train.phase("annealing").criterion == 0.29804 and train.final_criterion == 0.09214
    assert [p.name for p in train.phases] == ["annealing", "refinement"]
    assert train.interrupted and train.phase("refinement").interrupted
    assert train.misclassification == 17.8711 and test.misclassification == 81.0
    assert len(train.confusion) == 6 and train.confusion[1] == [1, 127, 18, 0, 1, 31]
    assert train.n_cases == 1024
    assert test.confusion == [[10, 0, 2, 0, 2, 0]]


def test_version_line_is_required_and_unknown_formats_are_refused():
    with pytest.raises(ConvnetError, match="not a CONVNET.LOG"):
        parse_log("Input has 12 rows\n", "x.log")
    with pytest.raises(ConvnetError, match="format 2 is not known"):
        parse_log(BOOK_LOG.replace("format 1,", "format 2,"), "x.log")
    with pytest.raises(ConvnetError, match="empty"):
        parse_log("", "x.log")
    try:
        parse_log(BOOK_LOG.replace("format 1,", "format 9,"), "x.log")
    except ConvnetError as e:
        assert str(e).startswith("x.log:1: ")


def test_error_line_ends_the_run():
    text = BOOK_LOG.split("Simulated annealing")[0] + "ERROR: book.ctl:13: something failed\n"
    log = parse_log(text, "e.log")
    (train,) = log.runs
    assert train.error == "book.ctl:13: something failed" == log.error
    assert train.misclassification is None and train.weights == 4267
    assert summary_lines([log])[1].endswith("error: book.ctl:13: something failed")


def test_summary_and_compare_lines():
    log = parse_log(BOOK_LOG, "book.log")
    lines = summary_lines([log, log])
    assert len(lines) == 1 + 4
    assert lines[0].split()[:4] == ["log", "run", "command", "weights"]
    cells = lines[1].split()
    assert cells[:6] == ["book.log", "1", "TRAIN", "4267", "cpu", "0.29804"]
    assert "17.8711" in cells and cells[-1] == "interrupted"
    other = parse_log(BOOK_LOG.replace("0.09214", "0.1").replace("17.8711", "20.0000"), "b.log")
    out = compare_lines(log, other)
    assert out[0].split()[:2] == ["A:", "book.log"]
    final = next(line for line in out if line.startswith("final criterion"))
    assert "*" in final and "0.09214" in final and final.rstrip().endswith("0.1")
    weights = next(line for line in out if line.startswith("weights"))
    assert "*" not in weights and weights.split() == ["weights", "4267", "4267"]
    test = next(line for line in out if line.startswith("test misclassification"))
    assert test.split()[-2:] == ["81.0000", "81.0000"]


def test_cli_log_commands_on_the_book_log(tmp_path):
    path = tmp_path / "CONVNET.LOG"
    path.write_text(BOOK_LOG)
    runner = CliRunner()
    result = runner.invoke(main, ["log", "summary", str(path)])
    assert result.exit_code == 0, result.output
    assert "4267" in result.output and "17.8711" in result.output
    result = runner.invoke(main, ["log", "compare", str(path), str(path)])
    assert result.exit_code == 0 and "final criterion" in result.output
    png = tmp_path / "curve.png"
    result = runner.invoke(main, ["log", "plot", str(path), "-o", str(png)])
    assert result.exit_code == 0, result.output
    with Image.open(png) as im:
        assert im.format == "PNG" and im.size[0] > 500
    bad = tmp_path / "bad.log"
    bad.write_text(BOOK_LOG.replace("format 1,", "format 3,"))
    result = runner.invoke(main, ["log", "summary", str(bad)])
    assert result.exit_code == 2
    assert "format 3 is not known" in result.output and "Traceback" not in result.output
    result = runner.invoke(main, ["log", "summary", str(tmp_path / "missing.log")])
    assert result.exit_code == 2 and "log file not found" in result.output
    result = runner.invoke(main, ["log", "plot", str(path), "-o", str(png), "--train", "2"])
    assert result.exit_code == 2 and "no TRAIN 2" in result.output


SMALL = """\
// train on 40 random images, test on 20 others
MAKE IMAGE 6 6 1 2 40
CONVOLUTIONAL LAYER 2 1 1 1 1 1 1
ANNEAL ITERS = 5
MAXITERS = 5
WPEN = 0.01
TRAIN
CLEAR
MAKE IMAGE 6 6 1 2 20
TEST
FULLY CONNECTED LAYER 2
TRAIN
"""


def test_reader_agrees_with_a_real_session(tmp_path):
    from convnet.session import run
    ctl = tmp_path / "small.ctl"
    ctl.write_text(SMALL)
    session = run([str(ctl)], out=str(tmp_path / "out"), device="cpu", seed=11, threads=1)
    train, test, train2 = session.results
    log = read_log(tmp_path / "out" / "CONVNET.LOG")
    assert [r.command for r in log.runs] == ["TRAIN", "TEST", "TRAIN"]
    assert log.seed == 11 and log.control_files == [str(ctl)]
    a, t, b = log.runs
    assert a.weights == 2 * 10 + 2 * 73 and t.weights == a.weights
    assert b.weights == 2 * 37 + 2 * 3 and b.layers[0].startswith("1 fully connected 1x1x2")
    assert a.device == "cpu" and a.params["ANNEAL ITERS"] == "5" and a.params["WPEN"] == "0.01"
    # every number agrees with what the session computed, to the digits the log keeps
    assert [p.name for p in a.phases] == [p.name for p in train.phases]
    for logged_phase, real_phase in zip(a.phases, train.phases):
        assert abs(logged_phase.criterion - real_phase.criterion) <= 5e-6
        assert [s for s, _ in logged_phase.trace] == [s for s, _ in real_phase.trace]
        for (step, logged), (_, real) in zip(logged_phase.trace, real_phase.trace):
            # 6 digits; a step 0 is the previous phase's result, logged with 5 decimals
            assert abs(logged - real) <= (5e-6 if step == 0 else 5e-6 * abs(real))
        assert logged_phase.seconds == pytest.approx(real_phase.seconds, abs=0.006)
    assert abs(a.final_criterion - train.final_criterion) <= 5e-6
    assert a.phase("refinement").steps == train.phase("refinement").steps
    assert a.phase("refinement").stop_words == train.phase("refinement").stop_words
    assert abs(a.misclassification - train.misclassification) <= 1e-4
    assert a.confusion == train.confusion.tolist() and a.n_cases == 40
    assert abs(a.seconds - train.seconds["total"]) <= 0.01
    assert abs(t.final_criterion - test.criterion) <= 5e-6 and t.n_cases == 20
    assert abs(t.misclassification - test.misclassification) <= 1e-4
    assert t.confusion == test.confusion.tolist()
    assert abs(b.final_criterion - train2.final_criterion) <= 5e-6
    # and `convnet log` on it
    lines = summary_lines([log])
    assert len(lines) == 4 and all(line.split()[-1] == "ok" for line in lines[1:])
    out = compare_lines(log, log, 1, 2)
    assert "*" in next(line for line in out if line.startswith("weights"))
    png = tmp_path / "plot.png"
    result = CliRunner().invoke(main, ["log", "plot", str(tmp_path / "out" / "CONVNET.LOG"),
                                       "-o", str(png), "--train", "1"])
    assert result.exit_code == 0, result.output
    with Image.open(png) as im:
        assert im.size == (1040, 430)


def test_real_log_of_the_manual_example():
    """tests/fixtures/manual_example.log: `convnet run controlfiles/manual_example.ctl --seed 1`."""
    log = read_log(FIXTURES / "manual_example.log")
    (train,) = log.runs
    assert log.seed == 1 and log.control_files == ["controlfiles/manual_example.ctl"]
    assert train.weights == 4267 and train.device == "cpu"
    assert train.params["WPEN"] == "0.001" and train.params["MAXITERS"] == "1000"
    assert train.layers[1] == "2 max pool 3x3 stride 2,2 -> 5x5x6"
    annealing, refinement = train.phases
    assert len(annealing.trace) == 100 and annealing.trace[0][0] == 1
    assert min(v for _, v in annealing.trace) == pytest.approx(annealing.criterion, abs=5e-6)
    assert refinement.trace[0] == (0, annealing.criterion)
    assert len(refinement.trace) == refinement.steps + 1 == 1001
    crits = [v for _, v in refinement.trace]
    assert all(b <= a for a, b in zip(crits, crits[1:]))     # refinement never goes up
    assert train.final_criterion == pytest.approx(crits[-1], abs=5e-6)
    assert refinement.stop_words == "MAXITERS reached"
    assert train.misclassification is not None and len(train.confusion) == 6
    assert sum(map(sum, train.confusion)) == train.n_cases == 1024
    assert set(train.phase_seconds) == {"annealing", "refinement", "final pass", "confusion matrix",
                                        "total"}
    assert train.seconds == train.phase_seconds["total"] > 0
    assert not train.interrupted and train.error is None
    lines = summary_lines([log])
    cells = lines[1].split()
    assert cells[2:5] == ["TRAIN", "4267", "cpu"] and cells[-1] == "ok"
    assert cells[5] == f"{annealing.criterion:.6g}" and cells[7] == "1000"


def test_host_timing_table_lines():
    from convnet.logs.timing import TITLE, format_timing_table
    assert format_timing_table([]) == []
    lines = format_timing_table([("Layer 1 CONV", "forward", 4, 0.010),
                                 ("Layer 1 CONV", "gradient", 2, 0.030),
                                 ("Layer 1 CONV", "delta", 2, 0.004),
                                 ("Output", "forward", 4, 0.002),
                                 ("Layer 1 CONV", "forward", 1, 0.0025)])   # added to the first
    assert lines[0] == TITLE
    assert lines[1].split() == ["--", "forward", "--", "--", "delta", "--", "--", "gradient", "--"]
    assert lines[2].split() == ["Layer"] + ["calls", "total", "ms", "ms/call"] * 3
    assert lines[3].split() == ["Layer", "1", "CONV", "5", "12.500", "2.5000", "2", "4.000",
                                "2.0000", "2", "30.000", "15.0000"]
    assert lines[4].split() == ["Output", "4", "2.000", "0.5000", "-", "-"]
    assert lines[5].split() == ["Total", "9", "14.500", "1.6111", "2", "4.000", "2.0000", "2",
                                "30.000", "15.0000"]
    assert lines[6] == "Total timed: 48.500 ms"
    # columns line up: every number of a column ends at the same place
    assert len({len(line) for line in lines[2:4]} | {len(lines[5])}) == 1
    # the reader skips the table
    log = parse_log(BOOK_LOG.replace("CLEAR\n", "\n".join(lines) + "\nCLEAR\n"), "t.log")
    assert [r.command for r in log.runs] == ["TRAIN", "TEST"]
    assert log.runs[0].misclassification == 17.8711
