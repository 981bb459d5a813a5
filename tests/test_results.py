"""results.json: written beside CONVNET.LOG as the session goes, atomically, with the same numbers
the session computed; read back by `convnet log` and `convnet batch`."""

import json
import os

import pytest
from click.testing import CliRunner

from convnet.cli import main
from convnet.control import DEFAULT_PARAMETERS
from convnet.errors import ConvnetError, Interrupted
from convnet.logs import results as results_file
from convnet.logs.record import SessionRecord, Throttle
from convnet.session import run

SMALL = """\
MAKE IMAGE 6 6 1 2 40
CONVOLUTIONAL LAYER 2 1 1 1 1 1 1
ANNEAL ITERS = 5
MAXITERS = 5
WPEN = 0.01
TRAIN
DISPLAY TRAINING IMAGES 1 2 2 "training.png"
SAVE MODEL "small.cnm"
CLEAR
MAKE IMAGE 6 6 1 2 20
TEST
"""


def load(out):
    with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("small")
    ctl = folder / "small.ctl"
    ctl.write_text(SMALL)
    out = folder / "out"
    session = run([str(ctl)], out=str(out), device="cpu", seed=11, threads=1)
    return ctl, out, session, load(out)


def test_results_hold_what_the_session_computed(small_run):
    ctl, out, session, data = small_run
    train, test = session.results
    assert data["format"] == "convnet results" and data["format_version"] == 3
    assert data["status"] == "done" and data["error"] is None and data["finished"]
    assert data["session"]["seed"] == 11 and data["session"]["control_files"] == [str(ctl)]
    t, s = data["runs"]
    assert (t["command"], t["index"], t["line"], t["status"]) == ("TRAIN", 1, 6, "done")
    assert t["control_file"] == str(ctl) and t["device"] == "cpu" and t["threads"] == 1
    # numbers are exact (JSON keeps every digit of a float)
    assert t["final_criterion"] == train.final_criterion and t["nll"] == train.nll
    annealing, refinement = t["phases"]
    assert annealing["name"] == "annealing" and refinement["name"] == "refinement"
    assert annealing["criterion"] == train.phase("annealing").criterion
    assert annealing["trace"] == [list(p) for p in train.phase("annealing").trace]
    assert annealing["steps"] == 5 and annealing["stop_reason"] == "limit"
    assert refinement["trace"] == [list(p) for p in train.phase("refinement").trace]
    assert refinement["trace"][0] == [0, annealing["criterion"]]
    assert refinement["steps"] == train.phase("refinement").steps
    assert refinement["stop_reason"] == train.phase("refinement").stop_reason
    assert len(refinement["figures"]["step_lengths"]) == len(refinement["trace"])
    assert t["n_criterion_evals"] == 5 + refinement["evaluations"]["criterion"] + 1
    assert t["confusion"] == train.confusion.tolist() and t["n_cases"] == 40
    assert t["misclassification"] == train.misclassification
    assert set(t["seconds"]) == {"annealing", "refinement", "final pass", "confusion", "total"}
    # every parameter in force, and the architecture
    assert set(t["parameters"]) == set(DEFAULT_PARAMETERS)
    assert t["parameters"]["WPEN"] == 0.01 and t["parameters"]["ANNEAL ITERS"] == 5
    arch = t["architecture"]
    assert (arch["rows"], arch["cols"], arch["bands"], arch["classes"]) == (6, 6, 1, 2)
    assert arch["total_weights"] == 2 * 10 + 2 * 73
    assert [layer["line"] for layer in arch["layers"]] == ["CONVOLUTIONAL LAYER 2 1 1 1 1 1 1",
                                                           None]
    assert arch["layers"][1]["output"] and arch["report"][-1].startswith("166 Total weights")
    assert (s["command"], s["line"], s["status"]) == ("TEST", 11, "done")
    assert s["criterion"] == test.criterion and s["confusion"] == test.confusion.tolist()
    assert s["misclassification"] == test.misclassification and s["n_cases"] == 20
    assert [p["file"] for p in data["pictures"]] == ["criterion.png", "training.png"]
    assert data["pictures"][1]["line"] == 7
    assert data["models"][0]["action"] == "saved" and data["models"][0]["file"] == "small.cnm"
    assert not [f for f in os.listdir(out) if f.startswith(".results.json")]   # no temporary left


def test_log_commands_read_results_json_where_it_lies_beside_the_log(small_run, tmp_path):
    _, out, _, data = small_run
    folder = tmp_path / "copy"
    folder.mkdir()
    (folder / "CONVNET.LOG").write_text((out / "CONVNET.LOG").read_text())
    data = json.loads(json.dumps(data))
    data["runs"][0]["final_criterion"] = 0.123456789          # a value the log does not say
    results_file.write_results(str(folder / "results.json"), data)
    result = CliRunner().invoke(main, ["log", "summary", str(folder / "CONVNET.LOG")])
    assert result.exit_code == 0, result.output
    assert "0.123457" in result.output
    result = CliRunner().invoke(main, ["log", "compare", str(folder / "CONVNET.LOG"),
                                       str(out / "CONVNET.LOG")])
    assert result.exit_code == 0 and "0.123457" in result.output
    # without results.json the English log is read, as before
    os.unlink(folder / "results.json")
    result = CliRunner().invoke(main, ["log", "summary", str(folder / "CONVNET.LOG")])
    assert result.exit_code == 0 and "0.123457" not in result.output
    assert format(data["runs"][1]["misclassification"], ".4f") in result.output


def test_a_results_json_of_an_unknown_version_is_refused(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"format": "convnet results", "format_version": 99}))
    with pytest.raises(ConvnetError, match="results format 99 is not known"):
        results_file.read_results(str(path))
    path.write_text("{ half a file")
    with pytest.raises(ConvnetError, match="bad JSON"):
        results_file.read_results(str(path))
    (tmp_path / "CONVNET.LOG").write_text("CONVNET.LOG format 1, convnet 0.1.0, x\n")
    path.write_text(json.dumps({"format": "convnet results", "format_version": 99}))
    result = CliRunner().invoke(main, ["log", "summary", str(tmp_path / "CONVNET.LOG")])
    assert result.exit_code == 2 and "results format 99" in result.output
    assert "Traceback" not in result.output


def test_an_error_is_recorded_with_its_file_and_line(tmp_path):
    ctl = tmp_path / "bad.ctl"
    ctl.write_text("MAKE IMAGE 6 6 1 2 10\nFULLY CONNECTED LAYER 2\nMAXITERS = 2\n"
                   "ANNEAL ITERS = 2\nTRAIN\nDISPLAY TRAINING IMAGES 11 1 1 \"x.png\"\n")
    with pytest.raises(ConvnetError):
        run([str(ctl)], out=str(tmp_path / "out"), device="cpu", seed=1, threads=1)
    data = load(tmp_path / "out")
    assert data["status"] == "error"
    assert data["error"]["file"] == str(ctl) and data["error"]["line"] == 6
    assert "first case to display" in data["error"]["message"]
    assert [r["status"] for r in data["runs"]] == ["done"]
    # a syntax error: no command ran, the file still says where
    ctl.write_text("MAKE IMAGE 6 6 1 2 10\nFULLY CONNECTED LAYER\n")
    with pytest.raises(ConvnetError):
        run([str(ctl)], out=str(tmp_path / "out2"), device="cpu", seed=1)
    data = load(tmp_path / "out2")
    assert data["status"] == "error" and data["error"]["line"] == 2 and data["runs"] == []


def test_an_interrupted_session_marks_the_running_train(tmp_path, monkeypatch):
    import convnet.train.trainer as trainer

    def stopped(model, dataset, params, log, interrupt, rng, progress=None, validation=None):
        progress("Annealing", 1, 0.5, 0.5, total=3)
        progress("Annealing", 2, 0.4, 0.4, total=3)
        raise Interrupted("run ended by the user (Ctrl-C)")
    monkeypatch.setattr(trainer, "train", stopped)
    ctl = tmp_path / "a.ctl"
    ctl.write_text("MAKE IMAGE 6 6 1 2 10\nFULLY CONNECTED LAYER 2\nTRAIN\n")
    with pytest.raises(Interrupted):
        run([str(ctl)], out=str(tmp_path / "out"), device="cpu", seed=1, threads=1)
    data = load(tmp_path / "out")
    assert data["status"] == "interrupted"
    (t,) = data["runs"]
    assert t["status"] == "interrupted" and t["phases"][0]["trace"] == [[1, 0.5], [2, 0.4]]
    assert t["phases"][0]["name"] == "annealing"


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_throttle_waits_the_interval_and_a_multiple_of_the_last_cost():
    clock = FakeClock()
    throttle = Throttle(2.0, ratio=50.0, clock=clock)
    assert throttle.due()

    def slow():
        clock.t += 0.1                         # this action takes 0.1 s
    throttle.timed(slow)
    clock.t += 2.5
    assert not throttle.due()                  # 2.5 s < 50 x 0.1 s
    clock.t += 2.5
    assert throttle.due()
    assert throttle.total == pytest.approx(0.1)


def test_results_are_rewritten_while_training_runs(tmp_path):
    class Cmd:
        file, line = "x.ctl", 3
    from convnet.architecture import Architecture
    arch = Architecture.from_lines(["FULLY CONNECTED LAYER 2"], rows=3, cols=3, bands=1,
                                   n_classes=2)
    pages = []
    record = SessionRecord(str(tmp_path), {"seed": 1}, on_change=lambda d, f: pages.append(f))
    record.throttle = Throttle(0.0, ratio=0.0)
    record.start(["x.ctl"])
    entry = record.begin("TRAIN", Cmd, arch, dict(DEFAULT_PARAMETERS), "cpu", 1)
    observe = record.observer(entry)

    class Refinement:
        name, title, unit, chart, label, limit = ("refinement", "Refining", "iteration", "line",
                                                  "Refinement", 10)

        def start_trace(self):
            return [(0, 0.8)]
    observe("Annealing", 1, 0.9, 0.9, total=2)
    observe("Annealing", 2, 0.8, 0.8, total=2)
    observe.start_phase(Refinement())
    observe("Refinement", 1, 0.7, 0.7, total=10)
    data = load(tmp_path)
    assert data["status"] == "running" and data["runs"][0]["status"] == "running"
    annealing, refinement = data["runs"][0]["phases"]
    assert annealing["name"] == "annealing" and annealing["trace"] == [[1, 0.9], [2, 0.8]]
    assert refinement["trace"] == [[0, 0.8], [1, 0.7]] and refinement["title"] == "Refining"
    assert refinement["steps"] == 1 and refinement["limit"] == 10
    assert pages and not any(pages)
    record.finish("done")
    assert pages[-1] is True and load(tmp_path)["runs"][0]["status"] == "interrupted"


def test_write_atomic_leaves_the_old_file_when_the_rename_fails(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    results_file.write_results(str(path), {"a": 1.0, "b": float("inf")})
    assert json.loads(path.read_text()) == {"a": 1.0, "b": None}     # JSON has no infinity

    def broken(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError):
        results_file.write_results(str(path), {"a": 2.0})
    assert json.loads(path.read_text()) == {"a": 1.0, "b": None}
    assert os.listdir(tmp_path) == ["results.json"]


def test_results_that_cannot_be_written_at_the_end_are_one_clear_error(tmp_path, monkeypatch):
    import convnet.logs.record as record
    ctl = tmp_path / "a.ctl"
    ctl.write_text("MAKE IMAGE 6 6 1 2 10\n")
    real = record.write_results

    def full(path, data):
        if data["status"] != "running":
            raise OSError(28, "No space left on device")
        return real(path, data)
    monkeypatch.setattr(record, "write_results", full)
    with pytest.raises(ConvnetError) as info:
        run([str(ctl)], out=str(tmp_path / "out"), device="cpu", seed=1)
    assert str(info.value) == (f"cannot write {tmp_path / 'out' / 'results.json'}: "
                               "No space left on device")
    # after an error the session's own error is the one reported, not the results file's
    ctl.write_text("MAKE IMAGE 6 6 1 2 10\nTEST\n")
    with pytest.raises(ConvnetError) as info:
        run([str(ctl)], out=str(tmp_path / "out2"), device="cpu", seed=1)
    assert str(info.value).startswith(f"{ctl}:2: TEST needs a model")


V1_TRAIN = {
    "kind": "TRAIN", "index": 1, "control_file": "a.ctl", "line": 6, "status": "done",
    "error": None, "device": "cpu", "threads": 1,
    "architecture": {"rows": 6, "cols": 6, "bands": 1, "classes": 2, "total_weights": 166,
                     "layers": [], "report": []},
    "parameters": {"ANNEAL ITERS": 3, "MAXITERS": 8},
    "annealing": {"evaluations": [[1, 0.35], [2, 0.38], [3, 0.33]], "criterion": 0.33,
                  "n_evaluations": 3, "limit": 3, "interrupted": False, "seconds": 2.5},
    "refinement": {"iterations": [[0, 0.33, None], [1, 0.31, 0.02], [2, 0.30, 0.01]],
                   "n_iterations": 2, "limit": 8, "stop_reason": "tol",
                   "stop_words": "the relative improvement fell below TOL", "interrupted": False,
                   "n_gradient_evals": 6, "seconds": 0.1},
    "n_criterion_evals": 5, "final_criterion": 0.30, "nll": 0.29, "penalty": 0.01,
    "confusion": [[3, 0], [1, 2]], "misclassification": 16.6, "n_cases": 6,
    "seconds": {"annealing": 2.5, "refinement": 0.1, "final pass": 0.0, "confusion": 0.0,
                "total": 2.6}}


def test_a_version_1_file_is_read_in_the_current_layout(tmp_path):
    """Version 1's annealing and refinement become version 2's phases, number for number."""
    path = tmp_path / "results.json"
    test_run = {"kind": "TEST", "index": 2, "status": "done", "criterion": 0.4,
                "final_criterion": 0.4, "confusion": [[1, 0], [0, 1]], "misclassification": 0.0,
                "n_cases": 2, "seconds": {"test": 0.1, "total": 0.1}}
    path.write_text(json.dumps({"format": "convnet results", "format_version": 1,
                                "status": "done", "runs": [V1_TRAIN, test_run]}))
    data = results_file.read_results(str(path))
    assert data["format_version"] == 3 and data["runs"][0]["validation"] == []
    train, test = data["runs"]
    assert (train["command"], test["command"]) == ("TRAIN", "TEST") and "kind" not in train
    assert "annealing" not in train and "refinement" not in train
    annealing, refinement = train["phases"]
    assert annealing == {"name": "annealing", "title": "Simulated annealing",
                         "unit": "evaluation", "chart": "scatter",
                         "trace": [[1, 0.35], [2, 0.38], [3, 0.33]], "criterion": 0.33,
                         "steps": 3, "limit": 3, "interrupted": False, "stop_reason": "limit",
                         "stop_words": "ANNEAL ITERS reached", "seconds": 2.5,
                         "evaluations": {"criterion": 3, "gradient": 0}, "figures": {}}
    assert refinement["trace"] == [[0, 0.33], [1, 0.31], [2, 0.30]]
    assert refinement["figures"] == {"step_lengths": [None, 0.02, 0.01]}
    assert refinement["criterion"] == 0.30 and refinement["steps"] == 2
    assert refinement["evaluations"] == {"criterion": 1, "gradient": 6}
    assert (refinement["stop_reason"], refinement["limit"]) == ("tol", 8)
    assert train["n_criterion_evals"] == 5 and train["final_criterion"] == 0.30
    (tmp_path / "CONVNET.LOG").write_text("CONVNET.LOG format 1, convnet 0.1.0, x\n")
    result = CliRunner().invoke(main, ["log", "summary", str(tmp_path / "CONVNET.LOG")])
    assert result.exit_code == 0, result.output
    assert "0.33" in result.output.splitlines()[1]        # the first phase's criterion
