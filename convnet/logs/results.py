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
import tempfile

from ..errors import ConvnetError
from .reader import LogFile, Run, compact_layers, read_log

RESULTS_FORMAT = "convnet results"
RESULTS_VERSION = 1
RESULTS_NAME = "results.json"
KNOWN_VERSIONS = (RESULTS_VERSION,)
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
    """Replace ``path`` by ``text`` at once: write a temporary file beside it, then rename."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


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
        arch = r.get("architecture") or {}
        run = Run(r["kind"], r["index"], control_file=r.get("control_file"),
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
        if r["kind"] == "TRAIN":
            ann = r.get("annealing") or {}
            ref = r.get("refinement") or {}
            run.annealing_criterion = ann.get("criterion")
            run.annealing = [(int(k), c) for k, c in ann.get("evaluations", []) if c is not None]
            run.refinement = [(int(p[0]), p[1]) for p in ref.get("iterations", [])
                              if p[1] is not None]
            run.iterations = ref.get("n_iterations")
            run.stop_reason = ref.get("stop_words")
        log.runs.append(run)
    return log


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
    runs = []
    for r in log.runs:
        status = "done"
        if r.error:
            status = "error"
        elif r.interrupted:
            status = "interrupted"
        elif r.misclassification is None:
            status = "running"
        run = {"kind": r.kind, "index": r.index, "control_file": r.control_file, "line": None,
               "status": status, "error": r.error, "device": r.device,
               "threads": int(r.threads) if r.threads and r.threads.isdigit() else None,
               "architecture": {"rows": r.rows, "cols": r.cols, "bands": r.bands,
                                "classes": r.n_classes, "total_weights": r.weights,
                                "layers": [], "report": list(r.architecture)},
               "parameters": dict(r.params), "final_criterion": r.final_criterion,
               "confusion": [list(row) for row in r.confusion],
               "misclassification": r.misclassification, "n_cases": r.n_cases,
               "seconds": dict(r.phase_seconds)}
        if r.seconds is not None:
            run["seconds"].setdefault("total", r.seconds)
        if r.kind == "TRAIN":
            refinement = [[i, c, None] for i, c in r.refinement]
            run["annealing"] = {"evaluations": [[k, c] for k, c in r.annealing],
                                "criterion": r.annealing_criterion,
                                "n_evaluations": len(r.annealing) or None,
                                "seconds": r.phase_seconds.get("annealing")}
            run["refinement"] = {"iterations": refinement, "n_iterations": r.iterations,
                                 "stop_reason": None, "stop_words": r.stop_reason,
                                 "seconds": r.phase_seconds.get("refinement")}
        else:
            run["criterion"] = r.final_criterion
        runs.append(run)
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
