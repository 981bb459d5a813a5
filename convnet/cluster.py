"""``convnet batch FILES --out DIR --scheduler tcp://HOST:PORT``: a batch on a Dask cluster.

Each control file is one Dask task. The worker that takes it runs the session exactly as a local
batch does, as ``convnet run`` in a process of its own, and sends back every file the run wrote;
the client puts them in ``DIR/<stem>/`` and reads the row from them as a local batch does, so
summary.csv, report.html and the table are those of a local batch.

Where the files are. The client lists the data and model files each control file reads, with
their SHA-256. A worker uses a file at the path the control file names when it can read it there
with the same content (a shared file system); otherwise the file travels with the task: the client
scatters it to the workers that lack it, once per worker, and a worker keeps what it received in
a cache named by content. On the worker the session runs in a private folder that mirrors the
client's paths (its control file at ``ROOT/<client path>``, every input linked at
``ROOT/<client path>``, inputs named by absolute paths found there through CONVNET_INPUT_ROOT),
so every path the session prints or logs, once ROOT is taken off, is the client's.
A worker started with CONVNET_WORKER_COPY_INPUTS=1 never reads the client's paths: every input
travels to it (for a network file system that is slow or not to be trusted).

Which worker. A worker started with ``--resources GPU=1`` (one per GPU) takes the CUDA sessions
(``--device cuda``, or a control file without ``CUDA = NO`` while such workers exist); the CPU
sessions go to the other workers, or to any worker when there are none. A worker that dies
mid-task has its task run again on another (Dask's own rescheduling); the row says so. Ctrl-C
cancels what has not finished, stops the sessions running, and keeps the finished rows.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

from ._version import pip_install
from .sweep import wants_gpu
from .batch import (BatchRow, _environment, _error_from, fill_from_results, finished_row, prepare,
                    with_attempts, write_batch)
from .control import INPUT_ROOT_ENV
from .display.progress import NoProgress
from .errors import ConvnetError
from .resume import file_digest, finished_with, record_inputs  # noqa: F401 (file_digest: exported)
from .sweep import parse_control

CONNECT_TIMEOUT_S = 10
CLOSE_TIMEOUT_S = 5
WORKER_WAIT_S = 20
ATTEMPT_TOPIC = "convnet-batch-attempt"
COPY_INPUTS_ENV = "CONVNET_WORKER_COPY_INPUTS"
CACHE_FOLDER = "convnet-inputs"
POLL_S = 0.5


# ------------------------------------------------------------------ files
def control_inputs(path, sweep_run=None):
    """The files a control file (a sweep file: its combination ``sweep_run``) reads that exist
    here: [(absolute path, sha256, size)]; an image folder or file pattern gives each of its image
    files. A file that does not parse reads nothing (the session reports its error on the
    worker)."""
    try:
        commands, _, _ = parse_control(path, sweep_run=sweep_run)
    except ConvnetError:
        return []
    from .data.images import input_files
    seen, out = set(), []
    for cmd in commands:
        input_path = cmd.args.get("path")
        if input_path is None:
            continue
        # an image folder or a CLASSIFY pattern: every image file it gives travels
        found = input_files(input_path) if cmd.name in ("READ IMAGES", "CLASSIFY") \
            else [input_path] if os.path.isfile(input_path) else []
        for file in found:
            if file not in seen:
                seen.add(file)
                out.append((os.path.abspath(file), file_digest(file), os.path.getsize(file)))
    return out


_digests = {}          # worker process: (path, size, mtime) -> sha256, so files hash once


def _digest_at(path, size):
    """sha256 of the file at path when it is a readable file of that size, else None."""
    try:
        st = os.stat(path)
        if st.st_size != size:
            return None
        key = (path, st.st_size, st.st_mtime_ns)
        if key not in _digests:
            _digests[key] = file_digest(path)
        return _digests[key]
    except OSError:
        return None


def _cache_dir(worker):
    return os.path.join(worker.local_directory, CACHE_FOLDER)


def _local_copy(worker, path, digest, size):
    """Where this worker finds the content digest: the client's path itself (unless inputs are
    always copied), its cache, or None."""
    if not os.environ.get(COPY_INPUTS_ENV) and _digest_at(path, size) == digest:
        return path
    cached = os.path.join(_cache_dir(worker), digest)
    return cached if os.path.isfile(cached) else None


def worker_holdings(inputs, dask_worker=None):
    """Run on every worker (Client.run): the digests of inputs it can supply itself."""
    return [digest for path, digest, size in inputs
            if _local_copy(dask_worker, path, digest, size) is not None]


# ------------------------------------------------------------------ the task (on a worker)
def _mirror(root, path):
    """root + an absolute client path."""
    return os.path.join(root, os.path.abspath(path).lstrip(os.sep))


def _parent_death_signal():
    """In the session process: end when the worker that started it dies (Linux)."""
    try:
        import ctypes
        import signal
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:   # pragma: no cover - not Linux: the session outlives a killed worker
        pass


def _cancelled(event):
    try:
        return event is not None and event.is_set()
    except Exception:   # the scheduler is gone: nothing to wait for
        return True


def _stage_inputs(worker, root, spec, blobs):
    """The control file and its inputs at their client paths under ``root`` (inputs linked to
    the worker's own copy or its cache, where a travelled blob is stored); returns the control
    file's path there."""
    os.makedirs(_mirror(root, spec["cwd"]), exist_ok=True)
    control = _mirror(root, spec["abs"])
    os.makedirs(os.path.dirname(control), exist_ok=True)
    with open(control, "wb") as f:
        f.write(spec["text"])
    for path, digest, size in spec["inputs"]:
        local = _local_copy(worker, path, digest, size)
        if local is None and digest in blobs:
            os.makedirs(_cache_dir(worker), exist_ok=True)
            local = os.path.join(_cache_dir(worker), digest)
            part = f"{local}.{uuid.uuid4().hex}.part"
            with open(part, "wb") as f:
                f.write(blobs[digest])
            os.replace(part, local)
        if local is not None:
            link = _mirror(root, path)
            os.makedirs(os.path.dirname(link), exist_ok=True)
            if not os.path.lexists(link):
                os.symlink(local, link)
    return control


def _session_command(worker, spec, control, out_dir):
    """The ``convnet run`` command line of the task's session."""
    threads = spec["threads"] or max(1, (os.cpu_count() or 1) // max(1, worker.state.nthreads))
    name = spec["name"] if not os.path.isabs(spec["name"]) else control
    command = [sys.executable, "-m", "convnet", "run", name, "--out", out_dir, "--overwrite",
               "--quiet",
               "--device", spec["device"], "--threads", str(threads)]
    if spec["seed"] is not None:
        command += ["--seed", str(spec["seed"])]
    if spec.get("sweep_run") is not None:
        command += ["--sweep-run", str(spec["sweep_run"])]
    return command


def _run_session(command, cwd, env, cancel):
    """Run the session to its end (terminated when the batch is cancelled); returns its exit
    status, its standard error, its seconds and whether it was interrupted."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, env=env,
                                preexec_fn=_parent_death_signal)
        interrupted = False
        while proc.poll() is None:
            try:
                proc.wait(POLL_S)
            except subprocess.TimeoutExpired:
                if not interrupted and _cancelled(cancel):
                    interrupted = True
                    proc.terminate()
        seconds = time.monotonic() - start
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
    return proc.returncode, stderr, seconds, interrupted


def _written_files(out_dir, root, client_paths):
    """{relative path: bytes} of every file the session wrote; text that names the worker's
    folders names the client's instead."""
    files = {}
    for top, _, names in os.walk(out_dir):
        for name in names:
            full = os.path.join(top, name)
            with open(full, "rb") as f:
                data = f.read()
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                pass
            else:
                if out_dir in text or root in text:
                    data = client_paths(text).encode("utf-8")
            files[os.path.relpath(full, out_dir)] = data
    return files


def run_task(spec, blobs):
    """Run one control file as a session on this worker; return what it wrote.

    spec: the file's name as given, its absolute path, text, inputs and the client's folder and
    options (see submit_batch); blobs: {sha256: bytes} of the inputs that travelled."""
    from distributed import Event, get_worker
    worker = get_worker()
    worker.log_event(ATTEMPT_TOPIC, {"id": spec["id"], "attempt": spec.get("attempt", 1),
                                     "worker": worker.address})
    root = tempfile.mkdtemp(prefix="convnet-task-")
    out_dir = tempfile.mkdtemp(prefix="convnet-out-")
    try:
        control = _stage_inputs(worker, root, spec, blobs)
        env = _environment()
        env[INPUT_ROOT_ENV] = root
        cancel = Event(spec["cancel"]) if spec.get("cancel") else None
        returncode, stderr, seconds, interrupted = _run_session(
            _session_command(worker, spec, control, out_dir), _mirror(root, spec["cwd"]), env,
            cancel)

        def client_paths(text):
            return text.replace(out_dir, spec["folder"]).replace(root + os.sep, os.sep)

        return {"returncode": returncode, "stderr": client_paths(stderr),
                "files": _written_files(out_dir, root, client_paths), "seconds": seconds,
                "worker": worker.address, "interrupted": interrupted}
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(out_dir, ignore_errors=True)


# ------------------------------------------------------------------ the client
def _distributed():
    try:
        import distributed
    except ImportError:
        raise ConvnetError("--scheduler needs Dask distributed: " + pip_install("cluster")) \
            from None
    return distributed


def connect(scheduler, timeout=None):
    """A Dask client of the scheduler, or one ConvnetError naming the address."""
    distributed = _distributed()
    timeout = CONNECT_TIMEOUT_S if timeout is None else timeout
    import logging
    quiet = logging.getLogger("distributed")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)        # the error below says it once
    try:
        return distributed.Client(scheduler, timeout=timeout, set_as_default=False)
    except Exception as e:                  # OSError, TimeoutError, a malformed address
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConvnetError(f"cannot reach the Dask scheduler at {scheduler}: {reason}") from None
    finally:
        quiet.setLevel(level)


def _write_files(folder, files):
    for rel, data in files.items():
        path = os.path.join(folder, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


def run_cluster_batch(files, out, scheduler, device="auto", threads=None, seed=None,
                      progress=None, overwrite=False, retry=0, allow_large=False):
    """Like batch.run_batch, each run a task on the cluster at ``scheduler`` (the same batch
    into the same ``out`` reuses its finished runs; ``retry`` resubmits a failing run). Returns
    the rows in order; raises ConvnetError when the scheduler cannot be reached, and
    KeyboardInterrupt (after writing summary.csv) when interrupted. ``progress`` hears of each
    run as its task is handed to the scheduler and as it ends."""
    files = [os.fspath(f) for f in files]
    progress = progress if progress is not None else NoProgress()
    client = connect(scheduler)
    try:
        batch = prepare(files, out, seed, overwrite, allow_large, device, progress)
        return _run(client, batch, out, scheduler, {"device": device, "threads": threads},
                    progress, retry)
    finally:
        try:
            client.close(timeout=CLOSE_TIMEOUT_S)
        except Exception:               # closing is best effort: the rows are written
            pass


def _task_specs(planned, to_run, batch, options, cancel, gpu_workers):
    """{index: task spec} of every run to start."""
    specs = {}
    for index in to_run:
        run = planned[index]
        with open(run.file, "rb") as f:
            text = f.read()
        gpu = wants_gpu(run.file, options["device"], run.sweep_run)
        specs[index] = {"id": f"{batch}-{index}", "name": run.file,
                        "abs": os.path.abspath(run.file), "cwd": os.getcwd(), "text": text,
                        "inputs": control_inputs(run.file, run.sweep_run), "folder": run.folder,
                        **options, "seed": run.seed, "sweep_run": run.sweep_run,
                        "cancel": cancel.name, "gpu": bool(gpu_workers) and gpu is not False}
    return specs


def _scatter_inputs(client, specs):
    """{sha256: future} of the inputs some worker cannot supply, sent to those workers once."""
    inputs = {digest: (path, digest, size)
              for spec in specs.values() for path, digest, size in spec["inputs"]}
    held = client.run(worker_holdings, list(inputs.values())) if inputs else {}
    blobs = {}
    for digest, (path, _, _) in inputs.items():
        lacking = [worker for worker, have in held.items() if digest not in have]
        if lacking:
            with open(path, "rb") as f:
                blobs[digest] = client.scatter(f.read(), workers=lacking, broadcast=True,
                                               hash=True)
    return blobs


def _submit(client, spec, blobs, cpu_workers, attempt=1):
    """Submit one run's task (a GPU session on a worker with a GPU); its future."""
    needed = {digest: blobs[digest] for _, digest, _ in spec["inputs"] if digest in blobs}
    spec = dict(spec, attempt=attempt)
    placement = ({"resources": {"GPU": 1}} if spec["gpu"] else
                 {"workers": cpu_workers, "allow_other_workers": True} if cpu_workers else {})
    return client.submit(run_task, spec, needed, key=f"convnet-{spec['id']}-{attempt}",
                         pure=False, **placement)


def _run(client, batch, out, scheduler, options, progress, retry):
    distributed = _distributed()
    planned, rows, to_run = batch
    try:
        client.wait_for_workers(1, timeout=WORKER_WAIT_S)
    except Exception:
        raise ConvnetError(f"no Dask worker is connected to the scheduler at {scheduler}") from None
    workers = client.scheduler_info()["workers"]
    gpu_workers = [address for address, worker in workers.items()
                   if worker.get("resources", {}).get("GPU", 0) >= 1]
    cpu_workers = [address for address in workers if address not in gpu_workers]
    name = uuid.uuid4().hex[:12]
    cancel = distributed.Event(f"convnet-cancel-{name}", client=client)
    specs = _task_specs(planned, to_run, name, options, cancel, gpu_workers)
    blobs = _scatter_inputs(client, specs)
    futures, attempts = {}, {}
    for index, spec in specs.items():
        futures[_submit(client, spec, blobs, cpu_workers)] = index
        attempts[index] = 1
        progress.started(planned[index].name, " on the cluster", verb="queued")
    pending = distributed.as_completed(list(futures), loop=client.loop)
    try:
        for future in pending:
            index = futures[future]
            row = _task_row(future, planned[index], out)
            if not row.ok and row.status != "interrupted" and attempts[index] <= retry:
                attempts[index] += 1
                again = _submit(client, specs[index], blobs, cpu_workers, attempts[index])
                futures[again] = index
                pending.add(again)
                continue
            if row.ok:                  # first, so a run whose row says ok is always resumable
                record_inputs(planned[index].folder, to_run[index], row.seconds)
            rows[index] = with_attempts(row, attempts[index])
            progress.ended(rows[index])
    except KeyboardInterrupt:
        try:
            cancel.set()                # the running sessions stop (see run_task)
            client.cancel([future for future in futures if not future.done()])
        except Exception:               # the scheduler is gone: nothing left to cancel
            pass
        for index in specs:
            if rows[index] is None:
                rows[index] = _stopped_row(planned[index], to_run[index], out)
        write_batch(rows, out)
        raise
    _note_retries(client, specs, rows, attempts)
    write_batch(rows, out)
    return rows


def _stopped_row(planned, inputs, out):
    """The row of a run that a Ctrl-C left without one: finished where its results.json says so
    with these inputs (the Ctrl-C came after they were recorded), else not run."""
    row = BatchRow.planned(planned, out)
    data = finished_with(planned.folder, inputs)
    if data is None:
        row.status = "not run (batch interrupted)"
        return row
    return finished_row(row, data)


def _task_row(fut, planned, out):
    """A finished task's row: its files written to its folder, the results read from them."""
    row = BatchRow.planned(planned, out)
    folder = planned.folder
    try:
        result = fut.result()
    except Exception as e:      # KilledWorker (lost too often), or the task itself failed
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        row.status = f"error: {type(e).__name__} on the cluster: {reason}"
        return row
    os.makedirs(folder, exist_ok=True)
    _write_files(folder, result["files"])
    row.seconds = result["seconds"]
    row.returncode = result["returncode"]
    row.stderr = result["stderr"]
    fill_from_results(row, folder)
    if result["returncode"] != 0:
        row.status = ("interrupted" if result["interrupted"]
                      else "error: " + _error_from(result["stderr"], result["returncode"]))
    return row


def _note_retries(client, specs, rows, attempts):
    """A task (its last attempt) started more than once ran again after a worker was lost: the
    row says so."""
    try:
        events = client.get_events(ATTEMPT_TOPIC)
    except Exception:
        return
    workers = {}
    for _, msg in events:
        workers.setdefault((msg.get("id"), msg.get("attempt", 1)), []).append(msg.get("worker"))
    for i, spec in specs.items():
        seen = workers.get((spec["id"], attempts[i]), [])
        if len(seen) > 1 and rows[i] is not None:
            lost = ", ".join(seen[:-1])
            rows[i].status += f" (run again on {seen[-1]} after losing {lost})"
