"""results.json: a run's results as versioned JSON beside its CONVNET.LOG (docs/RESULTS_FORMAT.md).

This is what programs read back: ``convnet log summary|compare``, ``convnet batch`` and the HTML
reports. The English log stays the record for people; the log reader (reader.py) is used only for a
log that has no results.json beside it.

The file is always replaced whole (a temporary file in the same folder, then a rename), so a reader
never sees half of one. Numbers that are not finite are written as null (JSON has no infinity).
"""

import json
import math
import os

from ..atomic import replace_file
from ..errors import ConvnetError
from .reader import BOOK_PHASES, LogFile, LogPhase, Run, compact_layers, read_log

RESULTS_FORMAT = "convnet results"
RESULTS_VERSION = 3
RESULTS_NAME = "results.json"
KNOWN_VERSIONS = (1, 2, RESULTS_VERSION)    # older versions are converted on reading
STATUSES = ("running", "done", "interrupted", "error")


def finite_or_none(value):
    """A JSON-safe number: floats that are not finite become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_safe(value):
    """``value`` with every non-finite float replaced by None, tuples made lists."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return finite_or_none(value)


def write_atomic(path, text):
    """Replace ``path`` by ``text`` (UTF-8) at once (OSError when it cannot be written)."""
    replace_file(path, text.encode("utf-8"))


def write_results(path, data):
    """Write results data (a dict in the documented layout) to ``path`` atomically."""
    write_atomic(path, json.dumps(json_safe(data), allow_nan=False) + "\n")


def read_results(path):
    """Read and check a results.json; a ConvnetError names what is wrong."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise ConvnetError(f"cannot read the results: {e.strerror or e}", str(path)) from None
    except ValueError as e:
        raise ConvnetError(f"not a results.json (bad JSON: {e})", str(path)) from None
    if not isinstance(data, dict) or data.get("format") != RESULTS_FORMAT:
        raise ConvnetError(f"not a results.json (no \"format\": \"{RESULTS_FORMAT}\")", str(path))
    version = data.get("format_version")
    if version not in KNOWN_VERSIONS:
        known = ", ".join(str(v) for v in KNOWN_VERSIONS)
        raise ConvnetError(f"results format {version} is not known to this convnet (it reads "
                           f"format {known}); use the convnet version that wrote it", str(path))
    return in_current_layout(data)


def in_current_layout(data):
    """Results data of any version this convnet reads, in the layout of the current version."""
    if data.get("format_version") == 1:
        data = from_version_1(data)
    if data.get("format_version") == 2:
        data = from_version_2(data)
    return data


def results_beside(log_path):
    """The results.json in the folder of ``log_path``, or None when there is none."""
    path = os.path.join(os.path.dirname(os.path.abspath(log_path)), RESULTS_NAME)
    return path if os.path.isfile(path) else None


def load_results(path):
    """Results data for a run folder, a results.json or a CONVNET.LOG: the results.json where there
    is one, else what the English log says (converted to the same layout)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        candidate = os.path.join(path, RESULTS_NAME)
        if os.path.isfile(candidate):
            return read_results(candidate)
        log = os.path.join(path, "CONVNET.LOG")
        if not os.path.isfile(log):
            raise ConvnetError("neither results.json nor CONVNET.LOG in this folder", path)
        return from_logfile(read_log(log))
    if os.path.basename(path) == RESULTS_NAME:
        return read_results(path)
    beside = results_beside(path)
    if beside is not None:
        return read_results(beside)
    return from_logfile(read_log(path))


def load_log(path):
    """A LogFile (the reader's classes) for ``convnet log`` from results.json when it lies beside
    the log, else from the log's English."""
    beside = results_beside(path)
    if beside is None:
        return read_log(path)
    return to_logfile(read_results(beside), os.fspath(path))


# ------------------------------------------------------------------- results -> LogFile
def run_status(run):
    """The status words ``convnet log summary`` prints for one TRAIN / TEST of the results."""
    if run.get("status") == "error":
        return "error: " + (run.get("error") or "unknown")
    if run.get("status") == "interrupted":
        return "interrupted"
    if run.get("status") == "running":
        return "incomplete"
    return "ok"


def to_logfile(data, path):
    """The reader's LogFile for results data, so the log commands print the same tables."""
    session = data.get("session", {})
    error = data.get("error")
    log = LogFile(path, 0, data.get("convnet_version"), data.get("started"),
                  seed=session.get("seed"), control_files=list(session.get("control_files", [])),
                  error=error.get("text") if error else None)
    for r in data.get("runs", []):
        log.runs.append(_logged_run(r, error))
    return log


def _logged_run(r, error):
    """One run entry of the results as the reader's Run."""
    arch = r.get("architecture") or {}
    run = Run(r["command"], r["index"], control_file=r.get("control_file"),
              rows=arch.get("rows"), cols=arch.get("cols"), bands=arch.get("bands"),
              n_classes=arch.get("classes"), weights=arch.get("total_weights"),
              architecture=list(arch.get("report", [])),
              params={k: _param_text(v) for k, v in (r.get("parameters") or {}).items()},
              device=r.get("device"),
              threads=None if r.get("threads") is None else str(r.get("threads")),
              final_criterion=r.get("final_criterion"), n_cases=r.get("n_cases"),
              confusion=[list(row) for row in r.get("confusion") or []],
              misclassification=r.get("misclassification"),
              seconds=(r.get("seconds") or {}).get("total"),
              phase_seconds=dict(r.get("seconds") or {}),
              interrupted=r.get("status") == "interrupted" or bool(r.get("interrupted")))
    run.layers = compact_layers(run.architecture)
    if r.get("status") == "error":
        run.error = r.get("error") or (error.get("text") if error else "error")
    for entry in r.get("phases") or []:
        fields = {k: entry.get(k) for k in LogPhase.FIELDS if k in entry}
        fields["trace"] = [(int(p[0]), p[1]) for p in entry.get("trace") or [] if p[1] is not None]
        run.phases.append(LogPhase(**fields))
    return run


def _param_text(value):
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "YES" if value else "NO"
    return str(value)


# ------------------------------------------------------------------- LogFile -> results
def from_logfile(log):
    """Results data made from what a CONVNET.LOG says (for runs made before results.json existed,
    or whose results.json was lost). Only what the log records is filled in."""
    runs = [_run_from_log(r) for r in log.runs]
    status = "done"
    error = None
    if log.error:
        interrupted = "Ctrl-C" in log.error or "interrupted" in log.error
        status = "interrupted" if interrupted else "error"
        error = {"text": log.error, "message": log.error, "file": None, "line": None}
    elif runs and runs[-1]["status"] == "running":
        status = "running"
    return {"format": RESULTS_FORMAT, "format_version": RESULTS_VERSION,
            "convnet_version": log.convnet_version, "from_log": log.path, "status": status,
            "error": error, "started": log.timestamp, "updated": None, "finished": None,
            "session": {"seed": log.seed, "seed_given": None, "device": None, "threads": None,
                        "control_files": list(log.control_files)},
            "runs": runs, "pictures": [], "models": [], "cuda_log": None}


def _run_from_log(r):
    """One run entry from the reader's Run."""
    status = "done"
    if r.error:
        status = "error"
    elif r.interrupted:
        status = "interrupted"
    elif r.misclassification is None:
        status = "running"
    run = {"command": r.command, "index": r.index, "control_file": r.control_file, "line": None,
           "status": status, "error": r.error, "device": r.device,
           "threads": int(r.threads) if r.threads and r.threads.isdigit() else None,
           "architecture": {"rows": r.rows, "cols": r.cols, "bands": r.bands,
                            "classes": r.n_classes, "total_weights": r.weights,
                            "layers": [], "report": list(r.architecture)},
           "parameters": dict(r.params)}
    seconds = dict(r.phase_seconds)
    if r.seconds is not None:
        seconds.setdefault("total", r.seconds)
    if r.command == "TRAIN":
        run.update(train_entry(r.phases, r.final_criterion, None, r.confusion, r.misclassification,
                               r.n_cases, seconds))
    else:
        run.update({"criterion": r.final_criterion, "final_criterion": r.final_criterion,
                    "confusion": [list(row) for row in r.confusion],
                    "misclassification": r.misclassification, "n_cases": r.n_cases,
                    "seconds": seconds})
    return run


# ------------------------------------------------------------------- a TRAIN's entry
def phase_entry(phase):
    """A phase of a TRAIN as results data, from anything with PhaseResult's fields (a
    convnet.train PhaseResult, or the log reader's LogPhase)."""
    seconds = phase.seconds
    return {"name": phase.name, "title": phase.title, "unit": phase.unit, "chart": phase.chart,
            "trace": [[int(step), None if crit is None else float(crit)]
                      for step, crit in phase.trace],
            "criterion": phase.criterion, "steps": phase.steps, "limit": phase.limit,
            "interrupted": phase.interrupted, "stop_reason": phase.stop_reason or None,
            "stop_words": phase.stop_words or None,
            "seconds": None if seconds is None else round(float(seconds), 6),
            "evaluations": dict(phase.evaluations or {}),
            "figures": {name: list(values) for name, values in (phase.figures or {}).items()}}


def train_entry(phases, final_criterion, nll, confusion, misclassification, n_cases, seconds,
                n_criterion_evals=None, validation=(), validation_summary=None):
    """What a TRAIN's run entry holds beyond what every run has: its phases, final figures and
    validation checks (train/validation.py: the list of checks, and their summary or None when
    the TRAIN made none). The one place such an entry is made, for the live record and for a
    log read back."""
    penalty = None if final_criterion is None or nll is None else final_criterion - nll
    return {"phases": [phase_entry(p) for p in phases], "n_criterion_evals": n_criterion_evals,
            "final_criterion": final_criterion, "nll": nll, "penalty": penalty,
            "confusion": [[int(v) for v in row] for row in confusion],
            "misclassification": misclassification, "n_cases": n_cases,
            "seconds": {k: round(float(v), 6) for k, v in seconds.items()},
            "validation": [dict(check) for check in validation],
            "validation_summary": validation_summary}


def target_words(summary):
    """A TRAIN's time to accuracy in words (``target 5 % reached in 12.3 s (340 evaluations)``,
    ``target 5 % not reached``) from its validation summary; None when it had no target."""
    target = (summary or {}).get("target")
    if not target:
        return None
    if not target.get("reached"):
        return f"target {target['error']:g} % not reached"
    return (f"target {target['error']:g} % reached in {target['seconds']:.1f} s "
            f"({target['evaluations']} evaluations)")


def run_phase(run, name):
    """The phase entry called ``name`` of a TRAIN's run entry, or {} when there is none."""
    return next((p for p in run.get("phases") or [] if p.get("name") == name), {})


# ------------------------------------------------------------------- version 2 -> 3
def from_version_2(data):
    """Results data of version 2 in the layout of version 3: a TRAIN has its validation checks
    (none) and their summary (None); the numbers are the same."""
    data = dict(data, format_version=RESULTS_VERSION)
    data["runs"] = [dict(r, validation=list(r.get("validation") or []),
                         validation_summary=r.get("validation_summary"))
                    if r.get("command") == "TRAIN" else r for r in data.get("runs") or []]
    return data


# ------------------------------------------------------------------- version 1 -> 2
# Annealing's stop words, as version 2 writes them (version 1 did not record them).
_ANNEALING_STOP_WORDS = {"limit": "ANNEAL ITERS reached", "interrupt": "interrupted by the user"}


def from_version_1(data):
    """Results data of version 1 (a TRAIN's "annealing" and "refinement" and every run's
    "kind") in the layout of version 2 (its "phases" and "command"); the numbers are the same."""
    data = dict(data, format_version=2)
    data["runs"] = [_run_from_version_1(r) for r in data.get("runs") or []]
    return data


def _run_from_version_1(old):
    run = {("command" if k == "kind" else k): v for k, v in old.items()
           if k not in ("annealing", "refinement")}
    if run.get("command") != "TRAIN":
        return run
    ann, ref = old.get("annealing") or {}, old.get("refinement") or {}
    interrupted = ann.get("interrupted")
    reason = None if interrupted is None else ("interrupt" if interrupted else "limit")
    annealing = dict(_v1_phase("annealing", ann, reason, _ANNEALING_STOP_WORDS.get(reason)),
                     trace=[list(p) for p in ann.get("evaluations") or []],
                     criterion=ann.get("criterion"), steps=ann.get("n_evaluations"),
                     evaluations={"criterion": ann.get("n_evaluations"), "gradient": 0})
    points = ref.get("iterations") or []
    total = old.get("n_criterion_evals")
    refinement = dict(_v1_phase("refinement", ref, ref.get("stop_reason"), ref.get("stop_words")),
                      trace=[[p[0], p[1]] for p in points],
                      criterion=points[-1][1] if points else None, steps=ref.get("n_iterations"),
                      evaluations={"criterion": None if total is None or not annealing["steps"]
                                   else total - annealing["steps"] - 1,   # the final pass: 1
                                   "gradient": ref.get("n_gradient_evals")},
                      figures={"step_lengths": [p[2] if len(p) > 2 else None for p in points]})
    run["phases"] = [annealing, refinement]
    return run


def _v1_phase(name, old, stop_reason, stop_words):
    title, unit, chart = BOOK_PHASES[name]
    return {"name": name, "title": title, "unit": unit, "chart": chart, "limit": old.get("limit"),
            "interrupted": old.get("interrupted"), "stop_reason": stop_reason,
            "stop_words": stop_words, "seconds": old.get("seconds"), "figures": {}}
