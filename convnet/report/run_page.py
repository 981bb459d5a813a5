"""report.html of one run: everything results.json holds, for a person, in one offline page.

The page shows the session (control files, seed, device, status and any error with its FILE:LINE),
a table of every TRAIN and TEST, and for each of them its architecture, the parameters in force,
the criterion curve of each phase of a TRAIN, the confusion matrix as a heat map with
counts, and the times; then the pictures the run made, the models it saved or loaded and, for a GPU
run, CUDA.LOG. The numbers a program may want from the page carry ``data-key`` and ``data-value``.

While the run is still going (status "running") the page reloads itself every few seconds; once
the run has ended it has no refresh.
"""

import glob
import os
import re

from ..display import figures
from ..logs.results import target_words
from ..params import DEFAULTS
from .html import (REFRESH_SECONDS, cell, data_uri, esc, number, page, status_badge, table)

REPORT_NAME = "report.html"


class FigureCache:
    """The SVG charts of a page. ``get`` asks for a chart and puts a mark in its place; ``fill``
    puts each chart in place of its mark, so the charts of one page are drawn side by side.
    A finished run does not change, so its charts are kept (by key) between rewrites of a live
    page and drawn once."""

    MARK = re.compile("\x00chart (\\d+)\x00")

    def __init__(self):
        self.svg = {}
        self.asked = []

    def get(self, key, builder, *args, **kwargs):
        """The mark of ``plots.<builder>(*args, **kwargs)``; ``key`` None: a chart not kept."""
        chart = self.svg.get(key) if key is not None else None
        if chart is None:
            chart = figures.Figure("svg", builder, *args, **kwargs)
            if key is not None:
                self.svg[key] = chart
        self.asked.append(chart)
        return f"\x00chart {len(self.asked) - 1}\x00"

    def fill(self, text):
        """``text`` with every chart in place of its mark."""
        asked, self.asked = self.asked, []
        return self.MARK.sub(lambda m: asked[int(m.group(1))].result(), text)


def _where(run):
    if run.get("control_file") is None:
        return "-"
    return f"{run['control_file']}:{run['line']}" if run.get("line") else run["control_file"]


def _run_status(run):
    if run.get("status") == "error" and run.get("error"):
        return "error"
    return run.get("status") or "unknown"


def _phase_names(runs):
    """The names of the phases of every TRAIN, in the order they first appear."""
    names = []
    for r in runs:
        names += [p["name"] for p in r.get("phases") or [] if p["name"] not in names]
    return names


def summary_table(runs):
    names = _phase_names(runs)
    head = (["#", "command", "where", "device", "weights"] + [f"{n} criterion" for n in names]
            + ["final criterion", "misclassification %", "cases", "seconds", "status"])
    rows = []
    for r in runs:
        arch = r.get("architecture") or {}
        phases = {p["name"]: p for p in r.get("phases") or []}
        rows.append([f'<td><a href="#run-{r["index"]}">{r["index"]}</a></td>', r["command"],
                     _where(r), r.get("device") or "-",
                     cell(arch.get("total_weights"), "d", "weights")]
                    + [cell((phases.get(n) or {}).get("criterion"), ".6g", f"{n}_criterion")
                       for n in names]
                    + [cell(r.get("final_criterion"), ".6g", "final_criterion"),
                     cell(r.get("misclassification"), ".4f", "misclassification"),
                     cell(r.get("n_cases"), "d", "n_cases"),
                     cell((r.get("seconds") or {}).get("total"), ".2f", "seconds"),
                     f"<td>{status_badge(_run_status(r))}</td>"])
    return table(head, rows, ' id="runs"')


def architecture_table(arch):
    if not arch.get("layers"):            # read from an English log: its report lines
        return "<pre>" + esc("\n".join(arch.get("report") or ["(no architecture recorded)"])) \
            + "</pre>"
    rows = []
    for layer in arch["layers"]:
        line = "output (SoftMax)" if layer.get("output") else layer.get("line")
        rows.append([layer["index"], line, layer["height"], layer["width"], layer["depth"],
                     cell(layer["weights"], "d")])
    rows.append(["", "total", "", "", "", cell(arch.get("total_weights"), "d")])
    bands = f"{arch['bands']} band{'' if arch['bands'] == 1 else 's'}"
    caption = (f"<p>Input: {arch['rows']} rows, {arch['cols']} columns, {bands}; "
               f"{arch['classes']} classes.</p>")
    return caption + table(["layer", "line", "high", "wide", "deep", "weights"], rows)


def parameters_table(params, seed=None):
    """The parameters in force; the seed the run used where RANDOM SEED was not set, and the
    SERIES and IMAGE settings only where one was set (they matter only to READ SERIES, READ
    IMAGES and CLASSIFY)."""
    if not params:
        return '<p class="note">No parameters recorded.</p>'
    rows = []
    for name, value in sorted(params.items()):
        if name.startswith(("SERIES ", "IMAGE ")) and value == DEFAULTS.get(name):
            continue
        if name == "RANDOM SEED" and value is None and seed is not None:
            value = f"{seed} (the session's seed)"
        rows.append([name, "default (none)" if value is None else value])
    return table(["parameter", "value"], rows, ' class="parameters"')


def seconds_table(seconds):
    if not seconds:
        return ""
    return table(["phase", "seconds"], [[k, cell(v, ".3f")] for k, v in seconds.items()])


def _figure(svg, caption):
    return f"<figure>{svg}<figcaption>{esc(caption)}</figcaption></figure>"


def run_section(run, cache, seed=None, folder="."):
    """One TRAIN or TEST (``folder``: the run's, where its pictures are)."""
    done = run.get("status") != "running"
    key = run["index"] if done else None
    out = [f'<section id="run-{run["index"]}">',
           f'<h2>{esc(run["command"])} {run["index"]} <small>({esc(_where(run))})</small> '
           f'{status_badge(_run_status(run))}</h2>']
    if run.get("error"):
        out.append(f'<p class="error">{esc(run["error"])}</p>')
    for warning in run.get("warnings") or []:
        out.append(f'<p class="warning">Warning: {esc(warning)}</p>')
    facts = [("device", run.get("device") or "-"), ("threads", run.get("threads") or "-")]
    for phase in run.get("phases") or []:
        facts += [(f"{phase['name']} criterion", number(phase.get("criterion"))),
                  (f"{phase['name']} {phase.get('unit') or 'step'}s",
                   number(phase.get("steps"), "d")),
                  (f"{phase['name']} ended because", phase.get("stop_words") or "-")]
    facts += [("final criterion", number(run.get("final_criterion"))),
              ("misclassification %", number(run.get("misclassification"), ".4f")),
              ("cases", number(run.get("n_cases"), "d"))]
    out.append(table(["", ""], [[k, v] for k, v in facts]).replace(
        "<thead><tr><th></th><th></th></tr></thead>", ""))
    if run["command"] == "TRAIN":
        phases = run.get("phases") or []
        svg = cache.get(("curve", key) if key else None, "criterion_figure", phases,
                        size=(1040, 400))
        out.append("<h3>Criterion</h3>")
        words = ", ".join(f"{p.get('title') or p['name']} ({p.get('unit') or 'step'}s)"
                          for p in phases) or "No phase started"
        out.append(_figure(svg, words + ("" if done else " so far")))
    if run.get("validation"):
        out.append(validation_section(run, cache, key, done))
    if run.get("confusion"):
        svg = cache.get(("confusion", key) if key else None, "confusion_figure", run["confusion"],
                        title=f"{run['command']} {run['index']}: "
                              f"{number(run.get('misclassification'), '.4f')} % misclassified",
                        class_names=run.get("class_names"))
        out.append("<h3>Confusion matrix</h3>")
        out.append(_figure(svg, "Rows: true class; columns: predicted class; colour: percent of "
                                "the true class; numbers: cases"))
    if run.get("most_wrong"):
        out.append(most_wrong_section(run, folder))
    out.append("<h3>Architecture</h3>")
    out.append(architecture_table(run.get("architecture") or {}))
    out.append("<h3>Parameters in force</h3>")
    out.append(parameters_table(run.get("parameters"), seed))
    if run.get("seconds"):
        out.append("<h3>Times</h3>")
        out.append(seconds_table(run["seconds"]))
    out.append("</section>")
    return "\n".join(out)


def most_wrong_section(run, folder):
    """The cases a TEST got most wrong (the largest negative log likelihood first): each case's
    picture, its true and predicted class and their probabilities."""
    items = []
    for case in run["most_wrong"]:
        uri = data_uri(os.path.join(folder, case["file"])) if case.get("file") else None
        picture = (f'<img src="{uri}" alt="case {case["case"]}">' if uri else
                   f'<span class="note">{esc(case.get("file"))}: not found</span>')
        source = f'<br>{esc(case["source"])}' if case.get("source") else ""
        items.append(
            f'<figure class="case" data-case="{case["case"]}" data-true="{esc(case["true_name"])}"'
            f' data-predicted="{esc(case["predicted_name"])}" data-p-true="{case["p_true"]!r}">'
            f'{picture}<figcaption>case {case["case"]}{source}<br>'
            f'true <b>{esc(case["true_name"])}</b> (p {number(case["p_true"], ".3f")}), '
            f'predicted <b>{esc(case["predicted_name"])}</b> '
            f'(p {number(case["p_predicted"], ".3f")})</figcaption></figure>')
    return (f'<h3>Most wrong cases</h3><p class="note">The {len(items)} cases with the largest '
            'negative log likelihood of their true class, worst first.</p>'
            f'<div class="cases" id="most-wrong-{run["index"]}">' + "".join(items) + "</div>")


def predictions_section(data):
    """The predictions CSV files CLASSIFY wrote."""
    made = data.get("predictions") or []
    if not made:
        return ""
    rows = [[f'<td><a href="{esc(p["file"])}">{esc(p["file"])}</a></td>', p.get("what") or "",
             f"{p.get('control_file') or '-'}:{p.get('line') or '-'}"] for p in made]
    return '<section id="predictions"><h2>Predictions</h2>' + table(
        ["file", "what", "where"], rows) + "</section>"


def validation_section(run, cache, key, done):
    """A TRAIN's validation checks: their curves and what they came to."""
    summary = run.get("validation_summary") or {}
    cases = summary.get("cases") or "validation"
    target = (summary.get("target") or {}).get("error")
    svg = cache.get(("validation", key) if key else None, "validation_figure", run["validation"],
                    target, cases)
    out = ["<h3>Validation</h3>", _figure(svg, f"Misclassification of the {cases} cases at each "
                                          "check" + ("" if done else " so far"))]
    best = summary.get("best")
    facts = []
    if best:
        facts.append(["lowest error %", f"{number(best['error'], '.4f')} ({best['phase']} "
                                        f"{best['step']})"])
    if summary.get("kept_best"):
        facts.append(["weights kept", "the lowest error's"])
    words = target_words(summary)
    if words:
        facts.append(["time to accuracy", words])
    if facts:
        out.append(table(["", ""], facts).replace("<thead><tr><th></th><th></th></tr></thead>", ""))
    return "\n".join(out)


def _pictures(data, folder):
    """(file, caption) of every picture: those results.json lists, or for a run read from its
    English log the PNG files in its folder."""
    if data.get("pictures"):
        out = []
        for p in data["pictures"]:
            where = f" ({p['control_file']}:{p['line']})" if p.get("control_file") else ""
            out.append((p["file"], f"{p['file']}: {p.get('what', '')}{where}"))
        return out
    if data.get("from_log"):
        return [(os.path.basename(f), os.path.basename(f))
                for f in sorted(glob.glob(os.path.join(folder, "*.png")))]
    return []


def pictures_section(data, folder):
    items = []
    for name, caption in _pictures(data, folder):
        path = name if os.path.isabs(name) else os.path.join(folder, name)
        uri = data_uri(path)
        if uri is None:
            items.append(f'<p class="note">{esc(name)}: not found</p>')
        else:
            items.append(f'<figure><img src="{uri}" alt="{esc(name)}">'
                         f'<figcaption>{esc(caption)}</figcaption></figure>')
    if not items:
        return ""
    return '<section id="pictures"><h2>Pictures</h2>\n' + "\n".join(items) + "</section>"


def cuda_section(data, folder):
    name = data.get("cuda_log")
    path = os.path.join(folder, name or "CUDA.LOG")
    if not os.path.isfile(path):
        return ""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    return f'<section id="cuda"><h2>CUDA.LOG</h2><pre>{esc(text)}</pre></section>'


def models_section(data):
    models = data.get("models") or []
    if not models:
        return ""
    rows = [[m["action"], m["file"], f"{m.get('control_file') or '-'}:{m.get('line') or '-'}",
             cell((m.get("architecture") or {}).get("total_weights"), "d")] for m in models]
    return '<section id="models"><h2>Models</h2>' + table(
        ["action", "file", "where", "weights"], rows) + "</section>"


def interrupted_phases(data):
    """'TRAIN 1 refinement' for every phase a Ctrl-C ended early (the session may still be done)."""
    return [f"{run['command']} {run['index']} {phase['name']}"
            for run in data.get("runs") or [] for phase in run.get("phases") or []
            if phase.get("interrupted")]


def session_header(data):
    s = data.get("session") or {}
    status = data.get("status", "unknown")
    files = ", ".join(s.get("control_files") or []) or "-"
    out = [f'<h1>convnet run: {esc(files)}</h1>',
           f'<p>Status: {status_badge(status)}</p>']
    cut_short = interrupted_phases(data)
    if cut_short:
        out.append('<p class="warning" id="interrupted">Interrupted by the user (Ctrl-C): '
                   f'{esc(", ".join(cut_short))}; the results that follow are those of the best '
                   'weights found until then.</p>')
    error = data.get("error")
    if error:
        where = ""
        if error.get("file"):
            where = f"{error['file']}:{error['line']}: " if error.get("line") else \
                f"{error['file']}: "
        out.append(f'<p class="error" id="error" data-file="{esc(error.get("file"))}" '
                   f'data-line="{esc(error.get("line"))}">{esc(where + error["message"])}</p>')
    if status == "running":
        out.append(f'<p class="note" id="live">The run is going on: this page is rewritten every '
                   f'few seconds and reloads itself every {REFRESH_SECONDS} s.</p>')
    facts = [("convnet", data.get("convnet_version") or "-"),
             ("seed", "-" if s.get("seed") is None else
              f"{s['seed']}{' (chosen at random)' if s.get('seed_given') is False else ''}"),
             ("device asked for", s.get("device") or "-"),
             ("threads asked for", s.get("threads") or "all cores"),
             ("started", data.get("started") or "-"),
             ("finished" if data.get("finished") else "updated",
              data.get("finished") or data.get("updated") or "-")]
    if data.get("from_log"):
        facts.append(("read from", data["from_log"] + " (no results.json beside it)"))
    out.append(table(["", ""], [[k, v] for k, v in facts]).replace(
        "<thead><tr><th></th><th></th></tr></thead>", ""))
    return "\n".join(out)


def _batch_link(folder):
    """A link back to the batch page when the run is one of a batch's (its folder's parent holds
    the batch's summary.csv and report)."""
    parent = os.path.dirname(os.path.abspath(folder))
    if not os.path.isfile(os.path.join(parent, "summary.csv")):
        return ""
    return f'<p class="note" id="batch-link"><a href="../{REPORT_NAME}">Back to the batch</a></p>'


def run_page(data, folder, cache=None):
    """The page's HTML for results ``data`` of the run in ``folder``."""
    cache = cache or FigureCache()
    runs = data.get("runs") or []
    body = [_batch_link(folder), session_header(data), "<h2>TRAIN and TEST</h2>",
            summary_table(runs) if runs else '<p class="note">No TRAIN or TEST yet.</p>']
    body += [run_section(r, cache, (data.get("session") or {}).get("seed"), folder)
             for r in runs]
    body += [pictures_section(data, folder), predictions_section(data), models_section(data),
             cuda_section(data, folder)]
    files = ", ".join((data.get("session") or {}).get("control_files") or []) or "run"
    return page(f"convnet: {files}", cache.fill("\n".join(b for b in body if b)),
                refresh=data.get("status") == "running")
