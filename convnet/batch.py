"""``convnet batch``: independent sessions, one per control file, several at a time.

Each control file runs as its own ``convnet run FILE --out DIR/<stem> --quiet`` in a separate
process (a fresh interpreter: nothing is shared between files, and a crash in one cannot touch the
others), ``jobs`` at a time. When every file has ended, its results.json is read back (its
CONVNET.LOG where there is none) and one row per file goes into ``DIR/summary.csv`` and the
printed table (and ``DIR/report.html``, see convnet/report/batch_page.py):

    file                     the control file as given
    weights                  total weights of the model of the last TRAIN
    annealing_criterion      that TRAIN's criterion after simulated annealing
    final_criterion          that TRAIN's criterion after refinement
    train_misclassification  percent misclassified on the training set (that TRAIN)
    test_misclassification   percent misclassified by the first TEST after it (empty: no TEST)
    best_validation          that TRAIN's lowest validation misclassification (empty: no cases
                             held out); final_validation: its last check's
    target_seconds           seconds until the validation (else training) misclassification
                             first reached TARGET ERROR; target_evaluations: evaluations until
                             then (both empty: no target, or never reached)
    seconds                  wall-clock seconds of the whole session, start-up included
    device                   cpu or cuda (where that TRAIN computed)
    status                   ok, or "error: " and the error that ended the file's session

With ``gpus`` (``--gpus 0,1`` or ``all``) every session gets one GPU of its own: a session starts
on the GPU that has the fewest sessions running, the next one in the list on a tie (round robin),
and ``jobs`` defaults to the number of GPUs, so each GPU runs one experiment at a time.

A file whose session fails keeps its row, with what its log shows up to the failure and the error
as its status; the other files go on. Two files with the same stem get ``<stem>``, ``<stem>-2``, ...
Unless ``threads`` is given, each session gets an equal share of the host's cores
(``cores // jobs``, at least 1) so that parallel sessions do not fight over them.
"""

import csv
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional

from .display.progress import NoProgress
from .errors import ConvnetError

COLUMNS = ("file", "weights", "annealing_criterion", "final_criterion", "train_misclassification",
           "test_misclassification", "best_validation", "final_validation", "target_seconds",
           "target_evaluations", "seconds", "device", "status")

ERROR_PREFIX = "convnet: error: "


@dataclass
class BatchRow:
    """One control file's outcome (see the module docstring for the fields)."""

    file: str
    out: str
    weights: Optional[int] = None
    annealing_criterion: Optional[float] = None
    final_criterion: Optional[float] = None
    train_misclassification: Optional[float] = None
    test_misclassification: Optional[float] = None
    best_validation: Optional[float] = None
    final_validation: Optional[float] = None
    target_seconds: Optional[float] = None
    target_evaluations: Optional[int] = None
    seconds: Optional[float] = None
    device: Optional[str] = None
    status: str = "ok"
    returncode: Optional[int] = None
    stderr: str = field(default="", repr=False)

    @property
    def ok(self):
        return self.status == "ok" or self.status.startswith("ok (")   # "ok (run again ...)"

    def values(self):
        """The row's CSV cells, in COLUMNS order (empty where unknown)."""
        def num(v, fmt):
            return "" if v is None else format(v, fmt)
        return [self.file, "" if self.weights is None else str(self.weights),
                num(self.annealing_criterion, ".6g"), num(self.final_criterion, ".6g"),
                num(self.train_misclassification, ".4f"), num(self.test_misclassification, ".4f"),
                num(self.best_validation, ".4f"), num(self.final_validation, ".4f"),
                num(self.target_seconds, ".2f"), num(self.target_evaluations, "d"),
                num(self.seconds, ".2f"), self.device or "", self.status]


def output_folders(files, out):
    """DIR/<stem> for every file; repeated stems get -2, -3, ..."""
    seen = {}
    folders = []
    for f in files:
        stem = os.path.splitext(os.path.basename(f))[0] or "run"
        n = seen.get(stem, 0) + 1
        seen[stem] = n
        folders.append(os.path.join(out, stem if n == 1 else f"{stem}-{n}"))
    return folders


def default_threads(jobs):
    return max(1, (os.cpu_count() or 1) // max(1, jobs))


def _environment():
    """The sessions import the same convnet package as this process, installed or not."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _command(path, folder, device, threads, seed, gpu=None):
    # the batch owns its folder (the command line refused an earlier batch's without --overwrite)
    cmd = [sys.executable, "-m", "convnet", "run", path, "--out", folder, "--overwrite", "--quiet",
           "--device", device, "--threads", str(threads)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    if gpu is not None:
        cmd += ["--gpus", str(gpu)]
    return cmd


def batch_gpus(spec):
    """The GPU indices of --gpus ('0,1' or 'ALL'), checked against the GPUs present."""
    from .params import parse_devices
    from .device.multi import resolve_devices
    try:
        spec = parse_devices(spec)
    except ValueError as e:
        raise ConvnetError(f"--gpus: {e}") from None
    try:
        return resolve_devices(spec)
    except ConvnetError as e:
        raise ConvnetError(f"--gpus {spec.lower()}: {e.message}") from None


class GpuShare:
    """Hands each starting session the GPU with the fewest sessions running (ties: the next in
    the list after the last one given, so a batch goes round the GPUs)."""

    def __init__(self, gpus):
        self.gpus = list(gpus)
        self.running = [0] * len(self.gpus)
        self.next = 0
        self.lock = threading.Lock()

    def take(self):
        with self.lock:
            n = len(self.gpus)
            order = [(self.next + k) % n for k in range(n)]
            k = min(order, key=lambda j: self.running[j])
            self.running[k] += 1
            self.next = (k + 1) % n
            return self.gpus[k]

    def give_back(self, gpu):
        with self.lock:
            self.running[self.gpus.index(gpu)] -= 1


def _error_from(stderr, returncode):
    """The one-line error of a failed session (the last ``convnet: error:`` line, else the tail)."""
    lines = [line.strip() for line in (stderr or "").splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith(ERROR_PREFIX):
            return line[len(ERROR_PREFIX):]
    if lines:
        return f"exit status {returncode}: {lines[-1]}"
    return f"exit status {returncode}"


def fill_from_results(row, folder):
    """Fill a row's results from a session's results.json (from its CONVNET.LOG where there is no
    results.json; nothing when neither can be read)."""
    from .logs.results import load_results, run_phase
    try:
        data = load_results(folder)
    except ConvnetError:
        return row
    runs = data.get("runs") or []
    trains = [r for r in runs if r["command"] == "TRAIN"]
    if not trains:
        return row
    train = trains[-1]
    row.weights = (train.get("architecture") or {}).get("total_weights")
    row.annealing_criterion = run_phase(train, "annealing").get("criterion")
    row.final_criterion = train.get("final_criterion")
    row.train_misclassification = train.get("misclassification")
    row.device = train.get("device")
    fill_validation(row, train.get("validation_summary") or {})
    later = [r for r in runs if r["command"] == "TEST" and r["index"] > train["index"]]
    if later:
        row.test_misclassification = later[0].get("misclassification")
    return row


def fill_validation(row, summary):
    """The validation columns of a row from a TRAIN's validation summary (results data)."""
    if summary.get("cases") == "validation":
        row.best_validation = (summary.get("best") or {}).get("error")
        row.final_validation = (summary.get("final") or {}).get("error")
    target = summary.get("target") or {}
    if target.get("reached"):
        row.target_seconds, row.target_evaluations = target["seconds"], target["evaluations"]


class _Runner:
    """Starts the sessions and remembers the processes, so an interruption can end them."""

    def __init__(self, gpus=None, progress=None):
        self.processes = {}
        self.stopping = False
        self.gpus = GpuShare(gpus) if gpus else None
        self.progress = progress if progress is not None else NoProgress()

    def run_one(self, path, folder, device, threads, seed):
        row = BatchRow(file=path, out=folder)
        if self.stopping:
            row.status = "not run (batch interrupted)"
            return row
        os.makedirs(folder, exist_ok=True)
        start = time.monotonic()
        gpu = self.gpus.take() if self.gpus else None
        self.progress.started(path, "" if gpu is None else f" on GPU {gpu}")
        try:
            proc = subprocess.Popen(_command(path, folder, device, threads, seed, gpu),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    stdin=subprocess.DEVNULL, env=_environment())
            self.processes[path, folder] = proc
            try:
                _, stderr = proc.communicate()
            finally:
                self.processes.pop((path, folder), None)
        finally:
            if gpu is not None:
                self.gpus.give_back(gpu)
        row.seconds = time.monotonic() - start
        row.returncode = proc.returncode
        row.stderr = stderr
        fill_from_results(row, folder)
        if proc.returncode != 0:
            row.status = ("interrupted" if self.stopping
                          else "error: " + _error_from(stderr, proc.returncode))
        self.progress.ended(row)
        return row

    def stop(self):
        self.stopping = True
        for proc in list(self.processes.values()):
            if proc.poll() is None:
                proc.terminate()


def run_batch(files, out, jobs=None, device="auto", threads=None, seed=None, gpus=None,
              progress=None):
    """Run every control file as its own session, ``jobs`` at a time; write DIR/summary.csv.

    ``gpus``: '0,1' or 'all' gives each session one of those GPUs; ``jobs`` then defaults to their
    number (else to 1). ``progress`` (a display.progress.BatchProgress) hears of each session as
    it starts and ends. Returns the rows in the order of ``files``. A file that does not exist is
    a failed row, not an exception; only a bad ``jobs`` or ``gpus`` or an unwritable ``out``
    raises ConvnetError.
    """
    files = [os.fspath(f) for f in files]
    gpu_list = batch_gpus(gpus) if gpus is not None else None
    if jobs is None:
        jobs = len(gpu_list) if gpu_list else 1
    if jobs < 1:
        raise ConvnetError(f"--jobs must be at least 1, not {jobs}")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise ConvnetError(f"cannot create the batch folder {out}: {e.strerror or e}") from None
    folders = output_folders(files, out)
    threads = threads or default_threads(jobs)
    runner = _Runner(gpu_list, progress)
    rows = [None] * len(files)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {}
        for i, (path, folder) in enumerate(zip(files, folders)):
            if not os.path.isfile(path):
                rows[i] = BatchRow(file=path, out=folder,
                                   status=f"error: {path}: no such control file")
                runner.progress.ended(rows[i], was_started=False)
                continue
            futures[i] = pool.submit(runner.run_one, path, folder, device, threads, seed)
        try:
            for i, fut in futures.items():
                rows[i] = fut.result()
        except KeyboardInterrupt:
            runner.stop()
            for i, fut in futures.items():
                rows[i] = fut.result()
            write_summary(rows, os.path.join(out, "summary.csv"))
            write_batch_report(rows, out)
            raise
    write_summary(rows, os.path.join(out, "summary.csv"))
    write_batch_report(rows, out)
    return rows


def write_batch_report(rows, out):
    """DIR/report.html: the table of runs, sortable, and their refinement curves overlaid."""
    from .report.batch_page import write_batch_report as write
    return write(rows, out)


def write_summary(rows, path):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for row in rows:
            if row is not None:
                w.writerow(row.values())


def summary_table(rows):
    """The printed table: aligned columns, the status last (not cut); the validation columns
    only where a row has a value (as on the batch page)."""
    from .report.batch_page import OPTIONAL_COLUMNS
    head = ["file", "weights", "anneal crit", "final crit", "train %", "test %", "best valid %",
            "final valid %", "target s", "target evals", "seconds", "device", "status"]
    values = [r.values() for r in rows if r is not None]
    shown = [j for j, name in enumerate(COLUMNS)
             if name not in OPTIONAL_COLUMNS or any(v[j] for v in values)]
    head = [head[j] for j in shown]
    body = [[v[j] if v[j] else "-" for j in shown] for v in values]
    widths = [max(len(head[j]), *(len(b[j]) for b in body)) if body else len(head[j])
              for j in range(len(head) - 1)]
    lines = []
    for cells in [head] + body:
        left = [cells[0].ljust(widths[0])]
        left += [c.rjust(w) for c, w in zip(cells[1:-2], widths[1:-1])]
        left.append(cells[-2].ljust(widths[-1]))
        lines.append("  ".join(left + [cells[-1]]))
    return lines


def read_summary(folder):
    """The rows of a batch folder's summary.csv, each with its run's folder."""
    try:
        with open(os.path.join(folder, "summary.csv"), newline="", encoding="utf-8") as f:
            records = list(csv.DictReader(f))
    except (OSError, csv.Error) as e:
        raise ConvnetError(f"cannot read summary.csv: {getattr(e, 'strerror', None) or e}",
                           folder) from None

    def num(text, convert=float):
        try:
            return convert(text) if text not in (None, "") else None
        except ValueError:
            return None
    files = [r.get("file", "") for r in records]
    rows = []
    for record, out in zip(records, output_folders(files, folder)):
        rows.append(BatchRow(
            file=record.get("file", ""), out=out, weights=num(record.get("weights"), int),
            annealing_criterion=num(record.get("annealing_criterion")),
            final_criterion=num(record.get("final_criterion")),
            train_misclassification=num(record.get("train_misclassification")),
            test_misclassification=num(record.get("test_misclassification")),
            best_validation=num(record.get("best_validation")),
            final_validation=num(record.get("final_validation")),
            target_seconds=num(record.get("target_seconds")),
            target_evaluations=num(record.get("target_evaluations"), int),
            seconds=num(record.get("seconds")), device=record.get("device") or None,
            status=record.get("status") or "unknown"))
    return rows
