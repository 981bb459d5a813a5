"""What every report page shares: the page frame and its style, escaping, tables, embedded
pictures, the sorting script, and the atomic write.

A page is one self-contained file: its style and script are inline, its charts inline SVG, its
pictures data URIs, so it works offline and can be mailed.
"""

import base64
import html
import math
import os

from ..errors import ConvnetError
from ..logs.results import write_atomic

REFRESH_SECONDS = 5          # how often the page of a run still going reloads itself

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif;
       margin: 1.5em auto; max-width: 1120px; padding: 0 1em; color: #1e1e1e; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 1.6em;
  border-bottom: 1px solid #d0d5de; } h3 { font-size: 1.05em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.92em; }
th, td { border: 1px solid #d0d5de; padding: 0.25em 0.6em; }
th { background: #eef1f6; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.status { display: inline-block; padding: 0.1em 0.6em; border-radius: 0.8em; font-weight: 600; }
.status-running { background: #fff3c4; } .status-done, .status-ok { background: #d7f2d9; }
.status-interrupted { background: #ffe0b8; } .status-error { background: #ffd0d0; }
.note { color: #555; } .error { color: #a00000; font-weight: 600; } .warning { color: #8a5a00; font-weight: 600; }
figure { margin: 0.8em 0; } figcaption { color: #555; font-size: 0.9em; }
figure img { image-rendering: pixelated; border: 1px solid #d0d5de; max-width: 100%; }
.cases { display: flex; flex-wrap: wrap; gap: 0.6em; }
figure.case { width: 9.5em; margin: 0; } figure.case img { width: 84px; }
svg { max-width: 100%; height: auto; }
pre { background: #f6f7f9; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th[aria-sort="ascending"]::after { content: " \\25B2"; }
table.sortable th[aria-sort="descending"]::after { content: " \\25BC"; }
tr.best td { font-weight: 600; background: #eaf1fd; }
"""

# Sorting: a click on a column heading sorts by it (again: the other way). The order is kept in
# the address (#sort=KEY or #sort=-KEY), so a sorted table can be linked to, and reloads keep it.
SORT_SCRIPT = """
(function () {
  function cellValue(row, index, numeric) {
    var cell = row.cells[index];
    var raw = cell.getAttribute("data-value");
    if (raw === null) raw = cell.textContent.trim();
    if (!numeric) return raw.toLowerCase();
    var v = parseFloat(raw);
    return isNaN(v) ? null : v;
  }
  function sortTable(table, key) {
    var descending = key.charAt(0) === "-";
    var name = descending ? key.slice(1) : key;
    var heads = table.tHead.rows[0].cells, index = -1;
    for (var i = 0; i < heads.length; i++) {
      heads[i].removeAttribute("aria-sort");
      if (heads[i].getAttribute("data-key") === name) index = i;
    }
    if (index < 0) return false;
    var numeric = heads[index].getAttribute("data-type") === "number";
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.forEach(function (r, n) { r.setAttribute("data-order", n); });
    rows.sort(function (a, b) {
      var x = cellValue(a, index, numeric), y = cellValue(b, index, numeric);
      if (x === y) return a.getAttribute("data-order") - b.getAttribute("data-order");
      if (x === null) return 1;                 /* unknown values last, either way */
      if (y === null) return -1;
      var c = x < y ? -1 : 1;
      return descending ? -c : c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    heads[index].setAttribute("aria-sort", descending ? "descending" : "ascending");
    table.setAttribute("data-sorted", key);
    return true;
  }
  function fromAddress() {
    var m = /sort=(-?[A-Za-z0-9_]+)/.exec(window.location.hash || "");
    if (!m) return;
    var tables = document.querySelectorAll("table.sortable");
    for (var i = 0; i < tables.length; i++) sortTable(tables[i], m[1]);
  }
  document.addEventListener("DOMContentLoaded", function () {
    var tables = document.querySelectorAll("table.sortable");
    for (var t = 0; t < tables.length; t++) {
      (function (table) {
        var heads = table.tHead.rows[0].cells;
        for (var i = 0; i < heads.length; i++) {
          heads[i].addEventListener("click", function () {
            var key = this.getAttribute("data-key");
            var now = table.getAttribute("data-sorted");
            window.location.hash = "sort=" + (now === key ? "-" + key : key);
          });
        }
      })(tables[t]);
    }
    fromAddress();
  });
  window.addEventListener("hashchange", fromAddress);
})();
"""


def esc(value):
    return html.escape("" if value is None else str(value), quote=True)


def number(value, spec=".6g", missing="-"):
    """A number as the page shows it ('-' when unknown or not finite)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return missing
    return format(value, spec)


def cell(value, spec=".6g", key=None):
    """A right-aligned number cell whose ``data-value`` holds the full value (for sorting and for
    programs reading the page)."""
    raw = "" if value is None else repr(value) if isinstance(value, float) else str(value)
    key_attr = f' data-key="{esc(key)}"' if key else ""
    return f'<td class="num"{key_attr} data-value="{esc(raw)}">{esc(number(value, spec))}</td>'


def table(head, rows, attrs=""):
    """A table: ``head`` a list of heading texts, ``rows`` lists of ready-made cell HTML (strings
    starting with '<td') or plain values (escaped)."""
    out = [f"<table{attrs}>", "<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head)
           + "</tr></thead>", "<tbody>"]
    for row in rows:
        cells = [c if isinstance(c, str) and c.startswith("<td") else f"<td>{esc(c)}</td>"
                 for c in row]
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def status_badge(status):
    word = (status or "unknown").split(":")[0]
    return f'<span class="status status-{esc(word)}" data-status="{esc(status)}">{esc(status)}</span>'


def data_uri(path, mime="image/png"):
    """A file as a data URI (None when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            payload = base64.b64encode(f.read()).decode("ascii")
    except OSError:
        return None
    return f"data:{mime};base64,{payload}"


def page(title, body, refresh=False, script=""):
    """A whole page. ``refresh``: the page reloads itself every REFRESH_SECONDS (a run still going);
    a page of something finished has no refresh at all."""
    head = ['<!DOCTYPE html>', '<html lang="en">', '<head>', '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">']
    if refresh:
        head.append(f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">')
    head += [f"<title>{esc(title)}</title>", f"<style>{STYLE}</style>"]
    if script:
        head.append(f"<script>{script}</script>")
    head.append("</head>")
    return "\n".join(head + ["<body>", body, "</body>", "</html>"]) + "\n"


def write_page(path, text):
    """Replace the page at ``path`` at once (temporary file, then rename)."""
    try:
        write_atomic(path, text)
    except OSError as e:
        raise ConvnetError(f"cannot write {path}: {e.strerror or e}") from None
    return path


def relative_link(target, start):
    """A link from a page in folder ``start`` to ``target`` (forward slashes)."""
    return os.path.relpath(os.path.abspath(target), os.path.abspath(start)).replace(os.sep, "/")
