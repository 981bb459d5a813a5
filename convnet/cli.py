"""The command line: ``convnet run | check | batch | log | report | classify | export |
devices``."""

import os
import signal
import sys

import click

from ._version import __version__
from .errors import ConvnetError, Interrupted
from .params import MAX_SEED, MAX_THREADS

# the ranges of RANDOM SEED and THREADS in a control file
THREADS = click.IntRange(min=1, max=MAX_THREADS)
SEEDS = click.IntRange(min=0, max=MAX_SEED)


def fail(error):
    """Print a user error as one line and exit with status 2."""
    click.echo(f"convnet: error: {error}", err=True)
    sys.exit(2)


def _gpu_list(ctx, param, value):
    """--gpus: '0,1' or 'all' in the canonical form of CUDA DEVICES."""
    if value is None:
        return None
    from .params import parse_devices
    try:
        return parse_devices(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="convnet")
def main():
    """Train convolutional nets from plain-text control files."""


# Control files and folders are plain strings: a folder given as a control file, or a file given as
# --out, is the program's one-line error, not click's usage message.
@main.command()
@click.argument("files", nargs=-1, required=True)
@click.option("--out", default=None,
              help="Folder for CONVNET.LOG, CUDA.LOG and every output file (default: a new "
                   "folder runs/<first file's name>-<n>).")
@click.option("--overwrite", is_flag=True,
              help="Let the run replace the results of an earlier run in --out.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              show_default=True, help="auto: CUDA when PyCUDA and a GPU are usable.")
@click.option("--threads", type=THREADS, default=None,
              help="Host threads (default: all cores).")
@click.option("--seed", type=SEEDS, default=None, help="Random seed.")
@click.option("--quiet", is_flag=True, help="Print errors only: no progress line, no summary.")
@click.option("--gpus", default=None, metavar="0,1,...|all", callback=_gpu_list,
              help="GPUs that share every evaluation of a CUDA run (wins over CUDA DEVICES; "
                   "default GPU 0).")
@click.option("--sweep-run", type=click.IntRange(min=1), default=None, metavar="N",
              help="Run combination N of a sweep file (SWEEP lines); `convnet batch` runs them "
                   "all.")
def run(files, out, overwrite, device, threads, seed, quiet, gpus, sweep_run):
    """Execute control FILES in order, as one session.

    Each run writes to a folder of its own (runs/<name>-<n> unless --out says where); an --out
    holding an earlier run's results is refused unless --overwrite.
    """
    from .display import figures
    _start_cuda_early(files, device, gpus, sweep_run)
    figures.start()                 # matplotlib loads in a process beside the run, not in it
    try:
        _run(files, out, overwrite, device, threads, seed, quiet, gpus, sweep_run)
    finally:
        figures.stop()


def _start_cuda_early(files, device, gpus, sweep_run):
    """A run that may compute on a GPU (not --device cpu, and no file that says CUDA = NO)
    starts the CUDA driver beside its own start (devices.start_cuda_early)."""
    from .devices import start_cuda_early
    from .sweep import wants_gpu
    if device == "cpu" or any(wants_gpu(f, device, sweep_run) is False for f in files):
        return None
    indices = [int(i) for i in gpus.split(",")] if gpus and gpus != "ALL" else [0]
    return start_cuda_early(indices)


def _run(files, out, overwrite, device, threads, seed, quiet, gpus, sweep_run):
    from .runfolder import check_control_files, choose_out
    from .session import Session
    from .summary import summary_lines
    from .sweep import check_sweep_run
    try:
        check_control_files(list(files))
        for path in files:          # a sweep file without --sweep-run writes nothing
            check_sweep_run(path, sweep_run)
        out, chosen = choose_out(out, list(files), overwrite)
        if chosen and not quiet:
            click.echo(f"convnet: results go to {out}{os.sep}")
        session = Session(out=out, device=device, threads=threads, seed=seed, quiet=quiet,
                          gpus=gpus)
    except ConvnetError as e:
        fail(e)
    except KeyboardInterrupt:       # nothing was written yet
        click.echo("convnet: run ended by the user (Ctrl-C)", err=True)
        sys.exit(130)
    try:
        with _compile_notice(quiet or device == "cuda"):
            session.run(list(files), sweep_run)
    except ConvnetError as e:
        _last_words(session, f"ERROR: {e}")
        fail(e)
    except KeyboardInterrupt:       # before the session's own Ctrl-C handling was in place
        _ended_by(session, Interrupted("run ended by the user (Ctrl-C)", signal.SIGINT))
    except Interrupted as e:
        _ended_by(session, e)
    try:
        session.close()
    except ConvnetError as e:
        fail(e)
    if not quiet:
        for line in summary_lines(session):
            click.echo(line)


def _ended_by(session, e):
    """A run ended by Ctrl-C or SIGTERM: the log's closing line, the message, exit 130 / 143."""
    why = "by the user (Ctrl-C)" if e.signum == signal.SIGINT else "by SIGTERM"
    _last_words(session, f"Run ended {why}; the log is complete up to here")
    click.echo(f"convnet: {e}", err=True)
    sys.exit(e.exit_status)


def _compile_notice(quiet):
    """Says so when the host kernels compile (a first run), where a long silence would puzzle.
    A run on the GPU (--device cuda) has no host kernels to compile, and does not load Numba."""
    from contextlib import nullcontext
    from .display.progress import CompileNotice
    return nullcontext() if quiet else CompileNotice(sys.stdout)


def _last_words(session, line):
    """Write the closing line of a run that is ending early, and close it; a log that can no
    longer be written (the very fault being reported, perhaps) is left as it is."""
    try:
        session.log.write(line)
    except ConvnetError:
        pass
    try:
        session.close()
    except ConvnetError:
        pass


@main.command()
@click.argument("files", nargs=-1, required=True)
@click.option("--session", "as_session", is_flag=True,
              help="Check the files as one session, the way `convnet run` executes them.")
@click.option("--allow-large-sweep", is_flag=True,
              help="Accept a sweep of more than 10,000 runs.")
def check(files, as_session, allow_large_sweep):
    """Validate control FILES without training: syntax, data headers, architectures.

    Each file is checked on its own (a line per file: OK or its error); with --session they are
    checked in order as one session. A sweep file (SWEEP lines) says how many runs it makes and
    has every combination checked. The exit status is 2 when any check failed.
    """
    groups = [list(files)] if as_session else [[f] for f in files]
    failed = 0
    for group in groups:
        try:
            _check_group(group, allow_large_sweep)
        except ConvnetError as e:
            failed += 1
            click.echo(f"convnet: error: {e}", err=True)
            continue
        except Interrupted as e:
            click.echo(f"convnet: {e}", err=True)
            sys.exit(e.exit_status)
        click.echo(f"convnet: {' '.join(group)}: OK")
    if failed:
        sys.exit(2)


def _check_group(group, allow_large):
    """Check a group of files (every combination of a sweep file in it, then a line that says
    how many runs it makes)."""
    from .session import check as check_files
    from .sweep import sweep_of
    sweeps = [s for s in (sweep_of(f, allow_large=allow_large) for f in group) if s is not None]
    if not sweeps:
        check_files(group, echo=click.echo)
        return
    combinations = max(s.combinations for s in sweeps)
    for number in range(1, combinations + 1):    # the first combination's lines are shown
        check_files(group, echo=click.echo if number == 1 else (lambda *a, **k: None),
                    sweep_run=number)
    for sweep in sweeps:        # after the checks: a refused file ends with one line
        click.echo(f"convnet: {sweep.name}: {sweep.describe()}; every combination is checked")


@main.command()
@click.argument("files", nargs=-1, required=True)
@click.option("--out", required=True,
              help="Folder for summary.csv and one sub-folder per control file.")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Sessions run at the same time (default: 1, or the number of --gpus).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              show_default=True, help="Passed to every session.")
@click.option("--threads", type=THREADS, default=None,
              help="Host threads per session (default: the cores shared among the jobs).")
@click.option("--seed", type=SEEDS, default=None,
              help="Random seed for every session.")
@click.option("--gpus", default=None, metavar="0,1,...|all", callback=_gpu_list,
              help="Give every CUDA session one of these GPUs, round robin.")
@click.option("--scheduler", default=None, metavar="tcp://HOST:PORT",
              help="Run each file as a task on this Dask cluster (the 'cluster' extra).")
@click.option("--overwrite", is_flag=True,
              help="Let the batch replace another batch's results in --out, and rerun every "
                   "run of this one.")
@click.option("--retry", type=click.IntRange(min=0), default=0, show_default=True,
              help="Run a failing session again up to this many times.")
@click.option("--allow-large-sweep", is_flag=True,
              help="Accept a sweep of more than 10,000 runs.")
def batch(files, out, jobs, device, threads, seed, gpus, scheduler, overwrite, retry,
          allow_large_sweep):
    """Run each control FILE as an independent session in OUT/<file stem>/, JOBS at a time; a
    sweep file (SWEEP lines) once per combination and seed, in OUT/<stem>/<values>_seed=<s>/.

    Writes OUT/summary.csv (OUT/groups.csv for sweeps) and OUT/report.html and prints the table.
    The same batch again into OUT resumes it: runs finished with the same inputs are reused,
    the others run; another batch's OUT is refused unless --overwrite. One failing file does
    not stop the others; the exit status is 0 when every run ended without error, else 2.
    """
    from .display import figures
    figures.start()             # matplotlib loads beside the batch, for its report's charts
    try:
        _batch(files, out, jobs, device, threads, seed, gpus, scheduler, overwrite, retry,
               allow_large_sweep)
    finally:
        figures.stop()


def _batch(files, out, jobs, device, threads, seed, gpus, scheduler, overwrite, retry,
           allow_large_sweep):
    from .batch import run_batch, summary_table
    from .display.progress import BatchProgress
    if scheduler is not None and (jobs is not None or gpus is not None):
        fail("--jobs and --gpus are for a batch on this machine; on a cluster each worker runs "
             "as many sessions as it has threads, and GPU workers have --resources GPU=1")
    progress = BatchProgress(len(files), click.get_text_stream("stderr"))
    options = dict(device=device, threads=threads, seed=seed, progress=progress,
                   overwrite=overwrite, retry=retry, allow_large=allow_large_sweep)
    try:
        if scheduler is not None:
            from .cluster import run_cluster_batch
            rows = run_cluster_batch(list(files), out, scheduler, **options)
        else:
            rows = run_batch(list(files), out, jobs=jobs, gpus=gpus, **options)
    except ConvnetError as e:
        progress.close()
        fail(e)
    except KeyboardInterrupt:
        progress.close()
        click.echo("convnet: batch interrupted; summary.csv lists what finished", err=True)
        sys.exit(130)
    progress.close()
    for line in summary_table(rows):
        click.echo(line)
    failed = [r for r in rows if not r.ok]
    reused = sum(r.reused for r in rows)
    click.echo(f"convnet: {len(rows) - len(failed)} of {len(rows)} "
               f"{'runs' if len(rows) != len(files) else 'files'} ran without error"
               f"{f' ({reused} reused from an earlier start)' if reused else ''}; "
               f"summary in {out}/summary.csv")
    if failed:
        sys.exit(2)


@main.group()
def log():
    """Read CONVNET.LOG files: summary, plot, compare."""


def _read_logs(paths):
    """Each log's runs: from the results.json beside it, else from the log's own lines."""
    from .logs.results import load_log
    for path in paths:     # a results.json beside a missing log is not that log
        if not os.path.isfile(path):
            fail(ConvnetError("log file not found", path))
    try:
        return [load_log(p) for p in paths]
    except ConvnetError as e:
        fail(e)


@log.command("summary")
@click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=False))
def log_summary(logs):
    """One row per TRAIN and TEST found in the LOGS."""
    from .logs.tables import summary_lines
    for line in summary_lines(_read_logs(logs)):
        click.echo(line)


@log.command("plot")
@click.argument("logfile", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="The PNG to write.")
@click.option("--train", "number", type=click.IntRange(min=1), default=None,
              help="Which TRAIN of the log (1-based; default the last).")
def log_plot(logfile, output, number):
    """Criterion against iteration (annealing and refinement) of a TRAIN in LOGFILE, as a PNG."""
    from .display.plots import log_curve
    from .logs.tables import pick_train
    (parsed,) = _read_logs([logfile])
    try:
        train, _ = pick_train(parsed, number)
        log_curve(train, output, title=f"{logfile}: TRAIN {train.index}")
    except ConvnetError as e:
        fail(e)
    click.echo(f"convnet: wrote {output}")


@log.command("compare")
@click.argument("log_a", type=click.Path(dir_okay=False))
@click.argument("log_b", type=click.Path(dir_okay=False))
@click.option("--train-a", type=click.IntRange(min=1), default=None,
              help="Which TRAIN of LOG_A (1-based; default the last).")
@click.option("--train-b", type=click.IntRange(min=1), default=None,
              help="Which TRAIN of LOG_B (1-based; default the last).")
def log_compare(log_a, log_b, train_a, train_b):
    """Architecture and results of a TRAIN in LOG_A and one in LOG_B, side by side."""
    from .logs.tables import compare_lines
    first, second = _read_logs([log_a, log_b])
    try:
        lines = compare_lines(first, second, train_a, train_b)
    except ConvnetError as e:
        fail(e)
    for line in lines:
        click.echo(line)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
def report(paths):
    """Write report.html for runs made earlier.

    Each PATH is a run's folder, its CONVNET.LOG or results.json (report.html goes beside the log),
    or a batch folder (a page for every run and PATH/report.html for the batch).
    """
    from .batch import read_summary
    from .report.build import write_reports
    try:
        written = write_reports(list(paths), read_summary)
    except ConvnetError as e:
        fail(e)
    for path in written:
        click.echo(f"convnet: wrote {path}")


@main.command("export")
@click.argument("model")
@click.option("-o", "--output", default=None,
              help="The ONNX file to write (default: MODEL's name with .onnx).")
@click.option("--overwrite", is_flag=True, help="Replace the ONNX file if it exists.")
def export(model, output, overwrite):
    """Write MODEL (a file written by SAVE MODEL) as an ONNX model giving the class
    probabilities of N x bands x rows x columns float32 images scaled to -1..1."""
    from .export.onnx import export_model_file
    try:
        written = export_model_file(model, output, overwrite)
    except ConvnetError as e:
        fail(e)
    click.echo(f"convnet: wrote {written}")


@main.command()
@click.argument("model")
@click.argument("images", nargs=-1, required=True)
@click.option("-o", "--output", required=True,
              help="The predictions CSV to write (path, predicted class, each class's "
                   "probability).")
@click.option("--resize", is_flag=True,
              help="Resize images of another size to the model's (else they are refused).")
@click.option("--overwrite", is_flag=True, help="Let the CSV replace an existing file.")
@click.option("--threads", type=THREADS, default=None, help="Host threads (default: all cores).")
def classify(model, images, output, resize, overwrite, threads):
    """The class of every image with a saved MODEL (SAVE MODEL's file).

    IMAGES are image files (PNG, JPEG, BMP, GIF), folders (every image beneath them) or quoted
    file patterns such as "digits/*.png".
    """
    from .model import Model
    from .modelfile import read_model
    from .predict import classify as classify_paths, image_paths, write_predictions
    if os.path.exists(output) and not overwrite:
        fail(f"'{output}' exists; give another -o, or add --overwrite to replace it")
    try:
        saved = read_model(model)
        paths = image_paths(list(images))
        net = Model(saved.arch, device="cpu", threads=threads)
        net.weights = saved.weights
        made = write_predictions(output, paths, classify_paths(net, paths, resize),
                                 saved.class_names, saved.arch.n_classes)
    except ConvnetError as e:
        fail(e)
    click.echo(f"convnet: wrote {output} ({made.what})")


@main.command()
def devices():
    """List CUDA devices (or why none) and the host thread count."""
    from .devices import report
    for line in report():
        click.echo(line)


if __name__ == "__main__":  # pragma: no cover
    main()
