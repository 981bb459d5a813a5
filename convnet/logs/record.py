"""The session's record of what it does, kept as results.json (see results.py) while it runs.

A ``SessionRecord`` holds the results data of one session and replaces results.json whenever
something is finished (a TRAIN, a TEST, a picture, the end of the session) and, while a TRAIN runs,
at most every ``RESULTS_INTERVAL`` seconds. It also drives whatever shows the results live (the
HTML report): ``on_change(data, final)`` is called after each write, and it throttles itself.

Writing never costs training more than a small share of its time: a throttled write is skipped
unless ``COST_RATIO`` times the time the last write took has passed since it.
"""

import datetime
import os
import time
from dataclasses import dataclass
from typing import Any

from .._version import __version__
from ..errors import ConvnetError
from .results import RESULTS_FORMAT, RESULTS_NAME, RESULTS_VERSION, train_entry, write_results

RESULTS_INTERVAL = 5.0          # seconds between throttled rewrites of results.json
COST_RATIO = 50.0               # ... and at least this many times the last write's duration


# What an artifact is, and the results.json list it goes to.
PICTURE, MODEL, PREDICTIONS = "picture", "model", "predictions"


@dataclass(frozen=True)
class Artifact:
    """A file a command made or read, as a command hands it up to be recorded.

    category: PICTURE (what: the command, or "criterion curve of TRAIN"), MODEL (what: "saved"
    or "loaded"; arch: the model's architecture) or PREDICTIONS (a CLASSIFY's CSV; what: how
    many images)."""

    path: str
    what: str
    category: str = PICTURE
    arch: Any = None


def _now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def architecture_data(arch):
    """An architecture as results data: input, classes, one entry per layer, the report."""
    layers = []
    for layer in list(arch.layers) + [arch.output]:
        layers.append({"index": layer.index + 1, "kind": str(layer.kind),
                       "line": None if layer.is_output else layer.spec.control_line(),
                       "output": bool(layer.is_output), "height": layer.height,
                       "width": layer.width, "depth": layer.depth, "weights": layer.n_weights})
    return {"rows": arch.rows, "cols": arch.cols, "bands": arch.bands, "classes": arch.n_classes,
            "total_weights": arch.n_weights, "layers": layers, "report": list(arch.report())}


def _plain(value):
    """A parameter value as JSON can hold it."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


class Throttle:
    """Says when a throttled action may run again: ``interval`` seconds after the last one, and
    no sooner than ``ratio`` times that action's own duration."""

    def __init__(self, interval, ratio=COST_RATIO, clock=time.monotonic):
        self.interval, self.ratio, self.clock = interval, ratio, clock
        self.last_end = None
        self.last_cost = 0.0
        self.total = 0.0                   # seconds spent in the action altogether

    def due(self):
        if self.last_end is None:
            return True
        return self.clock() - self.last_end >= max(self.interval, self.ratio * self.last_cost)

    def timed(self, action, *args):
        start = self.clock()
        try:
            return action(*args)
        finally:
            self.last_end = self.clock()
            self.last_cost = self.last_end - start
            self.total += self.last_cost


class SessionRecord:
    """The results of one session as they happen; ``out`` None records nothing on disk."""

    def __init__(self, out, session_info, on_change=None):
        self.path = None if out is None else os.path.join(out, RESULTS_NAME)
        self.on_change = on_change
        self.throttle = Throttle(RESULTS_INTERVAL)
        self.data = {
            "format": RESULTS_FORMAT, "format_version": RESULTS_VERSION,
            "convnet_version": __version__, "status": "running", "error": None,
            "started": _now(), "updated": None, "finished": None,
            "session": dict(session_info), "runs": [], "pictures": [], "models": [],
            "cuda_log": None, "writing_seconds": {"results": 0.0, "report": 0.0},
        }

    # ------------------------------------------------------------------ writing
    def write(self, force=True, final=False):
        """Replace results.json (``force`` False: only when the throttle allows)."""
        if self.path is None or not (force or self.throttle.due()):
            return
        try:
            self._write(final)
        except OSError as e:         # a full disk, a folder gone: the run's one error line
            name = e.filename or self.path
            raise ConvnetError(f"cannot write {name}: {e.strerror or e}") from None

    def _write(self, final):
        self.data["updated"] = _now()
        if final and self.on_change is not None:      # first, so that its time is in the file
            self.on_change(self.data, final)
        self.data["writing_seconds"]["results"] = round(self.throttle.total, 6)
        self.throttle.timed(write_results, self.path, self.data)
        if not final and self.on_change is not None:
            self.on_change(self.data, final)

    # ------------------------------------------------------------------ the session
    def start(self, control_files):
        self.data["session"]["control_files"] = list(control_files)
        self.write()

    def sweep_run(self, control_file, combination, combinations, values):
        """The session runs one combination of a sweep file: which, and its values."""
        self.data["session"]["sweep"] = {"control_file": control_file,
                                         "combination": combination,
                                         "combinations": combinations, "values": dict(values)}

    def finish(self, status, error=None):
        """The session ended: 'done', 'interrupted' or 'error' (``error`` an exception, whose
        ``file`` and ``line`` are kept when it has them). Runs still running take the status."""
        self.data["status"] = status
        self.data["finished"] = _now()
        if error is not None:
            self.data["error"] = {"text": str(error),
                                  "message": getattr(error, "message", None) or str(error)
                                  or type(error).__name__,
                                  "file": getattr(error, "file", None),
                                  "line": getattr(error, "line", None)}
        for run in self.data["runs"]:
            if run["status"] == "running":
                run["status"] = status if status != "done" else "interrupted"
                if error is not None:
                    run["error"] = str(error)
        try:
            self.write(final=True)
        except (OSError, ConvnetError) as e:
            if error is not None:        # the error that ended the session is the one to report
                return
            if isinstance(e, ConvnetError):
                raise
            raise ConvnetError(f"cannot write {self.path}: {e.strerror or e}") from None

    # ------------------------------------------------------------------ TRAIN and TEST
    def begin(self, command, cmd, arch, params, device, threads, class_names=None):
        """A TRAIN or TEST (``command``) starts; returns its entry in the data (with the
        data's class names when they have names)."""
        run = {"command": command, "index": len(self.data["runs"]) + 1, "control_file": cmd.file,
               "line": cmd.line, "status": "running", "error": None, "device": device,
               "threads": threads, "architecture": architecture_data(arch),
               "parameters": {k: _plain(v) for k, v in params.items()},
               "started": _now()}
        if class_names:
            run["class_names"] = list(class_names)
        if command == "TRAIN":
            run["phases"] = []
        self.data["runs"].append(run)
        self.write()
        return run

    def observer(self, run, also=None):
        """A progress callback (the trainer's ``progress``) that records each step of the phases
        of ``run``, rewrites the files now and then, and passes the call on to ``also`` (the
        terminal's progress line) when given. The trainer tells it of each phase as it starts
        (``start_phase``)."""
        return _PhaseObserver(self, run, also)

    def end_train(self, run, result):
        """A TRAIN finished: its full results replace what was gathered on the way."""
        run.update(train_entry(result.phases, result.final_criterion, result.nll,
                               result.confusion.tolist(), result.misclassification,
                               result.n_cases, result.seconds, result.n_criterion_evals,
                               result.validation, result.validation_summary))
        run.update({"status": "interrupted" if result.interrupted else "done",
                    "finished": _now()})
        if result.warnings:
            run["warnings"] = list(result.warnings)
        self.write()

    def end_test(self, run, result, most_wrong=None):
        """A TEST finished; ``most_wrong``: the entries of its worst cases (with their
        pictures' files), kept as they are."""
        run.update({"status": "done", "criterion": result.criterion,
                    "final_criterion": result.criterion, "confusion": result.confusion.tolist(),
                    "misclassification": result.misclassification, "n_cases": result.n_cases,
                    "seconds": {"test": round(result.seconds, 6), "total": round(result.seconds, 6)},
                    "finished": _now()})
        if most_wrong is not None:
            run["most_wrong"] = list(most_wrong)
        self.write()

    # ------------------------------------------------------------------ files the run made
    def artifact(self, made, cmd=None, out="."):
        """A file the run made or read (an :class:`Artifact`): a picture goes to results.json's
        "pictures" (one entry per file, the latest kept), a model saved or loaded to "models"."""
        where = {"control_file": getattr(cmd, "file", None), "line": getattr(cmd, "line", None)}
        file = _relative(made.path, out)
        if made.category == PICTURE:
            entry = {"file": file, "what": made.what, **where,
                     "run": len(self.data["runs"]) or None}
            self.data["pictures"] = [p for p in self.data["pictures"] if p["file"] != file]
            self.data["pictures"].append(entry)
        elif made.category == MODEL:
            self.data["models"].append({"action": made.what, "file": file, **where,
                                        "architecture": architecture_data(made.arch)})
        elif made.category == PREDICTIONS:        # only a run that classifies has the list
            self.data.setdefault("predictions", []).append({"file": file, "what": made.what,
                                                            **where})
        else:
            raise ValueError(f"not an artifact category: {made.category!r}")
        self.write()

    def cuda_log(self, path, out="."):
        self.data["cuda_log"] = _relative(path, out)


class _PhaseObserver:
    """The live record of a TRAIN's phases (see SessionRecord.observer)."""

    def __init__(self, record, run, also):
        self.record, self.run, self.also = record, run, also
        self.entry = self.label = None

    def start_phase(self, phase):
        """A phase starts: its entry, with the points its trace starts with."""
        self.label = phase.label
        self._open({"name": phase.name, "title": phase.title, "unit": phase.unit,
                    "chart": phase.chart, "limit": phase.limit,
                    "trace": [[int(s), c] for s, c in phase.start_trace()]})

    def validated(self, check):
        """A validation check of the TRAIN (its results entry) is made."""
        self.run.setdefault("validation", []).append(check)
        self.record.write(force=False)

    def _open(self, entry):
        self.entry = dict(entry, criterion=None, steps=0)
        self.run["phases"].append(self.entry)

    def __call__(self, label, step, current=None, best=None, total=None):
        if label != self.label:            # a step of a phase not announced: named by its label
            self.label = label
            self._open({"name": str(label).lower(), "trace": [], "limit": total})
        self.entry["trace"].append([int(step), current])
        self.entry["steps"] = int(step)
        self.entry["criterion"] = best
        self.record.write(force=False)
        if self.also is not None:
            self.also(label, step, current, best, total=total)


def _relative(path, out):
    """A path as seen from the run's folder when it lies inside it, else absolute."""
    path, out = os.path.abspath(path), os.path.abspath(out)
    try:
        rel = os.path.relpath(path, out)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel
