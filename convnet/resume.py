"""What a batch runs, and which of its runs an earlier start of the same batch already finished.

The plan. Every control file is one run in ``OUT/<stem>`` (repeated stems ``<stem>-2``, ...); a
sweep file (SWEEP lines, see sweep.py) is one run per combination and seed in
``OUT/<stem>/<values>_seed=<s>``.

The batch folder. ``OUT/batch.json`` names the control files of the batch that owns the folder.
The same files again into the same --out resume that batch; other files are refused unless
--overwrite (which reruns everything); so is a folder with a summary.csv but no batch.json.

Reuse. A run is reused when its results.json says it finished (status done) and its ``inputs``
equal those of the run about to start: the control text after expansion (sha256), the seed asked
for (null: chosen at random), the content of every data or model file it reads (sha256 of each
file, of each file in a folder), the --device asked for and the convnet version. A failed or
interrupted run, or one whose inputs changed, runs again. The batch writes ``inputs`` (and
``batch_seconds``) into results.json when the run has ended.
"""

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Dict, Optional

from ._version import __version__
from .errors import ConvnetError
from .logs.results import RESULTS_NAME, read_results, write_atomic, write_results
from .sweep import folder_name, parse_control, run_seeds, sweep_of, values_text

BATCH_NAME = "batch.json"
BATCH_FORMAT = "convnet-batch"
BATCH_VERSION = 1


@dataclass
class PlannedRun:
    """One run of a batch: its control file as given, its folder, the seed asked for, and for a
    sweep file the combination's number and values; ``error`` when it cannot start at all."""

    file: str
    folder: str
    seed: Optional[int] = None
    sweep_run: Optional[int] = None
    values: Dict[str, str] = field(default_factory=dict)
    error: Optional[str] = None

    @property
    def name(self):
        """The control file, and for a sweep run its values and seed."""
        if self.sweep_run is None:
            return self.file
        return f"{self.file} [{values_text(self.values)}; seed {self.seed}]"


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


def plan_runs(files, out, seed=None, allow_large=False):
    """Every run of a batch, in order; a sweep file that is wrong in itself (an empty list, too
    many runs, ...) raises its ConvnetError, since nobody can say which runs it means."""
    runs = []
    for path, folder in zip(files, output_folders(files, out)):
        if not os.path.isfile(path):
            runs.append(PlannedRun(path, folder, seed, error=f"{path}: no such control file"))
            continue
        sweep = sweep_of(path, allow_large=allow_large)
        if sweep is None:
            runs.append(PlannedRun(path, folder, seed))
            continue
        used = set()
        for number in range(1, sweep.combinations + 1):
            values = sweep.values(number)
            for run_seed in run_seeds(sweep, seed):
                name = folder_name(values, run_seed)
                while name in used:            # two values that look alike on a disk
                    name += "+"
                used.add(name)
                runs.append(PlannedRun(path, os.path.join(folder, name), run_seed, number,
                                       values))
    return runs


# ------------------------------------------------------------------ fingerprints
def file_digest(path):
    """SHA-256 of a file, hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def content_digest(path):
    """sha256 of a file, or of a folder's files or a file pattern's matches (CLASSIFY's) (their
    names and contents); None when there is nothing to read."""
    if os.path.isfile(path):
        return file_digest(path)
    if not os.path.isdir(path):
        return _matches_digest(path)
    digest = hashlib.sha256()
    for top, dirs, names in sorted(os.walk(path)):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(top, name)
            digest.update(f"{os.path.relpath(full, path)}\0{file_digest(full)}\n".encode())
    return digest.hexdigest()


def _matches_digest(pattern):
    """sha256 of the image files a pattern such as "new/*.png" matches; None when none does."""
    from .data.images import PATTERN_CHARACTERS, input_files
    files = input_files(pattern) if any(c in pattern for c in PATTERN_CHARACTERS) else []
    if not files:
        return None
    digest = hashlib.sha256()
    for full in files:
        digest.update(f"{full}\0{file_digest(full)}\n".encode())
    return digest.hexdigest()


def run_inputs(run, device, digests=None):
    """The inputs of a planned run (see the module notes); None when its file does not parse
    (such a run is never reused: its session says what is wrong). ``digests``, a dict shared by
    the runs of one batch, keeps each data file's digest so that the runs of a sweep, which read
    the same files, read each of them once."""
    digests = {} if digests is None else digests
    try:
        commands, lines, _ = parse_control(run.file, sweep_run=run.sweep_run)
    except ConvnetError:
        return None
    files = {}
    for cmd in commands:
        path = cmd.args.get("path")
        if path is not None:
            full = os.path.abspath(path)
            if full not in digests:
                digests[full] = content_digest(path)
            files[full] = digests[full]
    control = hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()
    return {"control_sha256": control, "seed": run.seed, "files": files, "device": device,
            "convnet_version": __version__}


def finished_with(folder, inputs):
    """The results data of a run in ``folder`` that finished with these inputs, else None."""
    if inputs is None:
        return None
    try:
        data = read_results(os.path.join(folder, RESULTS_NAME))
    except (ConvnetError, OSError, ValueError):
        return None
    if data.get("status") != "done" or data.get("inputs") != inputs:
        return None
    return data


def record_inputs(folder, inputs, seconds):
    """Write a finished run's inputs and the batch's seconds for it into its results.json."""
    path = os.path.join(folder, RESULTS_NAME)
    try:
        data = read_results(path)
    except (ConvnetError, OSError, ValueError):
        return
    data["inputs"] = inputs
    data["batch_seconds"] = None if seconds is None else round(seconds, 3)
    write_results(path, data)


# ------------------------------------------------------------------ the batch folder
def open_batch_folder(out, files, overwrite=False):
    """Make ``out`` the folder of this batch: True when it resumes the same batch (its finished
    runs may be reused), False for a new one. Another batch's folder is refused unless
    ``overwrite``."""
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise ConvnetError(f"cannot create the batch folder {out}: {e.strerror or e}") from None
    path = os.path.join(out, BATCH_NAME)
    try:
        with open(path, encoding="utf-8") as f:
            earlier = json.load(f).get("control_files")
    except (OSError, ValueError, AttributeError):
        earlier = None
    same = earlier == list(files)
    if not overwrite:
        if earlier is not None and not same:
            raise ConvnetError(f"'{out}' holds the results of another batch (of "
                               f"{' '.join(earlier)[:200]}); give another --out, or add "
                               "--overwrite to replace them")
        if earlier is None and os.path.isfile(os.path.join(out, "summary.csv")):
            raise ConvnetError(f"'{out}' holds an earlier batch's results (summary.csv); give "
                               "another --out, or add --overwrite to replace them")
    write_atomic(path, json.dumps({"format": BATCH_FORMAT, "format_version": BATCH_VERSION,
                                   "control_files": list(files)}, indent=1) + "\n")
    return same and not overwrite
