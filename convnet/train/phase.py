"""A training method is a sequence of phases; a phase takes steps.

The protocol (in the manner of an optimizer with one ``step`` method): a phase is started on the
weights the previous phase ended with, then asked for one step at a time until it is done; the
driver (trainer.py) owns that loop, the Ctrl-C test between steps, the timing, the progress
reports and the log line of each phase's result. What a phase does in one step, and how its log
lines read, are the phase's own.

A phase (see :class:`Phase`) has

    name, title, unit, chart     what results.json, the plots and the pages call it: its key
                                 ("annealing"), its heading, what one step is ("evaluation"), and
                                 how its trace is drawn ("scatter": each step with the best so far,
                                 "line": a falling curve)
    label, limit, progress_total the progress line's word for it, its step limit as set, and the
                                 limit the progress line shows
    start(context, weights)      begin from ``weights`` (None for the first phase)
    done                         True once it has ended (its limit, convergence, an interruption)
    may_stop()                   whether a Ctrl-C may end it before the next step
    interrupt()                  end it at once with the best weights so far
    start_trace()                the trace's points known at the start (e.g. step 0)
    step()                       one step; a step that is a check point (an iteration, an
                                 epoch) tells ``context.validate(self, step)`` when it is done
    evaluations_made()           criterion and gradient evaluations so far
    finish() -> PhaseResult      its result (the model holds its best weights by then)
    log_result(log, result)      its result's log lines

A new training method is a new tuple of phases (as trainer.BOOK_METHOD); results.json, the log
reader, the plots and the pages read any phases by their PhaseResult fields.
"""

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

SCATTER, LINE = "scatter", "line"


@dataclass
class PhaseResult:
    """What one phase of a TRAIN produced.

    name / title / unit / chart: see the module notes; trace: (step, criterion) of every step
    (a phase that starts from a known point has step 0 first); criterion: the phase's result
    (its best criterion); steps: steps taken; limit: the step limit as set; interrupted: a Ctrl-C
    ended it; stop_reason: why it ended (a short key) and stop_words: the same for people;
    seconds: elapsed; evaluations: {"criterion": n, "gradient": n} it made; figures: any other
    numbers of the phase, by name (e.g. the refinement's step lengths, one per trace point);
    weights: the best weights (not written to results.json)."""

    name: str
    title: str
    unit: str
    chart: str = LINE
    trace: List[Tuple[int, float]] = field(default_factory=list)
    criterion: Optional[float] = None
    steps: int = 0
    limit: Optional[int] = None
    interrupted: bool = False
    stop_reason: str = ""
    stop_words: str = ""
    seconds: Optional[float] = None
    evaluations: Dict[str, int] = field(default_factory=dict)
    figures: Dict[str, list] = field(default_factory=dict)
    weights: Optional[np.ndarray] = None


class Phase:
    """The base of a phase (see the module notes); subclasses set the names and implement
    start, step and finish."""

    name = title = unit = label = ""
    chart = LINE
    limit = None

    @property
    def progress_total(self):
        return self.limit

    @property
    def done(self):
        raise NotImplementedError

    def may_stop(self):
        return True

    def start(self, context, weights):
        raise NotImplementedError

    def start_trace(self):
        """(step, criterion) points the trace starts with, known once started (none here)."""
        return []

    def step(self):
        raise NotImplementedError

    def interrupt(self):
        raise NotImplementedError

    def finish(self):
        raise NotImplementedError

    def log_result(self, log, result):
        """The phase's result lines (none by default)."""

    def evaluations_made(self):
        """Criterion and gradient evaluations made so far (for validation checks' records)."""
        return 0


def run_steps(stepper, stop=None, end=None):
    """Step ``stepper`` (anything with done, may_stop(), interrupt() and step()) until it is done;
    ``stop()``, asked before each step the stepper may be stopped at, True interrupts it;
    ``end()``, asked before each step, True leaves it as it is (an early stop)."""
    while not stepper.done and not (end is not None and end()):
        if stop is not None and stepper.may_stop() and stop():
            stepper.interrupt()
            break
        stepper.step()


def log_interruption(log):
    """The book's warning after an optimization that Ctrl-C ended (the log reader looks for it)."""
    log.write("WARNING... User pressed ESCape during optimization")
    log.write("Results are incomplete and may be seriously incorrect")


def format_criterion(value):
    """A criterion in the book's 5 decimals (tiny values would all read 0.00000: add exponent
    form)."""
    if math.isfinite(value) and 0 < abs(value) < 0.001:
        return f"{value:.5f} ({value:.4e})"
    return f"{value:.5f}"
