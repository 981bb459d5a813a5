"""Validation during TRAIN: held-out cases, checks, the best weights, early stop, time to a target,
results.json version 3, the check errors, and the emulated device path."""

import json
import subprocess
import sys

import numpy as np
import pytest

from convnet.architecture import Architecture
from convnet.control import parse_line
from convnet.data.dataset import Dataset
from convnet.errors import ConvnetError
from convnet.interrupt import Interrupt
from convnet.logs import results as results_file
from convnet.logs.writer import LogWriter
from convnet.model import Model
from convnet.params import TrainingParams, ValidationParams
from convnet.session import check, run
from convnet.train import validation as validation_module
from convnet.train.trainer import train

N_CASES, HELD = 160, (121, 160)


def learnable_data(seed=0, n=N_CASES):
    """Images whose class is the third of their mean brightness: a fully connected net learns
    it, so validation errors fall and a target can be reached."""
    rng = np.random.default_rng(seed)
    inputs = rng.uniform(-1, 1, (n, 1, 6, 6)) + rng.uniform(-0.5, 0.5, (n, 1, 1, 1))
    means = inputs.mean(axis=(1, 2, 3))
    classes = np.digitize(means, np.quantile(means, [1 / 3, 2 / 3]))
    return Dataset(np.clip(inputs, -1, 1), classes, 3, "MAKE")


def small_arch():
    return Architecture([parse_line("FULLY CONNECTED LAYER 4").args["spec"]], 6, 6, 1, 3)


def train_small(data, validation=None, maxiters=25, model=None, seed=3):
    """One TRAIN of a small net on ``data``; returns (model, TrainResult)."""
    model = model or Model(small_arch(), threads=1)
    training = TrainingParams(anneal_iters=10, maxiters=maxiters)
    result = train(model, data, training, LogWriter(None), Interrupt(),
                   np.random.default_rng(seed), validation=validation)
    return model, result


def traces(result):
    return [(p.name, p.trace, p.criterion) for p in result.phases]


# ------------------------------------------------------------------ cases held out
def test_held_out_cases_are_never_trained_on(monkeypatch):
    """The training evaluator is bound to the other cases alone, and training is the same bit for
    bit whatever the held-out cases hold; only the checks see them."""
    bound = []
    original = Model.evaluator

    def spy(self, inputs, classes, wpen=0.0):
        bound.append(np.array(inputs))
        return original(self, inputs, classes, wpen)

    monkeypatch.setattr(Model, "evaluator", spy)
    data = learnable_data().hold_out(*HELD)
    _, first = train_small(data, ValidationParams())
    training_cases, checked_cases = bound
    assert training_cases.shape[0] == N_CASES - 40 and checked_cases.shape[0] == 40
    assert np.array_equal(training_cases, data.inputs[:120])
    assert first.n_cases == 120 and int(first.confusion.sum()) == 120

    changed = learnable_data()
    rng = np.random.default_rng(9)
    changed.inputs[120:] = rng.uniform(-1, 1, changed.inputs[120:].shape)
    changed.classes[120:] = rng.integers(0, 3, 40)
    _, second = train_small(changed.hold_out(*HELD), ValidationParams())
    assert traces(first) == traces(second)
    assert first.final_criterion == second.final_criterion
    assert [c["error"] for c in first.validation] != [c["error"] for c in second.validation]


def test_checks_change_nothing_of_the_training():
    """Without any new setting nothing is checked; checks of the training cases (TARGET ERROR
    alone) leave every number of the training as it was."""
    _, plain = train_small(learnable_data())
    _, defaults = train_small(learnable_data(), ValidationParams())
    _, checked = train_small(learnable_data(), ValidationParams(target_error=1.0))
    assert defaults.validation == [] and defaults.validation_summary is None
    assert traces(plain) == traces(defaults) == traces(checked)
    assert plain.final_criterion == checked.final_criterion
    assert checked.validation_summary["cases"] == "training"
    assert checked.validation_summary["n_cases"] == N_CASES


def test_checks_every_interval_and_at_each_phase_end():
    _, result = train_small(learnable_data().hold_out(*HELD), ValidationParams(interval=4))
    where = [(c["phase"], c["step"]) for c in result.validation]
    steps = result.phase("refinement").steps
    expected = [("annealing", 10)] + [("refinement", s) for s in range(4, steps + 1, 4)]
    if steps % 4:
        expected.append(("refinement", steps))
    assert where == expected
    seconds = [c["seconds"] for c in result.validation]
    evaluations = [c["evaluations"] for c in result.validation]
    assert seconds == sorted(seconds) and evaluations == sorted(evaluations)
    assert evaluations[0] == 10
    assert evaluations[-1] == result.n_criterion_evals - 1 + result.n_gradient_evals


# ------------------------------------------------------------------ best weights, early stop
def _recording_checks(monkeypatch):
    """The model's weights at every check, in order."""
    seen = []
    original = validation_module.Validation.check

    def check_and_keep(self, *args):
        seen.append(np.array(self.model.weights))
        return original(self, *args)

    monkeypatch.setattr(validation_module.Validation, "check", check_and_keep)
    return seen


def test_keep_best_restores_the_best_checks_weights(monkeypatch):
    seen = _recording_checks(monkeypatch)
    data = learnable_data(seed=4).hold_out(*HELD)
    model, result = train_small(data, ValidationParams(keep_best="YES", early_stop=2),
                                maxiters=60)
    errors = [c["error"] for c in result.validation]
    best = int(np.argmin(errors))                # the first of equal lowest errors
    assert result.validation_summary["best"] == result.validation[best]
    assert result.validation_summary["kept_best"]
    assert np.array_equal(model.weights, seen[best])
    assert best < len(errors) - 1                # the early stop came after it


def test_without_keep_best_the_last_weights_stay(monkeypatch):
    seen = _recording_checks(monkeypatch)
    model, result = train_small(learnable_data(seed=4).hold_out(*HELD),
                                ValidationParams(early_stop=2), maxiters=60)
    assert not result.validation_summary["kept_best"]
    assert np.array_equal(model.weights, seen[-1])


@pytest.mark.parametrize("patience", [1, 3])
def test_early_stop_fires_after_p_checks_without_improvement(patience):
    _, result = train_small(learnable_data(seed=5).hold_out(*HELD),
                            ValidationParams(early_stop=patience), maxiters=200)
    errors = [c["error"] for c in result.validation]
    refinement = result.phase("refinement")
    assert refinement.stop_reason == "early stop" and "EARLY STOP" in refinement.stop_words
    assert refinement.steps < 200 and not refinement.interrupted
    since, lowest = [], float("inf")             # checks in a row without a lower error
    for error in errors:
        since.append(0 if error < lowest else since[-1] + 1)
        lowest = min(lowest, error)
    assert since[-1] == patience and max(since[:-1]) < patience


# ------------------------------------------------------------------ control files
CONTROL = """MAKE IMAGE 6 6 1 3 {cases}
{hold}
FULLY CONNECTED LAYER 4
ANNEAL ITERS = 5
MAXITERS = 8
{settings}
TRAIN
"""


def write_control(tmp_path, hold="", settings="", cases=100, name="v.ctl"):
    path = tmp_path / name
    path.write_text(CONTROL.format(cases=cases, hold=hold, settings=settings))
    return path


def test_target_error_recorded_in_results_log_and_batch_row(tmp_path):
    from convnet.batch import BatchRow, fill_from_results
    ctl = write_control(tmp_path, "VALIDATION CASES 81 100", "TARGET ERROR = 99.5")
    out = tmp_path / "out"
    run([str(ctl)], out=str(out), seed=1)
    data = results_file.read_results(str(out / "results.json"))
    train_run = data["runs"][0]
    first = train_run["validation"][0]
    target = train_run["validation_summary"]["target"]
    assert target["reached"] and target["error"] == 99.5
    assert (target["phase"], target["step"], target["seconds"], target["evaluations"]) == \
        (first["phase"], first["step"], first["seconds"], first["evaluations"])
    log = (out / "CONVNET.LOG").read_text()
    assert "Target error 99.5 % reached at annealing 5" in log
    assert "Validation: cases 81-100 held out of training, 80 left to train on" in log
    row = fill_from_results(BatchRow(str(ctl), str(out)), str(out))
    assert row.target_seconds == target["seconds"] and row.target_evaluations == 5
    assert row.best_validation == train_run["validation_summary"]["best"]["error"]
    assert row.final_validation == train_run["validation"][-1]["error"]


def test_target_error_never_reached_says_so(tmp_path):
    from convnet.batch import BatchRow, fill_from_results
    ctl = write_control(tmp_path, "", "TARGET ERROR = 0.001")
    out = tmp_path / "out"
    run([str(ctl)], out=str(out), seed=1)
    summary = results_file.read_results(str(out / "results.json"))["runs"][0][
        "validation_summary"]
    assert summary["cases"] == "training" and summary["target"]["reached"] is False
    assert summary["target"]["seconds"] is None
    assert "Target error 0.001 % not reached" in (out / "CONVNET.LOG").read_text()
    row = fill_from_results(BatchRow("v.ctl", str(out)), str(out))
    assert row.target_seconds is None and row.best_validation is None


def test_new_data_ends_the_hold_out():
    data = learnable_data().hold_out(1, 10)
    assert data.held_out == (1, 10)
    assert data.keep_cases(1, 100).held_out is None
    training, held = data.split_held_out()
    assert (training.n_cases, held.n_cases) == (N_CASES - 10, 10)
    assert np.array_equal(held.inputs, data.inputs[:10])


# ------------------------------------------------------------------ results.json version 3
def test_a_version_2_file_is_read_as_version_3(tmp_path):
    path = tmp_path / "results.json"
    train_run = {"command": "TRAIN", "index": 1, "status": "done", "phases": [],
                 "misclassification": 10.0}
    test_run = {"command": "TEST", "index": 2, "status": "done", "misclassification": 12.0}
    path.write_text(json.dumps({"format": "convnet results", "format_version": 2,
                                "status": "done", "runs": [train_run, test_run]}))
    data = results_file.read_results(str(path))
    assert data["format_version"] == results_file.RESULTS_VERSION == 3
    train_entry, test_entry = data["runs"]
    assert train_entry["validation"] == [] and train_entry["validation_summary"] is None
    assert train_entry["misclassification"] == 10.0 and test_entry == test_run


# ------------------------------------------------------------------ check errors
@pytest.mark.parametrize("hold, settings, line, words", [
    ("VALIDATION CASES 1 100", "", 2, "holds out all 100 cases"),
    ("VALIDATION CASES 90 120", "", 2, "the range must lie within 1..100"),
    ("VALIDATION CASES 20 10", "", 2, "Last (10) is before First (20)"),
    ("", "VALIDATION INTERVAL = 0", 6, "VALIDATION INTERVAL must be at least 1"),
    ("", "TARGET ERROR = 0", 6, "TARGET ERROR must be greater than 0"),
    ("", "TARGET ERROR = 100", 6, "TARGET ERROR must be less than 100"),
    ("", "EARLY STOP = -1", 6, "EARLY STOP must be at least 0"),
    ("", "KEEP BEST = MAYBE", 6, "KEEP BEST must be YES or NO"),
    ("", "KEEP BEST = YES", 7, "need cases held out for validation"),
    ("", "EARLY STOP = 3", 7, "need cases held out for validation"),
])
def test_check_refuses_bad_validation_lines(tmp_path, hold, settings, line, words):
    ctl = write_control(tmp_path, hold, settings)
    with pytest.raises(ConvnetError) as caught:
        check([str(ctl)], echo=lambda text: None)
    assert caught.value.line == line and words in caught.value.message


def test_validation_cases_need_data_first(tmp_path):
    ctl = tmp_path / "early.ctl"
    ctl.write_text("VALIDATION CASES 1 5\nMAKE IMAGE 6 6 1 3 100\n")
    with pytest.raises(ConvnetError) as caught:
        check([str(ctl)], echo=lambda text: None)
    assert caught.value.line == 1 and "needs data" in caught.value.message


def test_convnet_check_reports_the_line_and_exits_2(tmp_path):
    ctl = write_control(tmp_path, "VALIDATION CASES 1 100")
    done = subprocess.run([sys.executable, "-m", "convnet", "check", str(ctl)],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert f"convnet: error: {ctl}:2: VALIDATION CASES 1 100 holds out all" in done.stderr


def test_a_good_file_passes_check(tmp_path):
    ctl = write_control(tmp_path, "VALIDATION CASES 81 100",
                        "VALIDATION INTERVAL = 2\nKEEP BEST = YES\nEARLY STOP = 4\n"
                        "TARGET ERROR = 20")
    check([str(ctl)], echo=lambda text: None)


# ------------------------------------------------------------------ the device path
def test_emulated_device_runs_validation(monkeypatch, tmp_path):
    """On the emulated device (tests/test_device_emulated.py's runtime) a TRAIN with held-out
    cases trains on the others and checks the held-out ones with a second evaluator, at the
    host path's check points and to its figures (the device computes in float32)."""
    from tests.test_device_emulated import FakeRuntime
    from convnet.device import runtime
    monkeypatch.setattr(runtime.Runtime, "_instances", {0: FakeRuntime()})
    monkeypatch.setattr("convnet.devices.cuda_status", lambda: (True, "emulated device"))
    data = learnable_data(n=60).hold_out(41, 60)
    settings = ValidationParams(interval=2, keep_best="YES", target_error=50.0)
    model = Model(small_arch(), device="cuda")
    _, result = train_small(data, settings, maxiters=6, model=model)
    assert result.n_cases == 40 and result.validation
    assert result.validation_summary["cases"] == "validation"
    host_model, host = train_small(data, settings, maxiters=6)
    assert [(c["phase"], c["step"]) for c in result.validation] == \
        [(c["phase"], c["step"]) for c in host.validation]
    for device_check, host_check in zip(result.validation, host.validation):
        assert device_check["criterion"] == pytest.approx(host_check["criterion"], rel=1e-3)


def test_summary_line_names_the_weights_the_train_ended_with():
    """The TRAIN line gives the last check's error, and with KEEP BEST the error of the best
    check's weights, which the TRAIN then ends with."""
    from types import SimpleNamespace
    from convnet.summary import _validation_words
    summary = {"cases": "validation", "final": {"error": 9.8}, "best": {"error": 9.6},
               "kept_best": False}
    result = SimpleNamespace(validation_summary=summary)
    assert _validation_words(result) == ", validation 9.80 % (lowest 9.60 %)"
    summary["kept_best"] = True
    assert _validation_words(result) == (", validation 9.60 % (the best check's weights, kept; "
                                         "last check 9.80 %)")
    assert _validation_words(SimpleNamespace(validation_summary=None)) == ""
