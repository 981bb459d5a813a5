"""Mini-batch gradient descent (TRAIN METHOD = SGD | ADAM): the batch gradient, the update rules,
the schedules, reproducibility, Ctrl-C, the device's steps (emulated; on a GPU when there is one),
and the control file's refusals."""

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from convnet.architecture import Architecture
from convnet.cli import main
from convnet.device import backend as dbe
from convnet.host.backend import HostBackend
from convnet.minibatch import (ADAM, SGD, HostMiniBatches, UpdateRule, batch_layout,
                               draw_shifts, learning_rates, shift_cases, update_weights)
from convnet.model import Model
from convnet.params import DeviceParams, Params
from convnet.train.minibatch import MiniBatchPhase
from convnet.train.trainer import METHODS, TrainContext
from test_device_emulated import fake_runtime  # noqa: F401  (the emulated CUDA runtime)

ARCH = (["CONVOLUTIONAL LAYER 3 1 1 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
         "FULLY CONNECTED LAYER 5"], 8, 8, 1, 4)


def _problem(n=120, seed=3):
    arch = Architecture.from_lines(*ARCH)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, 1, 8, 8))
    c = rng.integers(0, 4, n)
    w = rng.normal(0, 0.3, arch.n_weights)
    return arch, x, c, w


def _epochs(evaluator, rule, w, batch, epochs, seed, rates=None, shift=0):
    """Run the host or device runner for some epochs with orders (and moves, AUGMENT SHIFT =
    ``shift``) from one seed; (trace, w)."""
    _, per_epoch = batch_layout(evaluator.n_cases, batch)
    rates = learning_rates(0.2, "COSINE", epochs, per_epoch) if rates is None else rates
    runner = evaluator.minibatches(rule, batch, rates, w)
    rng = np.random.default_rng(seed)
    trace = []
    for _ in range(epochs):
        order = rng.permutation(evaluator.n_cases)
        runner.start_epoch(order, draw_shifts(rng, evaluator.n_cases, shift))
        while runner.steps_left:
            runner.step()
        likelihood, w_now = runner.end_epoch()
        trace.append(likelihood + runner.penalty())     # the epoch's criterion, as logged
    return trace, w_now


# ------------------------------------------------------------------ the batch gradient
def test_batch_gradient_is_the_full_gradient_of_those_cases():
    arch, x, c, w = _problem()
    backend = HostBackend(arch, threads=2)
    batch = np.array([5, 17, 3, 3, 90, 44, 61, 2, 119, 0])
    crit, grad = backend.evaluator(x, c, 0.01).subset(batch).gradient(w)
    crit_f, grad_f = backend.evaluator(x[batch], c[batch], 0.01).gradient(w)
    assert crit == crit_f and np.array_equal(grad, grad_f)


def test_batch_gradient_matches_finite_differences():
    arch, x, c, w = _problem()
    part = HostBackend(arch, threads=1).evaluator(x, c, 0.01).subset(np.arange(7, 39))
    _, grad = part.gradient(w)
    rng = np.random.default_rng(0)
    h = 1e-6
    for i in rng.choice(arch.n_weights, 12, replace=False):
        up, down = w.copy(), w.copy()
        up[i] += h
        down[i] -= h
        numeric = (part.criterion(up) - part.criterion(down)) / (2 * h)
        assert abs(numeric - grad[i]) <= 1e-6 * max(1e-3, abs(grad[i])), i


# ------------------------------------------------------------------ update rules and schedules
def test_update_rules_by_hand():
    g = np.array([0.5, -1.0])
    w, v = np.array([1.0, 2.0]), np.array([0.1, 0.2])
    update_weights(UpdateRule(SGD, momentum=0.5), w, g, v, None, 0.1, 1)
    assert np.allclose(v, [0.55, -0.9]) and np.allclose(w, [1 - 0.055, 2 + 0.09])
    w, v = np.array([1.0, 2.0]), np.array([0.1, 0.2])
    update_weights(UpdateRule(SGD, momentum=0.5, nesterov=True), w, g, v, None, 0.1, 1)
    assert np.allclose(w, [1 - 0.1 * (0.5 + 0.275), 2 - 0.1 * (-1.0 - 0.45)])
    w, m, s = np.array([1.0, 2.0]), np.zeros(2), np.zeros(2)
    update_weights(UpdateRule(ADAM), w, g, m, s, 0.01, 1)
    # Adam's first step moves every weight by about the rate, against its gradient's sign
    assert np.allclose(w, [1 - 0.01, 2 + 0.01], atol=1e-9)


def test_schedules():
    assert np.array_equal(learning_rates(0.3, "CONSTANT", 2, 3), np.full(6, 0.3))
    step = learning_rates(1.0, "STEP", 5, 2, step_epochs=2, step_factor=0.5)
    assert np.allclose(step, [1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25])
    cosine = learning_rates(2.0, "COSINE", 4, 25)
    assert cosine[0] == 2.0 and np.all(np.diff(cosine) < 0) and 0 < cosine[-1] < 0.001
    cycle = learning_rates(1.0, "ONE CYCLE", 10, 10)
    top = int(np.argmax(cycle))
    assert math.isclose(cycle[0], 1 / 25) and math.isclose(cycle[top], 1.0) and top == 30
    assert np.all(np.diff(cycle[:top + 1]) > 0) and np.all(np.diff(cycle[top:]) < 0)


# ------------------------------------------------------------------ reproducibility
@pytest.mark.parametrize("kind", [SGD, ADAM])
def test_epochs_repeat_to_the_bit_whatever_the_threads(kind):
    arch, x, c, w = _problem()
    rule = UpdateRule(kind, momentum=0.9, nesterov=True)
    runs = [_epochs(HostBackend(arch, threads=t).evaluator(x, c, 0.001), rule, w, 16, 2, 7)
            for t in (1, 2, 3)]
    for trace, w_end in runs[1:]:
        assert trace == runs[0][0] and np.array_equal(w_end, runs[0][1])
    assert not np.array_equal(runs[0][1], w)


def test_descent_lowers_the_criterion():
    arch, x, c, w = _problem(n=200)
    ev = HostBackend(arch, threads=2).evaluator(x, c, 0.0)
    before = ev.criterion(w)
    _, w_end = _epochs(ev, UpdateRule(ADAM), w, 20, 8, 1,
                       rates=learning_rates(0.01, "CONSTANT", 8, 10))
    assert ev.criterion(w_end) < 0.95 * before


# ------------------------------------------------------------------ the phase and Ctrl-C
class _Log:
    def __init__(self):
        self.lines = []

    def write(self, text):
        self.lines.append(text)


def _phase_run(stop_after=None, **settings):
    arch, x, c, w = _problem()
    model = Model(arch, threads=2)
    model.weights = w
    ev = model.evaluator(x, c, 0.001)
    training = Params.from_phrases(dict({"TRAIN METHOD": "SGD", "EPOCHS": 3,
                                         "BATCH SIZE": 25}, **settings)).training
    steps = []
    log = _Log()
    context = TrainContext(model, ev, np.random.default_rng(5), log,
                           lambda: stop_after is not None and len(steps) >= stop_after, None)
    phase = MiniBatchPhase(training)
    phase.start(context, w.copy())
    while not phase.done:
        if context.stop():
            phase.interrupt()
            break
        phase.step()
        steps.append(1)
    return phase.finish(), model, log


def test_phase_epochs_trace_and_log():
    result, model, log = _phase_run()
    assert result.name == "sgd" and result.steps == 3 and result.stop_reason == "epochs"
    assert [e for e, _ in result.trace] == [1, 2, 3]
    assert result.evaluations["gradient"] == 3 * 4            # 120 cases: 4 batches of 25
    assert np.array_equal(model.weights, result.weights)
    assert sum(line.startswith("Epoch ") for line in log.lines) == 3
    assert METHODS["SGD"][-1] is MiniBatchPhase and METHODS["ADAM"][-1] is MiniBatchPhase


def test_ctrl_c_ends_the_phase_between_batches():
    result, model, _ = _phase_run(stop_after=6)
    assert result.interrupted and result.stop_reason == "interrupted"
    assert result.evaluations["gradient"] == 6
    assert [e for e, _ in result.trace] == [1, 2]             # the second epoch half done
    assert np.array_equal(model.weights, result.weights)


# ------------------------------------------------------------------ the device
@pytest.mark.parametrize("kind,nesterov", [(SGD, False), (SGD, True), (ADAM, False)])
def test_emulated_device_epoch_agrees_with_the_host(fake_runtime, kind, nesterov):
    """One epoch on the emulated device (gather, gradient, update and scatter replayed as a
    graph) against the host's epoch from the same order."""
    arch, x, c, w = _problem(n=100)
    rule = UpdateRule(kind, momentum=0.8, nesterov=nesterov)
    host = _epochs(HostBackend(arch, threads=1).evaluator(x, c, 0.01), rule, w, 16, 1, 4)
    device_ev = dbe.DeviceBackend(arch, DeviceParams()).evaluator(x, c, 0.01)
    graphs_before = fake_runtime.graph_launches
    device = _epochs(device_ev, rule, w, 16, 1, 4)
    # 6 steps: the first runs its launches, the second is captured, then replayed
    assert fake_runtime.graph_launches - graphs_before >= 5
    assert abs(device[0][0] - host[0][0]) <= 1e-5 * abs(host[0][0])
    # the penalty summed on the device from its weights, as the host sums it from its own
    penalty = device_ev.penalty.value(device[1])
    assert penalty > 0 and abs(device_ev.minibatches(rule, 16, [0.1] * 7, device[1]).penalty()
                               - penalty) <= 1e-12 * penalty
    change = host[1] - w
    assert np.linalg.norm(device[1] - host[1]) <= 1e-4 * np.linalg.norm(change)


def test_emulated_device_steps_send_nothing(fake_runtime, monkeypatch):
    """Between the epoch's start (its order) and its end, a step copies nothing from the host."""
    arch, x, c, w = _problem(n=64)
    ev = dbe.DeviceBackend(arch, DeviceParams()).evaluator(x, c, 0.0)
    runner = ev.minibatches(UpdateRule(SGD), 16, learning_rates(0.1, "CONSTANT", 1, 4), w)
    runner.start_epoch(np.arange(64)[::-1])
    sent = []
    original = fake_runtime.cuda.memcpy_htod
    monkeypatch.setattr(fake_runtime.cuda, "memcpy_htod",
                        lambda dst, src: (sent.append(src.nbytes), original(dst, src)))
    monkeypatch.setattr(fake_runtime, "upload", lambda array: pytest.fail("an upload per step"))
    while runner.steps_left:
        runner.step()
    assert sent == []
    likelihood, w_end = runner.end_epoch()
    assert math.isfinite(likelihood) and not np.array_equal(w_end, w)


@pytest.mark.cuda
@pytest.mark.parametrize("shift", [0, 3], ids=["plain", "shifted"])
def test_gpu_epochs_agree_with_the_host(shift):
    """SGD and Adam epochs on the GPU against the host's, the cases as they are and moved
    (AUGMENT SHIFT: minibatch_gather_shifted)."""
    usable, why = dbe.device_available()
    if not usable:
        pytest.skip(f"no CUDA device: {why}")
    arch, x, c, w = _shift_problem(n=300) if shift else _problem(n=300)
    for rule in (UpdateRule(SGD, momentum=0.9, nesterov=True), UpdateRule(ADAM)):
        host = _epochs(HostBackend(arch, threads=1).evaluator(x, c, 0.01), rule, w, 32, 2, 4,
                       shift=shift)
        device = _epochs(dbe.DeviceBackend(arch).evaluator(x, c, 0.01), rule, w, 32, 2, 4,
                         shift=shift)
        assert np.allclose(device[0], host[0], rtol=1e-4)
        assert np.linalg.norm(device[1] - host[1]) <= 1e-3 * np.linalg.norm(host[1] - w)


# ------------------------------------------------------------------ the control file
def _ctl(tmp_path, extra):
    text = ("MAKE IMAGE 8 8 1 3 90\nCONVOLUTIONAL LAYER 2 1 1 0 0 1 1\nFULLY CONNECTED LAYER 4\n"
            f"CUDA = NO\nANNEAL ITERS = 2\n{extra}\nTRAIN\n")
    path = tmp_path / "sgd.ctl"
    path.write_text(text)
    return path


def _train_entry(ctl, out, *options):
    """Run ``ctl`` into ``out``; the TRAIN's entry of its results.json."""
    result = CliRunner().invoke(main, ["run", str(ctl), "--out", str(out), *options])
    assert result.exit_code == 0, result.output
    runs = json.loads((out / "results.json").read_text())["runs"]
    return next(e for e in runs if e["command"] == "TRAIN")


def _validated_sgd_checks(tmp_path, extra=""):
    """The sgd phase's validation checks (phase, step, evaluations) of a small SGD run with
    cases held out, and its folder."""
    ctl = tmp_path / "val.ctl"
    ctl.write_text("MAKE IMAGE 8 8 1 3 120\nVALIDATION CASES 91 120\n"
                   "CONVOLUTIONAL LAYER 2 1 1 0 0 1 1\nFULLY CONNECTED LAYER 4\nCUDA = NO\n"
                   "ANNEAL ITERS = 1\nTRAIN METHOD = SGD\nEPOCHS = 3\nBATCH SIZE = 30\n"
                   f"{extra}RANDOM SEED = 2\nTRAIN\n")
    out = tmp_path / "run"
    train = _train_entry(ctl, out)
    checks = [(c["phase"], c["step"], c["evaluations"]) for c in train["validation"]]
    return [c for c in checks if c[0] == "sgd"], out


@pytest.mark.parametrize("line,message", [
    ("BATCH SIZE = 0", "BATCH SIZE must be at least 1"),
    ("LEARNING RATE = 0", "LEARNING RATE must be greater than 0"),
    ("LEARNING RATE = -0.1", "LEARNING RATE must be greater than 0"),
    ("MOMENTUM = 1", "MOMENTUM must be less than 1"),
    ("MOMENTUM = -0.5", "MOMENTUM must be at least 0"),
    ("EPOCHS = 0", "EPOCHS must be at least 1"),
    ("ADAM BETA2 = 1.0", "ADAM BETA2 must be less than 1"),
    ("ADAM EPSILON = 0", "ADAM EPSILON must be greater than 0"),
    ("LR STEP FACTOR = 1.5", "LR STEP FACTOR must be at most 1"),
    ("AUGMENT SHIFT = -1", "AUGMENT SHIFT must be at least 0"),
    ("AVERAGE EPOCHS = -2", "AVERAGE EPOCHS must be at least 0"),
    ("LR SCHEDULE = LINEAR", "LR SCHEDULE must be CONSTANT or STEP or COSINE or ONE CYCLE"),
    ("TRAIN METHOD = LBFGS", "TRAIN METHOD must be ANNEAL CG or SGD or ADAM or SGD CG or ADAM CG"),
])
def test_check_refuses_bad_values_at_their_line(tmp_path, line, message):
    ctl = _ctl(tmp_path, line)
    result = CliRunner().invoke(main, ["check", str(ctl)])
    assert result.exit_code == 2, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith(f"convnet: error: {ctl}:6: ") and message in last, last


def test_too_many_steps_is_one_error_line(tmp_path):
    ctl = _ctl(tmp_path, "TRAIN METHOD = SGD\nBATCH SIZE = 1\nEPOCHS = 2000000")
    result = CliRunner().invoke(main, ["run", str(ctl), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("convnet: error: ") and "180000000 steps" in last, last


def test_run_with_adam_records_its_phase(tmp_path):
    ctl = _ctl(tmp_path, "TRAIN METHOD = ADAM\nEPOCHS = 3\nBATCH SIZE = 32\n"
                         "LR SCHEDULE = ONE CYCLE\nRANDOM SEED = 9")
    out = tmp_path / "run"
    train = _train_entry(ctl, out)
    names = [p["name"] for p in train["phases"]]
    assert names == ["annealing", "adam"]
    adam = train["phases"][1]
    assert [p[0] for p in adam["trace"]] == [1, 2, 3] and adam["stop_reason"] == "epochs"
    log = (out / "CONVNET.LOG").read_text()
    assert "Epoch 3 criterion = " in log and "Adam: 3 epochs (6 mini-batch gradients)" in log


def test_epochs_are_validation_check_points(tmp_path):
    """With VALIDATION CASES each epoch's end is a check of the sgd phase."""
    checks, _ = _validated_sgd_checks(tmp_path)
    # one annealing evaluation, then 3 batches of 30 an epoch
    assert checks == [("sgd", 1, 1 + 3), ("sgd", 2, 1 + 6), ("sgd", 3, 1 + 9)]


# ------------------------------------------------------------------ AVERAGE EPOCHS
def test_average_epochs_ends_at_the_mean_of_the_last_epochs():
    """The constant schedule's steps do not depend on EPOCHS, so runs of 2, 3 and 4 epochs are
    the first epochs of one path: 4 epochs averaged over 3 end at the mean of epochs 2..4."""
    ends = [_phase_run(EPOCHS=n)[0].weights for n in (2, 3, 4)]
    result, model, log = _phase_run(EPOCHS=4, **{"AVERAGE EPOCHS": 3})
    mean = (ends[0] + ends[1] + ends[2]) / 3
    assert np.array_equal(result.weights, mean) and np.array_equal(model.weights, mean)
    assert not np.array_equal(result.weights, ends[2])
    assert result.criterion == model.evaluator(*_problem()[1:3], 0.001).criterion(mean)
    assert result.evaluations == {"gradient": 4 * 4, "criterion": 1}
    assert any("mean weights of epochs 2 to 4" in line for line in log.lines)
    assert any(line.startswith("Mean weights of epochs 2 to 4: criterion = ")
               for line in log.lines)


@pytest.mark.parametrize("average", [0, 1])
def test_average_of_one_epoch_or_none_is_the_last_epoch(average):
    plain, _, _ = _phase_run()
    result, _, log = _phase_run(**{"AVERAGE EPOCHS": average})
    assert np.array_equal(plain.weights, result.weights) and plain.criterion == result.criterion
    assert not any("mean weights" in line.lower() for line in log.lines)


def test_average_longer_than_the_run_takes_every_epoch():
    ends = [_phase_run(EPOCHS=n)[0].weights for n in (1, 2, 3)]
    result, _, _ = _phase_run(**{"AVERAGE EPOCHS": 50})
    assert np.array_equal(result.weights, (ends[0] + ends[1] + ends[2]) / 3)


def test_interrupted_run_averages_the_epochs_it_reached():
    ends = [_phase_run(EPOCHS=n)[0].weights for n in (2, 3)]
    result, _, _ = _phase_run(stop_after=10, EPOCHS=5, **{"AVERAGE EPOCHS": 4})
    # 4 batches an epoch: 10 steps end epochs 1 and 2, then Ctrl-C counts the half-done third
    half_third = _phase_run(stop_after=10, EPOCHS=5)[0].weights
    assert np.array_equal(result.weights, (ends[0] + half_third) / 2)


def test_averaged_weights_are_checked_again(tmp_path):
    checks, out = _validated_sgd_checks(tmp_path, "AVERAGE EPOCHS = 2\n")
    # the epochs' checks, then the mean weights' (one criterion evaluation more)
    assert checks == [("sgd", 1, 1 + 3), ("sgd", 2, 1 + 6), ("sgd", 3, 1 + 9), ("sgd", 3, 1 + 10)]
    assert "Mean weights of epochs 2 to 3: criterion = " in (out / "CONVNET.LOG").read_text()


@pytest.mark.parametrize("method,rule", [("SGD CG", "sgd"), ("ADAM CG", "adam")])
def test_minibatch_then_conjugate_gradients(tmp_path, method, rule):
    """SGD CG / ADAM CG: the mini-batch epochs, then refinement from where they ended."""
    ctl = _ctl(tmp_path, f"TRAIN METHOD = {method}\nEPOCHS = 2\nBATCH SIZE = 30\nMAXITERS = 4\n"
                         "RANDOM SEED = 4")
    train = _train_entry(ctl, tmp_path / "run")
    phases = train["phases"]
    assert [p["name"] for p in phases] == ["annealing", rule, "refinement"]
    assert phases[2]["steps"] <= 4
    # refinement starts from the mini-batch end: its criterion is no higher
    assert phases[2]["criterion"] <= phases[1]["criterion"]
    assert train["final_criterion"] == pytest.approx(phases[2]["criterion"], rel=1e-9)


# ------------------------------------------------------------------ AUGMENT SHIFT
SHIFT_ARCH = (["CONVOLUTIONAL LAYER 3 1 1 0 0 1 1", "FULLY CONNECTED LAYER 5"], 7, 9, 2, 4)


def _shift_problem(n=90, seed=8):
    arch = Architecture.from_lines(*SHIFT_ARCH)
    rng = np.random.default_rng(seed)
    return (arch, rng.uniform(-1, 1, (n, 2, 7, 9)), rng.integers(0, 4, n),
            rng.normal(0, 0.3, arch.n_weights))


def test_shift_cases_by_hand():
    x = np.arange(2 * 3 * 4, dtype=float).reshape(1, 2, 3, 4)
    down_left = shift_cases(x, [[1, -2]])[0, 1]          # band 1: rows 12..23
    assert down_left.tolist() == [[14, 15, 15, 15], [14, 15, 15, 15], [18, 19, 19, 19]]
    assert np.array_equal(shift_cases(x, [[0, 0]]), x)
    far = shift_cases(x, [[9, 9]])[0, 0]                  # beyond the edge: the corner repeated
    assert (far == x[0, 0, 0, 0]).all()
    both = shift_cases(np.concatenate([x, x]), [[0, 1], [-1, 0]])
    assert both[0, 0, 0].tolist() == [0, 0, 1, 2] and both[1, 0, :, 0].tolist() == [4, 8, 8]


def test_draw_shifts_draws_nothing_without_a_shift():
    rng, twin = np.random.default_rng(3), np.random.default_rng(3)
    assert draw_shifts(rng, 10, 0) is None and rng.random() == twin.random()
    moves = draw_shifts(rng, 500, 2)
    assert moves.shape == (500, 2) and moves.min() == -2 and moves.max() == 2


def test_host_epoch_with_no_moves_is_the_plain_epoch():
    """The shifted batches' evaluator gives subset's bits when nothing moves."""
    arch, x, c, w = _shift_problem()
    ev = HostBackend(arch, threads=2).evaluator(x, c, 0.01)
    runner = ev.minibatches(UpdateRule(SGD), 30, [0.1] * 3, w)
    plain = ev.minibatches(UpdateRule(SGD), 30, [0.1] * 3, w)
    order = np.random.default_rng(1).permutation(90)
    runner.start_epoch(order, np.zeros((90, 2), dtype=np.int64))
    plain.start_epoch(order)
    while plain.steps_left:
        runner.step()
        plain.step()
    assert runner.end_epoch()[0] == plain.end_epoch()[0]
    assert np.array_equal(runner.weights(), plain.weights())


def test_host_epoch_trains_on_the_moved_cases():
    """A step with moves is the step of a fresh evaluator on the moved cases."""
    arch, x, c, w = _shift_problem()
    ev = HostBackend(arch, threads=1).evaluator(x, c, 0.01)
    moves = draw_shifts(np.random.default_rng(2), 90, 2)
    order = np.arange(90)[::-1]
    runner = ev.minibatches(UpdateRule(SGD, momentum=0.0), 90, [0.5], w)
    runner.start_epoch(order, moves)
    runner.step()
    fresh = HostBackend(arch, threads=1).evaluator(shift_cases(x[order], moves), c[order], 0.01)
    _, grad = fresh.gradient(w)
    assert np.array_equal(runner.weights(), w - 0.5 * grad)


def test_emulated_device_shifted_epoch_agrees_with_the_host(fake_runtime):
    arch, x, c, w = _shift_problem()
    rule = UpdateRule(SGD, momentum=0.8, nesterov=True)
    host = _epochs(HostBackend(arch, threads=1).evaluator(x, c, 0.01), rule, w, 15, 2, 4,
                   shift=2)
    device = _epochs(dbe.DeviceBackend(arch, DeviceParams()).evaluator(x, c, 0.01), rule, w, 15,
                     2, 4, shift=2)
    plain = _epochs(HostBackend(arch, threads=1).evaluator(x, c, 0.01), rule, w, 15, 2, 4)
    assert np.allclose(device[0], host[0], rtol=1e-5)
    change = host[1] - w
    assert np.linalg.norm(device[1] - host[1]) <= 1e-4 * np.linalg.norm(change)
    assert np.linalg.norm(plain[1] - host[1]) > 1e-2 * np.linalg.norm(change)   # it moved them


def test_run_with_shifts_repeats_and_differs_from_one_without(tmp_path):
    def final(extra, name):
        ctl = _ctl(tmp_path, "TRAIN METHOD = SGD\nEPOCHS = 3\nBATCH SIZE = 30\n" + extra)
        out = tmp_path / name
        return _train_entry(ctl, out, "--seed", "4")["final_criterion"], out
    moved, out = final("AUGMENT SHIFT = 1", "a")
    assert final("AUGMENT SHIFT = 1", "b")[0] == moved
    assert final("AUGMENT SHIFT = 0", "c")[0] != moved
    assert "moved by up to 1 pixels" in (out / "CONVNET.LOG").read_text()
