"""Where a run's results go, so that no run replaces an earlier one's unless asked.

``convnet run`` without --out gives each run a folder of its own, ``runs/<stem>-<n>`` (n one more
than the highest already there); an --out that holds an earlier run's results is refused unless
--overwrite says to replace them. Checking the control files before any folder is made means a
mistyped name writes nothing at all.
"""

import os
import re

from .errors import ConvnetError
from .runlock import LOCK_NAME, holder_is_alive, read_lock

RUNS_FOLDER = "runs"
# What a run writes first: a folder holding one of these holds an earlier run's results.
RESULT_FILES = ("CONVNET.LOG", "results.json")


def earlier_run(folder):
    """The first of RESULT_FILES in ``folder``, or None when it holds no earlier run."""
    for name in RESULT_FILES:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    return None


def check_control_files(paths):
    """A missing control file, or a folder given as one, before anything is written anywhere
    (the parser words the same errors; anything else it finds when it reads the file)."""
    for path in paths:
        if os.path.isdir(path):
            raise ConvnetError("is a folder, not a control file", path)
        if not os.path.exists(path):
            raise ConvnetError("control file not found", path)


def new_run_folder(first_control_file, parent=RUNS_FOLDER):
    """Make and return ``parent/<stem>-<n>``, n one more than the highest used for that stem
    (from 1); made with mkdir, so two runs started at once never share a folder."""
    stem = os.path.splitext(os.path.basename(first_control_file))[0] or "run"
    stem = re.sub(r"[^\w.-]+", "_", stem)
    pattern = re.compile(re.escape(stem) + r"-(\d+)$")
    used = [int(m.group(1)) for name in _names(parent) for m in [pattern.match(name)] if m]
    number = max(used, default=0) + 1
    try:
        os.makedirs(parent, exist_ok=True)
        while True:
            folder = os.path.join(parent, f"{stem}-{number}")
            try:
                os.mkdir(folder)
                return folder
            except FileExistsError:
                number += 1
    except OSError as e:
        raise ConvnetError(f"cannot create a run folder in '{parent}': {e.strerror or e}") from None


def _in_use(folder):
    """A live run holds the folder: its lock's own message (the session's RunLock) says more."""
    path = os.path.join(folder, LOCK_NAME)
    holder = read_lock(path) if os.path.exists(path) else None
    return holder is not None and holder_is_alive(holder, path)


def _names(folder):
    try:
        return os.listdir(folder)
    except OSError:
        return []


def choose_out(out, control_files, overwrite=False):
    """The folder a run writes to: ``out`` when given (refused when it holds an earlier run's
    results, unless ``overwrite``), else a new folder under runs/. Returns (folder, chosen):
    ``chosen`` is True when the folder was picked here (the caller says where it is)."""
    check_control_files(control_files)
    if out is None:
        return new_run_folder(control_files[0]), True
    previous = earlier_run(out)
    if previous is not None and not overwrite and not _in_use(out):
        raise ConvnetError(f"'{out}' holds an earlier run's results ({os.path.basename(previous)}); "
                           "give another --out, leave --out out for a new folder under "
                           f"{RUNS_FOLDER}/, or add --overwrite to replace them")
    return out, False
