"""The part of a batch page that a sweep adds: a table of the combinations (runs, and the mean,
standard deviation and 95 % interval of every measure, the best marked) and each measure drawn
against each swept value with its interval as error bars (convnet/stats.py computes them)."""

from ..display import figures as drawing
from ..stats import best_group, groups, measures_present, swept_names
from .html import cell, esc, number


def sweep_section(rows):
    """HTML of the combinations of the sweep rows among ``rows`` ('' when there are none)."""
    found = groups(rows)
    if not found:
        return ""
    best, words = best_group(found)
    present = measures_present(found)
    names = swept_names(found)
    head = ["control file", *names, "runs"]
    for _, title in present:
        head += [f"{title}: mean", "std", "95 % interval"]
    lines = ['<table id="groups"><thead><tr>' + "".join(f"<th>{esc(h)}</th>" for h in head)
             + "</tr></thead><tbody>"]
    for i, g in enumerate(found):
        mark = ' <span class="best-mark">(best)</span>' if i == best else ""
        cells = [f'<td data-key="file" data-value="{esc(g.file)}">{esc(g.file)}{mark}</td>']
        cells += [f'<td data-key="value:{esc(n)}" data-value="{esc(g.values.get(n, ""))}">'
                  f'{esc(g.values.get(n, "-"))}</td>' for n in names]
        cells.append(f'<td class="num" data-key="runs" data-value="{g.ok_runs}">'
                     f"{g.ok_runs} of {len(g.rows)}</td>")
        for key, _ in present:
            cells += _stat_cells(key, g.stats.get(key))
        row_class = ' class="best"' if i == best else ""
        lines.append(f"<tr{row_class}>" + "".join(cells) + "</tr>")
    lines.append("</tbody></table>")
    figures = _figures(found, names, present)
    return "\n".join([
        "<h2>Combinations</h2>",
        f'<p id="best-combination">Each combination over its runs that ended without error: '
        f"the mean, the standard deviation and the 95 % confidence interval of the mean "
        f"(Student's t). Best ({esc(words)}): "
        f"{esc(found[best].label() if best is not None else 'none')}.</p>",
        "\n".join(lines), "<h2>Each measure against each swept value</h2>",
        '<div class="sweep-plots">' + "\n".join(figures) + "</div>"])


def _stat_cells(key, stat):
    if stat is None:
        return [cell(None, ".6g", f"{key}_mean"), cell(None, ".4g", f"{key}_std"),
                '<td>-</td>']
    interval = ("-" if stat.low is None else
                f"{number(stat.low, '.4g')} to {number(stat.high, '.4g')}")
    return [cell(stat.mean, ".6g", f"{key}_mean"), cell(stat.std, ".4g", f"{key}_std"),
            f'<td data-key="{key}_ci95" data-value="{esc(stat.low)} {esc(stat.high)}">'
            f"{esc(interval)}</td>"]


def _figures(found, names, present):
    """One SVG per (measure, swept name): a line per combination of the other names. Every
    chart is asked for before any is taken, so the drawing process draws them side by side."""
    asked = []
    for key, title in present:
        for name in names:
            ticks = []
            for g in found:
                if g.values.get(name) not in ticks:
                    ticks.append(g.values.get(name))
            series = {}
            for g in found:
                others = ", ".join(f"{n} = {v}" for n, v in g.values.items() if n != name)
                line = series.setdefault((g.file, others), [(None, None)] * len(ticks))
                stat = g.stats.get(key)
                if stat is not None:
                    line[ticks.index(g.values.get(name))] = (stat.mean, stat.half_width)
            chart = drawing.Figure("svg", "errorbar_figure", ticks,
                                   [(label, pts) for (_, label), pts in series.items()],
                                   f"{title} against {name}", name, title)
            asked.append((key, name, chart))
    return [f'<figure data-measure="{esc(key)}" data-swept="{esc(name)}">{chart.result()}'
            "</figure>" for key, name, chart in asked]
