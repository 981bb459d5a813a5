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
    run                      the run's folder under DIR
    combination              a sweep run's combination number (empty: not a sweep)
    values                   a sweep run's values (``WPEN=0.001; WIDTH=16``)
    seed                     the seed asked for (empty: chosen at random)
    reused                   yes: an earlier start of this batch finished the run (see resume.py)

A sweep file is one row per combination and seed; DIR/groups.csv and the printed table then
give each combination's statistics (convnet/stats.py).

With ``gpus`` (``--gpus 0,1`` or ``all``) every session gets one GPU of its own: a session starts
on the GPU that has the fewest sessions running, the next one in the list on a tie (round robin),
and ``jobs`` defaults to the number of GPUs, so each GPU runs one experiment at a time. Sessions
running side by side take turns to start CUDA (devices.cuda_start_lock: the driver's start is
slower for two processes at once than one after the other).

Running the same batch again into DIR resumes it (convnet/resume.py): runs finished with the
same inputs are reused, failed and interrupted ones run again. ``retry`` reruns a failing
session up to that many more times.

A file whose session fails keeps its row, with what its log shows up to the failure and the error
as its status; the other files go on. Two files with the same stem get ``<stem>``, ``<stem>-2``, ...
Unless ``threads`` is given, each session gets an equal share of the host's cores
(``cores // jobs``, at least 1) so that parallel sessions do not fight over them.
"""

import contextlib
import csv
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Dict, Optional

from .display.progress import NoProgress
from .errors import ConvnetError
from .sweep import wants_gpu
from .resume import (finished_with, open_batch_folder, output_folders,  # noqa: F401 (re-exported)
                     plan_runs, record_inputs, run_inputs)

COLUMNS = ("file", "weights", "annealing_criterion", "final_criterion", "train_misclassification",
           "test_misclassification", "best_validation", "final_validation", "target_seconds",
           "target_evaluations", "seconds", "device", "status", "run", "combination",
           "values", "seed", "reused")
GROUPS_NAME = "groups.csv"

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
    validation_misclassification: Optional[float] = None
    run: str = ""
    combination: Optional[int] = None
    swept: Dict[str, str] = field(default_factory=dict)     # a sweep run's values
    seed: Optional[int] = None
    reused: bool = False
    name: str = ""

    @classmethod
    def planned(cls, planned, out):
        """The row of a planned run (resume.PlannedRun), before it runs."""
        return cls(file=planned.file, out=planned.folder,
                   run=os.path.relpath(planned.folder, out), combination=planned.sweep_run,
                   swept=dict(planned.values), seed=planned.seed, name=planned.name)

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
                num(self.seconds, ".2f"), self.device or "", self.status, self.run,
                num(self.combination, "d"), "; ".join(f"{k}={v}" for k, v in self.swept.items()),
                num(self.seed, "d"), "yes" if self.reused else ""]


def default_threads(jobs):
    return max(1, (os.cpu_count() or 1) // max(1, jobs))


def _environment(gpu=None, on_gpu=False, start_lock=None):
    """The sessions import the same convnet package as this process, installed or not; a
    session given a GPU sees that one alone, one computing there keeps its host's BLAS to one
    thread (devices.session_environment), and they take turns to start CUDA (``start_lock``, a
    file: devices.cuda_start_lock)."""
    from .devices import START_LOCK_VARIABLE, session_environment
    env = dict(os.environ) if gpu is None else session_environment(gpu, on_gpu=on_gpu)
    if gpu is not None and start_lock:
        env[START_LOCK_VARIABLE] = start_lock
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _command(path, folder, device, threads, seed, gpu=None, sweep_run=None):
    # the batch owns its folder (the command line refused an earlier batch's without --overwrite)
    cmd = [sys.executable, "-m", "convnet", "run", path, "--out", folder, "--overwrite", "--quiet",
           "--device", device, "--threads", str(threads)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    if sweep_run is not None:
        cmd += ["--sweep-run", str(sweep_run)]
    if gpu is not None:
        cmd += ["--gpus", "0"]          # the one device it sees (_environment)
    return cmd


def batch_gpus(spec):
    """The GPU indices of --gpus ('0,1' or 'ALL'), checked against the GPUs present: counted from
    the driver's list where there is one, so the batch itself starts no CUDA (each session
    starts its own, and says so in its row if its GPU cannot be used)."""
    from .params import parse_devices
    from .devices import listed_gpu_count, pycuda_installed
    from .device.multi import resolve_devices
    try:
        spec = parse_devices(spec)
    except ValueError as e:
        raise ConvnetError(f"--gpus: {e}") from None
    try:
        return resolve_devices(spec, listed_gpu_count() if pycuda_installed() else None)
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
    row.validation_misclassification = _validation_error(train)
    return row


def _validation_error(train):
    """The validation checks' error of a TRAIN that has them (the kept best, else the last)."""
    summary = train.get("validation_summary") or {}
    entry = summary.get("best") if summary.get("kept_best") else summary.get("final")
    return (entry or {}).get("error")


def finished_row(row, data):
    """A planned row whose run finished with its recorded inputs (resume.finished_with's data):
    the results from its folder and the seconds the batch recorded for it."""
    fill_from_results(row, row.out)
    row.seconds = data.get("batch_seconds")
    return row


def reused_row(row, data):
    """A planned row whose run an earlier start of the batch finished (its results data)."""
    finished_row(row, data).reused = True
    return row


def with_attempts(row, attempts):
    """The status of a run that took more than one attempt says how many."""
    if attempts > 1:
        row.status += f" (after {attempts} attempts)" if row.ok else f" ({attempts} attempts)"
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

    def __init__(self, out, device, threads, gpus=None, progress=None, retry=0, start_lock=None):
        self.out, self.device, self.threads, self.retry = out, device, threads, retry
        self.processes = {}
        self.stopping = False
        self.gpus = GpuShare(gpus) if gpus else None
        self.start_lock = start_lock
        self.progress = progress if progress is not None else NoProgress()

    def run_one(self, planned, inputs):
        """Run a planned run (again while it fails, up to ``retry`` times); its row."""
        attempts = 0
        while True:
            attempts += 1
            row = self._attempt(planned)
            if row.ok or self.stopping or attempts > self.retry or row.status == "interrupted":
                break
        if row.ok:
            record_inputs(planned.folder, inputs, row.seconds)
        with_attempts(row, attempts)
        self.progress.ended(row)
        return row

    def _attempt(self, planned):
        row = BatchRow.planned(planned, self.out)
        if self.stopping:
            row.status = "not run (batch interrupted)"
            return row
        os.makedirs(planned.folder, exist_ok=True)
        start = time.monotonic()
        gpu = self.gpus.take() if self.gpus else None
        self.progress.started(planned.name, "" if gpu is None else f" on GPU {gpu}")
        key = planned.folder
        try:
            proc = subprocess.Popen(
                _command(planned.file, planned.folder, self.device, self.threads, planned.seed,
                         gpu, planned.sweep_run),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                stdin=subprocess.DEVNULL,
                env=_environment(gpu, gpu is not None and wants_gpu(
                    planned.file, self.device, planned.sweep_run) is not False, self.start_lock))
            self.processes[key] = proc
            try:
                _, stderr = proc.communicate()
            finally:
                self.processes.pop(key, None)
        finally:
            if gpu is not None:
                self.gpus.give_back(gpu)
        row.seconds = time.monotonic() - start
        row.returncode = proc.returncode
        row.stderr = stderr
        fill_from_results(row, planned.folder)
        if proc.returncode != 0:
            row.status = ("interrupted" if self.stopping
                          else "error: " + _error_from(stderr, proc.returncode))
        return row

    def stop(self):
        self.stopping = True
        for proc in list(self.processes.values()):
            if proc.poll() is None:
                proc.terminate()


def prepare(files, out, seed, overwrite, allow_large, device, progress):
    """Plan a batch's runs and open its folder; returns (planned runs, rows with the reused and
    the refused ones filled in, {index: inputs} of the runs to start)."""
    planned = plan_runs(files, out, seed, allow_large)
    resuming = open_batch_folder(out, files, overwrite)
    progress.planned(len(planned))
    rows, to_run, digests = [None] * len(planned), {}, {}
    for i, run in enumerate(planned):
        row = BatchRow.planned(run, out)
        if run.error is not None:
            row.status = f"error: {run.error}"
            rows[i] = row
            progress.ended(row, was_started=False)
            continue
        inputs = run_inputs(run, device, digests)
        done = finished_with(run.folder, inputs) if resuming else None
        if done is not None:
            rows[i] = reused_row(row, done)
            progress.reused(rows[i])
        else:
            to_run[i] = inputs
    return planned, rows, to_run


def run_batch(files, out, jobs=None, device="auto", threads=None, seed=None, gpus=None,
              progress=None, overwrite=False, retry=0, allow_large=False):
    """Run every control file (every combination and seed of a sweep file) as its own session,
    ``jobs`` at a time; write DIR/summary.csv (and groups.csv for sweeps) and report.html.

    ``gpus``: '0,1' or 'all' gives each session one of those GPUs; ``jobs`` then defaults to their
    number (else to 1). ``progress`` (a display.progress.BatchProgress) hears of each session as
    it starts and ends. The same batch into the same ``out`` reuses its finished runs (see
    resume.py); another batch's folder is refused unless ``overwrite``. Returns the rows in
    order. A file that does not exist is a failed row, not an exception; a bad ``jobs``,
    ``gpus`` or sweep, another batch's ``out`` or an unwritable one raises ConvnetError.
    """
    files = [os.fspath(f) for f in files]
    gpu_list = batch_gpus(gpus) if gpus is not None else None
    if jobs is None:
        jobs = len(gpu_list) if gpu_list else 1
    if jobs < 1:
        raise ConvnetError(f"--jobs must be at least 1, not {jobs}")
    progress = progress if progress is not None else NoProgress()
    planned, rows, to_run = prepare(files, out, seed, overwrite, allow_large, device, progress)
    with _start_lock(gpu_list and jobs > 1) as start_lock:
        runner = _Runner(out, device, threads or default_threads(jobs), gpu_list, progress, retry,
                         start_lock)
        _run_all(runner, planned, rows, to_run, jobs, out)
    write_batch(rows, out)
    return rows


@contextlib.contextmanager
def _start_lock(wanted):
    """The path of a file, removed afterwards, whose lock the batch's GPU sessions take turns to
    hold while their CUDA starts (devices.cuda_start_lock); None when not ``wanted`` (one
    session at a time) or when no such file can be made."""
    path = None
    if wanted:
        try:
            fd, path = tempfile.mkstemp(prefix="convnet-cuda-start-", suffix=".lock")
            os.close(fd)
        except OSError:
            path = None
    try:
        yield path
    finally:
        if path is not None:
            try:
                os.unlink(path)
            except OSError:
                pass


def _run_all(runner, planned, rows, to_run, jobs, out):
    """Run the planned runs ``to_run`` ({index: inputs}), ``jobs`` at a time, filling ``rows``;
    a Ctrl-C stops the sessions and leaves the summary of what finished."""
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {i: pool.submit(runner.run_one, planned[i], inputs)
                   for i, inputs in to_run.items()}
        try:
            for i, fut in futures.items():
                rows[i] = fut.result()
        except KeyboardInterrupt:
            runner.stop()
            for i, fut in futures.items():
                rows[i] = fut.result()
            write_batch(rows, out)
            raise


def write_batch(rows, out):
    """summary.csv, groups.csv (a sweep's combinations) and report.html of a batch."""
    write_summary(rows, os.path.join(out, "summary.csv"))
    write_groups(rows, os.path.join(out, GROUPS_NAME))
    write_batch_report(rows, out)


def write_groups(rows, path):
    """groups.csv: each combination's statistics (none when no row belongs to a sweep)."""
    from .stats import group_records, groups
    found = groups(rows)
    if not found:
        return None
    head, records = group_records(found)
    _write_csv(path, head, records)
    return path


def write_batch_report(rows, out):
    """DIR/report.html: the table of runs, sortable, and their refinement curves overlaid."""
    from .report.batch_page import write_batch_report as write
    return write(rows, out)


def write_summary(rows, path):
    _write_csv(path, COLUMNS, [row.values() for row in rows if row is not None])


def _write_csv(path, head, records):
    """Replace a CSV file at once (never a half-written summary)."""
    import io
    from .logs.results import write_atomic
    text = io.StringIO()
    w = csv.writer(text, lineterminator="\r\n")
    w.writerow(head)
    w.writerows(records)
    write_atomic(path, text.getvalue())


def summary_table(rows):
    """The printed table: aligned columns, the status last (not cut; "reused" for a run an
    earlier start of the batch finished); the validation columns only where a row has a value
    (as on the batch page); then a sweep's combinations."""
    from .report.batch_page import OPTIONAL_COLUMNS
    from .stats import groups, table_lines
    head = ["file", "weights", "anneal crit", "final crit", "train %", "test %", "best valid %",
            "final valid %", "target s", "target evals", "seconds", "device", "status"]
    named = [r for r in rows if r is not None]
    values = [r.values() for r in named]
    shown = [j for j, name in enumerate(COLUMNS[:len(head)])
             if name not in OPTIONAL_COLUMNS or any(v[j] for v in values)]
    head = [head[j] for j in shown]
    body = [[v[j] if v[j] else "-" for j in shown] for v in values]
    for cells, row in zip(body, named):
        cells[0] = row.name or row.file
        cells[-1] += " (reused)" if row.reused else ""
    widths = [max(len(head[j]), *(len(b[j]) for b in body)) if body else len(head[j])
              for j in range(len(head) - 1)]
    lines = []
    for cells in [head] + body:
        left = [cells[0].ljust(widths[0])]
        left += [c.rjust(w) for c, w in zip(cells[1:-2], widths[1:-1])]
        left.append(cells[-2].ljust(widths[-1]))
        lines.append("  ".join(left + [cells[-1]]))
    found = groups(rows)
    return lines + ([""] + table_lines(found) if found else [])


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
        values = dict(v.split("=", 1) for v in (record.get("values") or "").split("; ") if "=" in v)
        rows.append(BatchRow(
            file=record.get("file", ""), out=os.path.join(folder, record["run"])
            if record.get("run") else out, weights=num(record.get("weights"), int),
            annealing_criterion=num(record.get("annealing_criterion")),
            final_criterion=num(record.get("final_criterion")),
            train_misclassification=num(record.get("train_misclassification")),
            test_misclassification=num(record.get("test_misclassification")),
            best_validation=num(record.get("best_validation")),
            final_validation=num(record.get("final_validation")),
            target_seconds=num(record.get("target_seconds")),
            target_evaluations=num(record.get("target_evaluations"), int),
            seconds=num(record.get("seconds")), device=record.get("device") or None,
            status=record.get("status") or "unknown", run=record.get("run") or "",
            combination=num(record.get("combination"), int), swept=values,
            seed=num(record.get("seed"), int), reused=record.get("reused") == "yes"))
    for row in rows:            # validation is in results.json only
        if row.combination is not None:
            read = fill_from_results(BatchRow(row.file, row.out), row.out)
            row.validation_misclassification = read.validation_misclassification
    return rows
