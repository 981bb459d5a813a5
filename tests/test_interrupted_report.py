"""An interrupted run never looks finished: a Ctrl-C before the session's own handling is an
interruption like any other (exit 130, the log says so), and a phase cut short by Ctrl-C is named
by the report and the summary; a TRAIN that ends at chance level says so."""

import json

from click.testing import CliRunner

from convnet.cli import main
from convnet.report.run_page import interrupted_phases, session_header

SMALL = "MAKE IMAGE 6 6 1 2 30\nFULLY CONNECTED LAYER 3\nANNEAL ITERS = 2\nMAXITERS = 2\nTRAIN\n"


def test_ctrl_c_before_training_ends_the_run_like_any_interruption(tmp_path, monkeypatch):
    ctl = tmp_path / "a.ctl"
    ctl.write_text(SMALL)

    def pressed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("convnet.session.parse_control", pressed)
    result = CliRunner().invoke(main, ["run", str(ctl), "--out", str(tmp_path / "out")])
    assert result.exit_code == 130, result.output
    assert "Aborted" not in result.output
    assert "run ended by the user (Ctrl-C)" in result.output
    log = (tmp_path / "out" / "CONVNET.LOG").read_text().splitlines()
    assert log[-1] == "Run ended by the user (Ctrl-C); the log is complete up to here"
    assert json.loads((tmp_path / "out" / "results.json").read_text())["status"] == "interrupted"


def test_the_report_names_the_phases_a_ctrl_c_cut_short():
    phases = [{"name": "annealing", "interrupted": False},
              {"name": "refinement", "interrupted": True}]
    data = {"status": "done", "session": {}, "runs": [
        {"command": "TRAIN", "index": 1, "status": "interrupted", "phases": phases},
        {"command": "TEST", "index": 2, "status": "done"}]}
    assert interrupted_phases(data) == ["TRAIN 1 refinement"]
    header = "".join(session_header(data))
    assert 'id="interrupted"' in header and "TRAIN 1 refinement" in header
    data["runs"][0]["phases"][1]["interrupted"] = False
    assert 'id="interrupted"' not in "".join(session_header(data))


def test_training_at_chance_level_warns_in_log_results_and_summary(tmp_path):
    ctl = tmp_path / "chance.ctl"
    ctl.write_text(SMALL.replace("ANNEAL ITERS = 2", "ANNEAL ITERS = 1\nANNEAL RANGE = 0.0001")
                   .replace("MAXITERS = 2", "MAXITERS = 1"))
    result = CliRunner().invoke(main, ["run", str(ctl), "--out", str(tmp_path / "out"),
                                       "--seed", "1"])
    assert result.exit_code == 0, result.output
    assert "warning: training ended at the no-information level" in result.output
    log = (tmp_path / "out" / "CONVNET.LOG").read_text()
    assert "WARNING... training ended at the no-information level" in log
    run = json.loads((tmp_path / "out" / "results.json").read_text())["runs"][0]
    assert "more ANNEAL ITERS" in run["warnings"][0]
    assert "no-information level" in (tmp_path / "out" / "report.html").read_text()


def test_no_information_level_is_the_entropy_of_the_class_shares():
    import math
    from convnet.train.trainer import chance_level_warnings, no_information_criterion
    assert abs(no_information_criterion([0, 1, 2, 3, 4, 5] * 10, 6) - math.log(6) / 6) < 1e-15
    assert abs(no_information_criterion([0, 0, 0, 1], 2) -
               -(0.75 * math.log(0.75) + 0.25 * math.log(0.25)) / 2) < 1e-15
    level = math.log(2) / 2
    assert chance_level_warnings(level * 0.999, [0, 1], 2)
    assert not chance_level_warnings(level * 0.9, [0, 1], 2)


def test_report_details(tmp_path):
    """The parameter table names the seed used and leaves out SERIES settings never set; a run
    of a batch links back to it; the batch page says what its 'best' means and ranks tested
    runs by test error."""
    from convnet.batch import BatchRow
    from convnet.report.batch_page import best_and_measure
    from convnet.report.run_page import parameters_table, run_page
    table = parameters_table({"RANDOM SEED": None, "SERIES WINDOW": 16, "SERIES SHIFT": 3,
                              "WPEN": 0.0}, seed=7)
    assert "7 (the session&#x27;s seed)" in table or "7 (the session's seed)" in table
    assert "SERIES WINDOW" not in table and "SERIES SHIFT" in table
    rows = [BatchRow("a.ctl", "a", final_criterion=0.01, test_misclassification=28.0),
            BatchRow("b.ctl", "b", final_criterion=0.2, test_misclassification=3.0)]
    assert best_and_measure(rows) == (1, "the lowest test error")
    rows[1].test_misclassification = None
    assert best_and_measure(rows) == (0, "the lowest final training criterion")
    (tmp_path / "summary.csv").write_text("file\n")
    (tmp_path / "run").mkdir()
    page = run_page({"status": "done", "session": {}, "runs": []}, str(tmp_path / "run"))
    assert 'href="../report.html"' in page
    assert 'id="batch-link"' not in run_page({"status": "done", "session": {}, "runs": []},
                                             str(tmp_path))
