"""Validation checks during TRAIN: held-out cases, the best weights, early stop, time to a target.

VALIDATION CASES holds cases of the data out of training (Dataset.split_held_out): the training
evaluator is bound to the other cases only, so nothing a phase computes can depend on a held-out
case, and a second evaluator of the same model (host, device or several GPUs alike) is bound to
the held-out cases. A check evaluates the model's current weights (the best so far of the running
phase) on them: the likelihood criterion (no weight penalty, as TEST) and the misclassification.

When checks happen: a phase tells the trainer's context each step it completes that is a check
point (the refinement's iterations; a method that counts epochs, its epochs), and a check runs
every VALIDATION INTERVAL such steps; the trainer adds one at the end of every phase (annealing
included), unless the phase's last step was just checked.

With TARGET ERROR and no held-out cases the checks measure the training cases' misclassification
instead (one evaluation of outputs each), so a time to accuracy is known either way. KEEP BEST
and EARLY STOP need held-out cases (the session refuses them otherwise).

A check's record (:class:`Check`) holds the phase and step, the seconds since TRAIN began, the
training evaluations made by then (criterion and gradient), the criterion and the
misclassification percent; :meth:`Validation.summary` gives the best check, whether the best
weights were restored and the time to the target, for results.json.
"""

import time
from dataclasses import asdict, dataclass
import numpy as np

from .confusion import confusion_matrix, mean_nll, misclassification
from .phase import format_criterion

VALIDATION_CASES, TRAINING_CASES = "validation", "training"


def split_cases(dataset):
    """(training cases, held-out cases or None): data without held-out cases (or anything with
    inputs and classes) is trained on whole."""
    if getattr(dataset, "held_out", None) is None:
        return dataset, None
    return dataset.split_held_out()


@dataclass
class Check:
    """One validation check (see the module notes); ``error`` is percent misclassified."""

    phase: str
    step: int
    seconds: float
    evaluations: int
    criterion: float
    error: float

    def entry(self):
        """The check as results data."""
        return dict(asdict(self), seconds=round(float(self.seconds), 6))


class Validation:
    """The checks of one TRAIN on ``cases`` (a Dataset: the held-out cases, or the training cases
    when only TARGET ERROR asks for checks); ``settings``: params.ValidationParams."""

    def __init__(self, model, cases, settings, log, kind=VALIDATION_CASES):
        self.model, self.settings, self.log, self.kind = model, settings, log, kind
        self.classes = np.asarray(cases.classes, dtype=np.int64)
        self.evaluator = model.evaluator(cases.inputs, cases.classes, 0.0)
        self.n_cases = int(self.classes.size)
        self.checks = []
        self.best = self.best_weights = None
        self.since_best = 0             # checks in a row without a lower error than the best
        self.reached = None             # the first check at or below TARGET ERROR
        self.kept_best = False
        self.seconds = 0.0              # spent in checks

    @classmethod
    def for_training(cls, model, training_cases, held_out_cases, settings, log):
        """The checks a TRAIN makes, or None when nothing asks for them (no held-out cases and
        no TARGET ERROR)."""
        if held_out_cases is not None:
            validation = cls(model, held_out_cases, settings, log)
        elif settings.target_error is not None:
            validation = cls(model, training_cases, settings, log, TRAINING_CASES)
        else:
            return None
        validation.log_start()
        return validation

    def log_start(self):
        what = ("held-out validation cases" if self.kind == VALIDATION_CASES
                else "training cases (no cases held out)")
        target = self.settings.target_error
        self.log.write(f"Validation: checks on {self.n_cases} {what} every "
                       f"{self.settings.interval} step(s) and at the end of each phase"
                       + ("" if target is None else f"; target error {target:g} %"))

    def due(self, step):
        """Whether step ``step`` of a phase is a check point."""
        return step > 0 and step % self.settings.interval == 0

    def check(self, phase, step, seconds, evaluations):
        """Check the model's current weights; returns the Check (logged and kept)."""
        t0 = time.perf_counter()
        weights = self.model.weights
        outputs = self.evaluator.outputs(weights)
        matrix = confusion_matrix(outputs, self.classes, self.model.arch.n_classes)
        made = Check(phase, int(step), float(seconds), int(evaluations),
                     mean_nll(outputs, self.classes), misclassification(matrix))
        self.checks.append(made)
        self._follow_best(made, weights)
        self.log.write(f"Validation check ({phase} {step}): criterion "
                       f"{format_criterion(made.criterion)}, {made.error:.4f} % misclassified"
                       f"{' (best so far)' if self.best is made else ''}")
        self._follow_target(made)
        self.seconds += time.perf_counter() - t0
        return made

    def _follow_best(self, made, weights):
        if self.best is None or made.error < self.best.error:
            self.best, self.since_best = made, 0
            if self.settings.keep_best == "YES":
                self.best_weights = np.array(weights, dtype=np.float64)
        else:
            self.since_best += 1

    def _follow_target(self, made):
        target = self.settings.target_error
        if target is not None and self.reached is None and made.error <= target:
            self.reached = made
            self.log.write(f"Target error {target:g} % reached at {made.phase} {made.step}: "
                           f"{made.error:.4f} % after {made.seconds:.2f} s and {made.evaluations} "
                           "evaluations")

    @property
    def stop_early(self):
        """EARLY STOP checks in a row have not lowered the error."""
        patience = self.settings.early_stop
        return patience > 0 and self.kind == VALIDATION_CASES and self.since_best >= patience

    def early_stop_words(self):
        return (f"{self.settings.early_stop} validation checks without a lower error "
                "(EARLY STOP)")

    def finish(self):
        """The end of the phases: the best weights restored (KEEP BEST), the closing lines."""
        if self.best_weights is not None:
            self.model.weights = self.best_weights
            self.kept_best = True
            self.log.write(f"Best weights kept: those of the validation check at "
                           f"{self.best.phase} {self.best.step} ({self.best.error:.4f} % "
                           "misclassified)")
        target = self.settings.target_error
        if target is not None and self.reached is None:
            best = "" if self.best is None else f" (lowest {self.best.error:.4f} %)"
            self.log.write(f"Target error {target:g} % not reached{best}")

    def summary(self):
        """The checks' outcome as results data (see the module notes)."""
        target = self.settings.target_error
        reached = self.reached
        return {
            "cases": self.kind, "n_cases": self.n_cases, "interval": self.settings.interval,
            "best": None if self.best is None else self.best.entry(),
            "final": self.checks[-1].entry() if self.checks else None,
            "kept_best": self.kept_best, "seconds": round(self.seconds, 6),
            "target": None if target is None else {
                "error": target, "reached": reached is not None,
                "phase": getattr(reached, "phase", None), "step": getattr(reached, "step", None),
                "seconds": None if reached is None else round(reached.seconds, 6),
                "evaluations": getattr(reached, "evaluations", None),
                "achieved": getattr(reached, "error", None)},
        }

