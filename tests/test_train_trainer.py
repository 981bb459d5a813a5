"""TRAIN and TEST: the four phases, their log lines, reproducibility and Ctrl-C (in-process)."""

import math
import re

import numpy as np
import pytest

from convnet.architecture import Architecture
from convnet.errors import Interrupted
from convnet.params import Params
from convnet.train.phase import Phase, PhaseResult
from convnet.train.trainer import TestResult, TrainResult, test, train

PARAMS = {"ANNEAL ITERS": 20, "ANNEAL RANGE": 0.1, "MAXITERS": 60, "TOL": 0.00005, "WPEN": 0.0}


# ------------------------------------------------------------------ a tiny numpy model
class TinyEvaluator:
    """Softmax regression / one tanh layer, written out in numpy, with the team's criterion."""

    def __init__(self, model, inputs, classes, wpen):
        self.model, self.x = model, inputs.reshape(len(inputs), -1)
        self.y = np.asarray(classes, dtype=np.int64)
        self.wpen, self.n_cases = wpen, len(inputs)
        self.mask = model.arch.penalty_mask()

    def _forward(self, w):
        a = self.x
        acts = [a]
        for layer in self.model.arch.all_layers:
            wm = w[layer.weight_slice].reshape(layer.depth, layer.n_prior_weights)
            z = a @ wm[:, :-1].T + wm[:, -1]
            a = z if layer.is_output else np.tanh(z)
            acts.append(a)
        z = acts[-1] - acts[-1].max(axis=1, keepdims=True)
        p = np.exp(z)
        return p / p.sum(axis=1, keepdims=True), acts

    def _crit(self, w, p):
        n, k = p.shape
        return float(-np.sum(np.log(p[np.arange(n), self.y] + 1e-30)) / (n * k)
                     + self.wpen / w.size * np.sum(w * w * self.mask))

    def criterion(self, w):
        self.model.calls += 1
        self.model.hook()
        return self._crit(w, self._forward(w)[0])

    def gradient(self, w):
        self.model.calls += 1
        self.model.hook()
        p, acts = self._forward(w)
        n, k = p.shape
        delta = p.copy()
        delta[np.arange(n), self.y] -= 1.0
        delta /= n * k
        g = np.zeros_like(w)
        layers = self.model.arch.all_layers
        for i in range(len(layers) - 1, -1, -1):
            layer = layers[i]
            wm = w[layer.weight_slice].reshape(layer.depth, layer.n_prior_weights)
            gm = np.empty_like(wm)
            gm[:, :-1] = delta.T @ acts[i]
            gm[:, -1] = delta.sum(axis=0)
            g[layer.weight_slice] = gm.ravel()
            if i:
                delta = (delta @ wm[:, :-1]) * (1.0 - acts[i] ** 2)
        g += 2.0 * self.wpen / w.size * w * self.mask
        return self._crit(w, p), g

    def outputs(self, w):
        return self._forward(w)[0]


class TinyModel:
    def __init__(self, arch):
        self.arch = arch
        self._w = np.zeros(arch.n_weights)
        self.calls = 0
        self.hook = lambda: None

    @property
    def weights(self):
        return self._w

    @weights.setter
    def weights(self, value):
        self._w[:] = value

    def evaluator(self, inputs, classes, wpen=0.0):
        return TinyEvaluator(self, inputs, classes, wpen)


class Data:
    def __init__(self, inputs, classes, n_classes):
        self.inputs, self.classes, self.n_classes = inputs, classes, n_classes
        self.n_cases = len(classes)


class Log:
    def __init__(self):
        self.lines = []

    def write(self, text=""):
        self.lines.extend(text if isinstance(text, (list, tuple)) else str(text).split("\n"))

    def blank(self):
        self.lines.append("")


class Interrupt:
    """Stands in for the session's counter: a second press raises Interrupted, as the handler does."""

    def __init__(self):
        self.count = 0
        self.resets = 0

    def press(self):
        self.count += 1
        if self.count >= 2:
            raise Interrupted("run ended by the user (Ctrl-C)")

    def reset(self):
        self.count = 0
        self.resets += 1

    def stop_requested(self):
        return self.count > 0


def problem(hidden=True, n=120, seed=0):
    rng = np.random.default_rng(seed)
    lines = ["FULLY CONNECTED LAYER 5"] if hidden else []
    arch = Architecture.from_lines(lines, 3, 3, 1, 3)
    centers = rng.normal(size=(3, 9))
    classes = rng.integers(0, 3, n)
    inputs = (centers[classes] + 0.8 * rng.normal(size=(n, 9))).reshape(n, 1, 3, 3)
    return TinyModel(arch), Data(inputs, classes, 3)


def training(params):
    """TrainingParams from control-file phrases."""
    return Params.from_phrases(dict(params)).training


def run_train(model, data, params=PARAMS, seed=1, interrupt=None, progress=None, **kw):
    log = Log()
    res = train(model, data, training(params), log, interrupt or Interrupt(),
                np.random.default_rng(seed), progress=progress, **kw)
    return res, log


def anneal_of(res):
    return res.phase("annealing")


def refine_of(res):
    return res.phase("refinement")


# ------------------------------------------------------------------ the phases and the log
def test_train_phases_and_log():
    model, data = problem()
    seen = []
    res, log = run_train(model, data, progress=lambda *a, **k: seen.append((a, k)))
    assert isinstance(res, TrainResult)
    assert res.final_criterion <= anneal_of(res).criterion
    assert res.final_criterion < 0.25 * math.log(3) / 3
    assert res.confusion.sum() == data.n_cases == res.n_cases
    assert res.misclassification < 15.0
    assert not res.interrupted
    assert len(anneal_of(res).trace) == 20
    assert refine_of(res).trace[0] == (0, pytest.approx(anneal_of(res).criterion))
    crits = [c for _, c in refine_of(res).trace]
    assert all(b <= a for a, b in zip(crits, crits[1:]))
    assert res.final_criterion == pytest.approx(crits[-1])
    assert set(res.seconds) == {"annealing", "refinement", "final pass", "confusion", "total"}
    # the model holds the best weights
    ev = model.evaluator(data.inputs, data.classes, 0.0)
    assert ev.criterion(model.weights) == pytest.approx(res.final_criterion)
    text = "\n".join(log.lines)
    m = re.search(r"^Simulated annealing for starting weights is complete with mean negative log "
                  r"likelihood = (\d+\.\d{5})$", text, re.M)
    assert m and float(m.group(1)) == pytest.approx(anneal_of(res).criterion, abs=6e-6)
    m = re.search(r"^Optimization is complete with negative log likelihood = (\d+\.\d{5})", text, re.M)
    assert m and float(m.group(1)) == pytest.approx(res.final_criterion, abs=6e-6)
    iters = re.findall(r"^Iteration (\d+) criterion = (\S+) step = (\S+)$", text, re.M)
    assert [int(i) for i, _, _ in iters] == list(range(1, refine_of(res).steps + 1))
    assert float(iters[-1][1]) == pytest.approx(res.final_criterion, rel=1e-5)
    ann = re.findall(r"^Annealing evaluations (\d+)-(\d+): (.*)$", text, re.M)
    assert [(a, b) for a, b, _ in ann] == [("1", "10"), ("11", "20")]
    assert "\t1\t2\t3" in log.lines
    assert f"Total misclassification = {res.misclassification:.4f} percent" in log.lines
    assert "WARNING... User pressed ESCape during optimization" not in log.lines
    assert re.search(r"^Elapsed time: annealing \S+ s, refinement \S+ s, final pass \S+ s, "
                     r"confusion matrix \S+ s, total \S+ s$", text, re.M)
    phases = {a[0] for a, _ in seen}
    assert phases == {"Annealing", "Refinement"}
    assert seen[0][1]["total"] == 20


def test_misclassification_matches_model_predictions():
    model, data = problem(seed=4)
    res, _ = run_train(model, data)
    pred = model.evaluator(data.inputs, data.classes).outputs(model.weights).argmax(1)
    assert res.misclassification == pytest.approx(100 * np.mean(pred != data.classes))
    assert np.array_equal(res.confusion.sum(axis=1), np.bincount(data.classes, minlength=3))


def test_same_seed_same_result_other_seed_differs():
    m1, data = problem()
    r1, l1 = run_train(m1, data, seed=7)
    m2, _ = problem()
    r2, l2 = run_train(m2, data, seed=7)
    assert np.array_equal(m1.weights, m2.weights)
    assert r1.final_criterion == r2.final_criterion
    strip = [l for l in l1.lines if not l.startswith(("Elapsed", "Annealing:", "Refinement:"))]
    assert strip == [l for l in l2.lines if not l.startswith(("Elapsed", "Annealing:", "Refinement:"))]
    m3, _ = problem()
    run_train(m3, data, seed=8)
    assert not np.array_equal(m1.weights, m3.weights)


def test_weight_penalty_is_honoured():
    model, data = problem(seed=2)
    r0, _ = run_train(model, data, dict(PARAMS, WPEN=0.0))
    w0 = model.weights.copy()
    r1, log = run_train(model, data, dict(PARAMS, WPEN=1.0))
    mask = model.arch.penalty_mask()
    assert np.sum((model.weights * mask) ** 2) < np.sum((w0 * mask) ** 2)
    assert r1.final_criterion > r1.nll
    assert r1.final_criterion - r1.nll == pytest.approx(
        1.0 / model.arch.n_weights * np.sum((model.weights * mask) ** 2), rel=1e-9)
    assert any(l.startswith("   (mean negative log likelihood") for l in log.lines)
    assert r0.final_criterion == pytest.approx(r0.nll, rel=1e-12)


def test_no_hidden_layer_and_zero_iterations():
    model, data = problem(hidden=False)
    res, log = run_train(model, data, dict(PARAMS, MAXITERS=0, **{"ANNEAL ITERS": 0}))
    assert refine_of(res).steps == 0 and len(anneal_of(res).trace) == 1
    assert res.final_criterion == pytest.approx(anneal_of(res).criterion)
    assert not any(l.startswith("Iteration ") for l in log.lines)


def test_refinement_stops_on_tol():
    model, data = problem(hidden=False)
    res, log = run_train(model, data, dict(PARAMS, MAXITERS=100000, TOL=1e-3, WPEN=0.1))
    assert refine_of(res).stop_reason == "tol" and refine_of(res).steps < 100000
    assert any("ended because the relative improvement fell below TOL" in l for l in log.lines)


# ------------------------------------------------------------------ Ctrl-C
def test_ctrl_c_during_annealing_moves_on_to_refinement():
    model, data = problem()
    intr = Interrupt()
    state = {"n": 0}

    def hook():
        state["n"] += 1
        if state["n"] == 5:
            intr.press()

    model.hook = hook
    res, log = run_train(model, data, dict(PARAMS, **{"ANNEAL ITERS": 50}), interrupt=intr)
    assert anneal_of(res).interrupted and not refine_of(res).interrupted
    assert len(anneal_of(res).trace) == 5
    assert intr.resets >= 1
    assert refine_of(res).steps > 5 and res.final_criterion < anneal_of(res).criterion
    assert "WARNING... User pressed ESCape during optimization" not in log.lines
    assert any(l.startswith("Annealing ended by the user") for l in log.lines)
    assert res.confusion.sum() == data.n_cases


def test_ctrl_c_during_refinement_keeps_best_and_warns():
    model, data = problem()
    intr = Interrupt()
    pressed = {}

    def progress(phase, it, cur, best, total=None):
        if phase == "Refinement" and it == 4:
            intr.press()
            pressed["at"] = cur

    res, log = run_train(model, data, dict(PARAMS, MAXITERS=500), interrupt=intr, progress=progress)
    assert refine_of(res).interrupted and not anneal_of(res).interrupted and res.interrupted
    assert refine_of(res).steps == 4 and refine_of(res).stop_reason == "interrupt"
    assert res.final_criterion == pytest.approx(pressed["at"])
    i = log.lines.index("WARNING... User pressed ESCape during optimization")
    assert log.lines[i + 1] == "Results are incomplete and may be seriously incorrect"
    assert log.lines[i + 3].startswith("Optimization is complete with negative log likelihood = ")
    ev = model.evaluator(data.inputs, data.classes, 0.0)
    assert ev.criterion(model.weights) == pytest.approx(res.final_criterion)
    assert res.confusion.sum() == data.n_cases


def test_ctrl_c_inside_a_line_search():
    """A press noticed between two evaluations of one line search still ends cleanly."""
    model, data = problem()
    intr = Interrupt()
    state = {"n": 0}

    def hook():
        state["n"] += 1
        if state["n"] == 20 + 1 + 3 + 1:        # annealing, start gradient, then mid-iteration
            intr.press()

    model.hook = hook
    res, log = run_train(model, data, dict(PARAMS, MAXITERS=500), interrupt=intr)
    assert refine_of(res).interrupted and refine_of(res).steps <= 4
    assert res.final_criterion <= anneal_of(res).criterion
    assert "Results are incomplete and may be seriously incorrect" in log.lines


def test_second_press_ends_run_with_best_weights_in_model():
    model, data = problem()
    intr = Interrupt()
    best = {}

    def progress(phase, it, cur, b, total=None):
        if phase == "Refinement":
            best["crit"] = cur
            if it == 3:
                intr.press()
                intr.press()          # the second press raises, as the session's handler does

    with pytest.raises(Interrupted):
        run_train(model, data, dict(PARAMS, MAXITERS=500), interrupt=intr, progress=progress)
    ev = model.evaluator(data.inputs, data.classes, 0.0)
    assert ev.criterion(model.weights) == pytest.approx(best["crit"])


def test_second_press_during_annealing_leaves_best_annealing_weights():
    model, data = problem()
    intr = Interrupt()
    state = {"n": 0, "best": math.inf}
    ev_plain = model.evaluator(data.inputs, data.classes, 0.0)

    def hook():
        state["n"] += 1
        if state["n"] == 8:
            intr.press()
            intr.press()

    model.hook = hook
    with pytest.raises(Interrupted):
        run_train(model, data, interrupt=intr)
    model.hook = lambda: None
    # 7 evaluations finished; the model holds the best of them
    assert np.any(model.weights != 0)


# ------------------------------------------------------------------ TEST
def test_test_reports_plain_likelihood_and_confusion():
    model, data = problem(seed=5)
    run_train(model, data, dict(PARAMS, WPEN=0.5))
    _, other = problem(seed=6)
    log = Log()
    res = test(model, other, log)
    assert isinstance(res, TestResult)
    ev = model.evaluator(other.inputs, other.classes, 0.0)
    assert res.criterion == pytest.approx(ev.criterion(model.weights))
    assert res.confusion.sum() == other.n_cases == res.n_cases
    pred = ev.outputs(model.weights).argmax(1)
    assert res.misclassification == pytest.approx(100 * np.mean(pred != other.classes))
    assert log.lines[0] == (f"Test of {other.n_cases} cases: mean negative log likelihood = "
                            f"{res.criterion:.5f}")
    assert f"Total misclassification = {res.misclassification:.4f} percent" in log.lines


def test_train_and_test_on_the_host_model():
    """The real host path on a tiny convolutional net (MAKE IMAGE style data)."""
    pytest.importorskip("convnet.model")
    from convnet.model import Model
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 2 1 1 1 1 1 1", "POOLED MAX LAYER 2 2 2 2",
                                    "FULLY CONNECTED LAYER 3"], 6, 6, 1, 3)
    rng = np.random.default_rng(0)
    data = Data(rng.uniform(size=(40, 1, 6, 6)), rng.integers(0, 3, 40), 3)
    model = Model(arch, threads=1)
    log = Log()
    res = train(model, data, training(dict(PARAMS, MAXITERS=30, WPEN=0.001)), log, Interrupt(),
                np.random.default_rng(2))
    assert res.final_criterion < anneal_of(res).criterion
    assert res.final_criterion == pytest.approx(model.criterion(data.inputs, data.classes, 0.001))
    t = test(model, data, Log())
    assert t.confusion.sum() == 40
    assert np.array_equal(t.confusion, res.confusion)


# ------------------------------------------------------------------ another training method
class GradientSteps(Phase):
    """A phase of fixed-size gradient steps, to show that a method is any list of phases."""

    name, title, unit, label = "descent", "Gradient steps", "step", "Descent"

    def __init__(self, training):
        self.limit = 5
        self.taken = 0

    @property
    def done(self):
        return self.taken >= self.limit or self.stopped

    def start(self, context, weights):
        self.context, self.stopped = context, False
        self.w = np.zeros(context.arch.n_weights) if weights is None else weights.copy()
        self.trace = [(0, context.evaluator.criterion(self.w))]

    def start_trace(self):
        return list(self.trace)

    def interrupt(self):
        self.stopped = True

    def step(self):
        f, g = self.context.evaluator.gradient(self.w)
        self.w = self.w - 0.5 * g
        self.taken += 1
        f = self.context.evaluator.criterion(self.w)
        self.trace.append((self.taken, f))
        self.context.model.weights = self.w
        self.context.report(self, self.taken, f, f)

    def finish(self):
        return PhaseResult(self.name, self.title, self.unit, trace=self.trace,
                           criterion=self.trace[-1][1], steps=self.taken, limit=self.limit,
                           interrupted=self.stopped, stop_reason="limit", stop_words="5 steps",
                           evaluations={"criterion": self.taken + 1, "gradient": self.taken},
                           weights=self.w)

    def log_result(self, log, result):
        log.write(f"Descent: {result.steps} steps")


def test_a_method_of_other_phases_runs_records_and_draws(tmp_path):
    """The driver, the results record, the log's times and the plots take any phases."""
    from convnet.display.figures import criterion_curve_later
    from convnet.logs.results import train_entry
    from convnet.train.anneal import AnnealingPhase
    model, data = problem()
    seen = []
    res, log = run_train(model, data, progress=lambda *a, **k: seen.append(a[0]),
                         method=(AnnealingPhase, GradientSteps))
    assert [p.name for p in res.phases] == ["annealing", "descent"]
    descent = res.phase("descent")
    assert descent.trace[0] == (0, pytest.approx(anneal_of(res).criterion))
    assert descent.steps == 5 and seen.count("Descent") == 5
    assert res.final_criterion == pytest.approx(descent.criterion)
    assert res.n_criterion_evals == 20 + 6 + 1 and res.n_gradient_evals == 5
    assert set(res.seconds) == {"annealing", "descent", "final pass", "confusion", "total"}
    assert "Descent: 5 steps" in log.lines
    assert any(re.match(r"Elapsed time: annealing \S+ s, descent \S+ s, final pass", line)
               for line in log.lines)
    entry = train_entry(res.phases, res.final_criterion, res.nll, res.confusion, 0.0, 1,
                        res.seconds)
    assert [p["name"] for p in entry["phases"]] == ["annealing", "descent"]
    assert entry["phases"][1]["trace"][-1] == [5, descent.criterion]
    assert (tmp_path / "c.png").exists() is False
    criterion_curve_later(res, str(tmp_path / "c.png")).write()
    assert (tmp_path / "c.png").stat().st_size > 0
