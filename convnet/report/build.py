"""``convnet report PATH ...``: the HTML pages of runs and batches made earlier.

A PATH may be a run's folder (with results.json or CONVNET.LOG), a CONVNET.LOG or results.json
file, or a batch folder (with summary.csv): a run gets report.html beside its log, a batch gets
report.html for each of its runs and DIR/report.html for the whole.
"""

import os

from ..errors import ConvnetError
from ..logs.results import RESULTS_NAME, load_results
from .batch_page import write_batch_report
from .html import write_page
from .run_page import REPORT_NAME, run_page

SUMMARY_NAME = "summary.csv"


def write_run_report(path):
    """report.html for the run whose folder, log or results.json is ``path``; returns its path."""
    path = os.fspath(path)
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    data = load_results(path)
    return write_page(os.path.join(folder, REPORT_NAME), run_page(data, folder))


def _is_run(folder):
    return any(os.path.isfile(os.path.join(folder, n)) for n in (RESULTS_NAME, "CONVNET.LOG"))


def write_reports(paths, read_batch_rows):
    """Write the pages for every PATH; returns the paths written (a ConvnetError names a PATH
    that is none of the kinds above). ``read_batch_rows(folder)`` gives a batch folder's rows
    (the batch runner's ``read_summary``: the rows are its own, and the pages sit below it)."""
    written = []
    for path in paths:
        path = os.fspath(path)
        if os.path.isdir(path) and os.path.isfile(os.path.join(path, SUMMARY_NAME)):
            rows = read_batch_rows(path)
            for row in rows:
                if os.path.isdir(row.out) and _is_run(row.out):
                    written.append(write_run_report(row.out))
            written.append(write_batch_report(rows, path))
        elif (os.path.isdir(path) and _is_run(path)) or os.path.isfile(path):
            written.append(write_run_report(path))
        elif os.path.isdir(path):
            raise ConvnetError("not a run folder (no results.json or CONVNET.LOG) nor a batch "
                               f"folder (no {SUMMARY_NAME})", path)
        else:
            raise ConvnetError("no such file or folder", path)
    return written
