"""report.html pages made by `convnet report` for runs made earlier, and what a page says about
an error; the browser tests (test_report_browser.py) check pages as a browser shows them."""

import csv
import shutil
from pathlib import Path

from click.testing import CliRunner

from convnet.cli import main
from convnet.logs.reader import read_log
from convnet.report.run_page import run_page

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def test_report_of_a_log_without_results_json(tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    shutil.copy(FIXTURES / "manual_example.log", folder / "CONVNET.LOG")
    result = CliRunner().invoke(main, ["report", str(folder / "CONVNET.LOG")])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"convnet: wrote {folder / 'report.html'}"
    page = (folder / "report.html").read_text()
    train = read_log(folder / "CONVNET.LOG").trains[0]
    assert f'data-key="final_criterion" data-value="{train.final_criterion!r}"' in page
    assert "no results.json beside it" in page and "http-equiv" not in page
    assert "<svg" in page                           # the criterion curve, drawn from the log


def test_report_of_a_batch_folder_writes_every_page(tmp_path):
    batch = tmp_path / "batch"
    (batch / "first").mkdir(parents=True)
    (batch / "second").mkdir()
    shutil.copy(FIXTURES / "manual_example.log", batch / "first" / "CONVNET.LOG")
    with open(batch / "summary.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["file", "weights", "annealing_criterion", "final_criterion",
                    "train_misclassification", "test_misclassification", "seconds", "device",
                    "status"])
        w.writerow(["a/first.ctl", "1000", "0.3", "0.00119", "0.0000", "", "18.00", "cpu", "ok"])
        w.writerow(["b/second.ctl", "", "", "", "", "", "1.00", "",
                    "error: b/second.ctl:2: TRAIN needs at least one layer line before it"])
    result = CliRunner().invoke(main, ["report", str(batch)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [f"convnet: wrote {batch / 'first' / 'report.html'}",
                                          f"convnet: wrote {batch / 'report.html'}"]
    page = (batch / "report.html").read_text()
    assert 'href="first/report.html"' in page and "second/report.html" not in page
    assert '<tr class="best">' in page and "a/first.ctl</a> <span class=\"best-mark\">" in page


def test_report_of_something_else_is_one_error_line(tmp_path):
    result = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.strip() == (f"convnet: error: {tmp_path}: not a run folder (no "
                                     "results.json or CONVNET.LOG) nor a batch folder (no "
                                     "summary.csv)")
    result = CliRunner().invoke(main, ["report", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "no such file or folder" in result.output
    bad = tmp_path / "CONVNET.LOG"
    bad.write_text("not a log\n")
    result = CliRunner().invoke(main, ["report", str(bad)])
    assert result.exit_code == 2 and "not a CONVNET.LOG" in result.output
    assert "Traceback" not in result.output


def test_a_run_page_names_the_error_with_its_file_and_line(tmp_path):
    data = {"format": "convnet results", "format_version": 2, "status": "error",
            "error": {"text": "x.ctl:6: first case to display (11) must lie within 1..10",
                      "message": "first case to display (11) must lie within 1..10",
                      "file": "x.ctl", "line": 6},
            "session": {"control_files": ["x.ctl"], "seed": 1}, "runs": [], "pictures": []}
    page = run_page(data, str(tmp_path))
    assert ('data-file="x.ctl" data-line="6">x.ctl:6: first case to display (11) must lie '
            "within 1..10</p>") in page
    assert "status-error" in page and "http-equiv" not in page


def test_a_gpu_run_page_shows_its_cuda_log(tmp_path):
    (tmp_path / "CUDA.LOG").write_text("CUDA device: an example GPU\nLaunch <timing> table\n")
    data = {"format": "convnet results", "format_version": 2, "status": "running",
            "session": {"control_files": ["g.ctl"]}, "runs": [], "cuda_log": "CUDA.LOG"}
    page = run_page(data, str(tmp_path))
    assert '<section id="cuda"><h2>CUDA.LOG</h2><pre>CUDA device: an example GPU\n' \
           "Launch &lt;timing&gt; table\n</pre></section>" in page
    assert '<meta http-equiv="refresh" content="5">' in page          # still running


def test_a_run_page_shows_any_phases_of_a_train(tmp_path):
    """The page reads a TRAIN's phases, whatever their number and names."""
    phases = [{"name": "warm", "title": "Warm start", "unit": "trial", "chart": "scatter",
               "trace": [[1, 0.9], [2, 0.7]], "criterion": 0.7, "steps": 2,
               "stop_words": "2 trials made"},
              {"name": "batches", "title": "Mini-batches", "unit": "epoch", "chart": "line",
               "trace": [[0, 0.7], [1, 0.5]], "criterion": 0.5, "steps": 1},
              {"name": "polish", "title": "Polish", "unit": "iteration", "chart": "line",
               "trace": [[0, 0.5], [1, 0.4]], "criterion": 0.4, "steps": 1,
               "stop_words": "MAXITERS reached"}]
    data = {"format": "convnet results", "format_version": 2, "status": "done",
            "session": {"control_files": ["m.ctl"]},
            "runs": [{"command": "TRAIN", "index": 1, "status": "done", "phases": phases,
                      "final_criterion": 0.4, "confusion": [[1, 0], [0, 1]],
                      "misclassification": 0.0, "n_cases": 2}]}
    page = run_page(data, str(tmp_path))
    for name in ("warm", "batches", "polish"):
        assert f"<th>{name} criterion</th>" in page
    assert 'data-key="batches_criterion" data-value="0.5"' in page
    assert "<td>warm trials</td>" in page and "<td>batches epochs</td>" in page
    assert "<td>polish ended because</td><td>MAXITERS reached</td>" in page
    assert "Warm start (trials), Mini-batches (epochs), Polish (iterations)" in page
    assert page.count("<svg") >= 2                  # the three-panel curve and the confusion
