"""DIR/report.html of a batch: every run in a table that sorts by any column, each row linking to
that run's own report, and the curves of the last phase of all runs (refinement, in the book's
method) on one chart with the best marked.

The best run, among those that ran without error, is the one with the lowest test error when every
such run was tested (the measure that can be compared across runs of different nets), else the one
with the lowest final training criterion (the quantity the curves show); the page says which. A click on a column heading sorts by it; the order is kept in the
address (``report.html#sort=final_criterion``, ``#sort=-seconds``), so it can be linked to.
"""

import os

from ..display import figures
from ..logs.results import load_results
from ..errors import ConvnetError
from .html import SORT_SCRIPT, cell, esc, number, page, relative_link, status_badge, write_page
from .run_page import REPORT_NAME
from .sweep_section import sweep_section

# (key, heading, number format or None for text) of the table's columns, after the file; those
# in OPTIONAL_COLUMNS only when a row has a value there
COLUMNS = (("status", "status", None), ("weights", "weights", "d"),
           ("annealing_criterion", "annealing criterion", ".6g"),
           ("final_criterion", "final criterion", ".6g"),
           ("train_misclassification", "train error %", ".4f"),
           ("test_misclassification", "test error %", ".4f"),
           ("best_validation", "best validation error %", ".4f"),
           ("final_validation", "final validation error %", ".4f"),
           ("target_seconds", "seconds to target", ".2f"),
           ("target_evaluations", "evaluations to target", "d"),
           ("seconds", "seconds", ".2f"), ("device", "device", None))
OPTIONAL_COLUMNS = ("best_validation", "final_validation", "target_seconds", "target_evaluations")


def last_phase(folder):
    """The last phase of the last TRAIN of the run in ``folder`` (results data; {} when none)."""
    try:
        data = load_results(folder)
    except ConvnetError:
        return {}
    trains = [r for r in data.get("runs") or [] if r["command"] == "TRAIN"]
    phases = trains[-1].get("phases") if trains else None
    return phases[-1] if phases else {}


def last_phase_curve(phase):
    """(step, criterion) points of a phase entry."""
    return [(p[0], p[1]) for p in phase.get("trace") or []]


def best_index(rows):
    """Index of the best ok row (see the module notes; None when there is none)."""
    return best_and_measure(rows)[0]


def best_and_measure(rows):
    """(index of the best ok row, what 'best' means in words): the lowest test error when every
    ok row has one, else the lowest final training criterion."""
    done = [(i, r) for i, r in enumerate(rows) if r is not None and r.ok]
    if done and all(r.test_misclassification is not None for _, r in done):
        scored = [(r.test_misclassification, _or_inf(r.final_criterion), i) for i, r in done]
        return min(scored)[2], "the lowest test error"
    scored = [(r.final_criterion, i) for i, r in done if r.final_criterion is not None]
    return (min(scored)[1] if scored else None), "the lowest final training criterion"


def _or_inf(value):
    return float("inf") if value is None else value


def batch_page(rows, out):
    """The page's HTML for batch rows (convnet.batch.BatchRow) whose runs lie under ``out``."""
    rows = [r for r in rows if r is not None]
    best, measure = best_and_measure(rows)
    columns = [c for c in COLUMNS if c[0] not in OPTIONAL_COLUMNS
               or any(getattr(r, c[0]) is not None for r in rows)]
    head = "".join(f'<th data-key="{key}" data-type="{"text" if spec is None else "number"}">'
                   f"{esc(title)}</th>" for key, title, spec in columns)
    lines = ['<table class="sortable" id="batch"><thead><tr>'
             '<th data-key="file" data-type="text">control file</th>' + head + "</tr></thead>",
             "<tbody>"]
    for i, row in enumerate(rows):
        report = os.path.join(row.out, REPORT_NAME)
        name = esc(row.name or row.file) + (" (reused)" if row.reused else "")
        if os.path.isfile(report):
            name = f'<a href="{esc(relative_link(report, out))}">{name}</a>'
        if i == best:
            name += ' <span class="best-mark">(best)</span>'
        cells = [f'<td data-key="file" data-value="{esc(row.file)}">{name}</td>']
        for key, _, spec in columns:
            value = getattr(row, key)
            if key == "status":
                cells.append(f'<td data-key="status" data-value="{esc(value)}">'
                             f"{status_badge(value)}</td>")
            elif spec is None:
                cells.append(f'<td data-key="{key}" data-value="{esc(value or "")}">'
                             f"{esc(value or '-')}</td>")
            else:
                cells.append(cell(value, spec, key))
        mark = ' class="best"' if i == best else ""
        lines.append(f"<tr{mark}>" + "".join(cells) + "</tr>")
    lines.append("</tbody></table>")
    lasts = [last_phase(r.out) for r in rows]
    curves = [(os.path.basename(os.path.normpath(r.out)), last_phase_curve(p))
              for r, p in zip(rows, lasts)]
    named = next((p for p in lasts if p), {})
    title, unit = named.get("title") or "Refinement", named.get("unit") or "iteration"
    # asked for now, taken once the sweep's charts are asked for too: drawn side by side
    chart = figures.Figure("svg", "overlay_figure", curves, best=best,
                           title=f"{title} of every run", unit=unit)
    failed = sum(not r.ok for r in rows)
    best_text = ("no run finished without error" if best is None else
                 f"best ({measure}): {rows[best].file} (test error "
                 f"{number(rows[best].test_misclassification, '.4f')} %, final criterion "
                 f"{number(rows[best].final_criterion)})")
    body = [f"<h1>convnet batch: {esc(os.path.abspath(out))}</h1>",
            f"<p>{len(rows)} {'runs' if any(r.combination for r in rows) else 'control files'}, "
            f"{len(rows) - failed} without error"
            f"{f' ({sum(r.reused for r in rows)} reused)' if any(r.reused for r in rows) else ''}; "
            f'<span id="best">{esc(best_text)}</span>. Click a column heading to sort by it.</p>',
            "\n".join(lines), sweep_section(rows), f"<h2>{esc(title)} of every run</h2>",
            f"<figure>{chart.result()}<figcaption>The criterion of each run's last TRAIN "
            f"against the {esc(unit)} of its last phase; the best run is drawn thick."
            "</figcaption></figure>"]
    return page(f"convnet batch: {os.path.basename(os.path.abspath(out))}", "\n".join(body),
                script=SORT_SCRIPT)


def write_batch_report(rows, out):
    """Write ``out``/report.html; returns its path."""
    return write_page(os.path.join(out, REPORT_NAME), batch_page(rows, out))
