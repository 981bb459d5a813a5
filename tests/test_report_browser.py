"""The HTML reports opened in a real browser (headless Chromium): the page after its scripts ran
shows the numbers of results.json, its screenshot is a picture, the batch table sorts, and only a
report of a run still going refreshes itself.

These tests skip only when no Chromium can be found (the README's test command installs it).
"""

import json
import os
import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest
from PIL import Image

from convnet.batch import run_batch
from convnet.session import run

BROWSERS = ("chromium", "chromium-browser", "chromium-headless-shell", "headless_shell",
            "google-chrome", "google-chrome-stable", "chrome")


def find_browser():
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


BROWSER = find_browser()
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium found (install the distribution's chromium package)")


def browser(*args, timeout=180):
    """Run headless Chromium; its standard output."""
    cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-extensions", "--allow-file-access-from-files", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def dom(path, fragment=""):
    """The document after its scripts ran, as Chromium serializes it."""
    text = browser("--dump-dom", "file://" + os.path.abspath(path) + fragment)
    assert "<body" in text
    return text


def screenshot(path, picture, size=(1200, 1600)):
    browser(f"--window-size={size[0]},{size[1]}", "--hide-scrollbars",
            f"--screenshot={picture}", "file://" + os.path.abspath(path))
    with Image.open(picture) as im:
        return np.asarray(im.convert("RGB"))


class Cells(HTMLParser):
    """Every element's attributes, and for table rows the data-key -> data-value of their cells."""

    def __init__(self, text):
        super().__init__()
        self.elements = []             # (tag, attrs)
        self.rows = {}                 # table id -> [ {key: value} ]
        self._table = None
        self._row = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.elements.append((tag, attrs))
        if tag == "table":
            self._table = attrs.get("id")
            self.rows.setdefault(self._table, [])
        elif tag == "tr" and self._table is not None:
            self._row = {"_class": attrs.get("class")}
        elif tag == "td" and self._row is not None and "data-key" in attrs:
            self._row[attrs["data-key"]] = attrs.get("data-value")

    def handle_endtag(self, tag):
        if tag == "tr" and self._row is not None:
            if len(self._row) > 1:
                self.rows[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def meta_refresh(self):
        return [a for t, a in self.elements if t == "meta" and a.get("http-equiv") == "refresh"]


def assert_not_blank(pixels):
    colours = len(np.unique(pixels.reshape(-1, 3), axis=0))
    ink = (pixels.astype(int).sum(axis=2) < 600).mean()
    assert colours > 50 and ink > 0.01, (colours, ink)


RUN = """\
MAKE IMAGE 6 6 1 3 45
CONVOLUTIONAL LAYER 2 1 1 1 1 1 1
ANNEAL ITERS = 6
MAXITERS = 6
TRAIN
DISPLAY TRAINING IMAGES 1 2 3 "training.png"
CLEAR
MAKE IMAGE 6 6 1 3 30
TEST
"""


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser")
    ctl = folder / "run.ctl"
    ctl.write_text(RUN)
    out = folder / "out"
    run([str(ctl)], out=str(out), device="cpu", seed=5, threads=1)
    with open(out / "results.json", encoding="utf-8") as f:
        return out, json.load(f)


def test_run_report_in_the_browser_shows_the_numbers_of_results_json(finished_run, tmp_path):
    out, data = finished_run
    page = Cells(dom(out / "report.html"))
    rows = page.rows["runs"]
    assert len(rows) == len(data["runs"]) == 2
    for row, result in zip(rows, data["runs"]):
        assert float(row["final_criterion"]) == result["final_criterion"]
        assert float(row["misclassification"]) == result["misclassification"]
        assert int(row["weights"]) == result["architecture"]["total_weights"]
    assert page.meta_refresh() == []                       # a finished run does not refresh
    images = [a["src"] for t, a in page.elements if t == "img"]
    assert len(images) == 2 + len(data["runs"][1]["most_wrong"])    # pictures, most wrong cases
    assert all(s.startswith("data:image/png;base64,") for s in images)
    # self-contained: nothing is fetched from anywhere
    fetched = [a.get("src") or a.get("href") for t, a in page.elements
               if t in ("img", "script", "link", "iframe") and (a.get("src") or a.get("href"))]
    assert all(s.startswith("data:") for s in fetched)
    pixels = screenshot(out / "report.html", tmp_path / "run.png")
    assert_not_blank(pixels)


def test_a_report_refreshes_while_the_run_trains_and_stops_when_it_ends(tmp_path):
    from convnet.architecture import Architecture
    from convnet.control import DEFAULT_PARAMETERS
    from convnet.logs.record import SessionRecord
    from convnet.report.live import LiveReport

    class Cmd:
        file, line = "live.ctl", 4
    arch = Architecture.from_lines(["FULLY CONNECTED LAYER 3"], rows=4, cols=4, bands=1,
                                   n_classes=2)
    record = SessionRecord(str(tmp_path), {"seed": 1}, on_change=LiveReport(str(tmp_path)))
    record.start(["live.ctl"])
    entry = record.begin("TRAIN", Cmd, arch, dict(DEFAULT_PARAMETERS), "cpu", 1)
    observe = record.observer(entry)
    for k in range(1, 6):
        observe("Annealing", k, 1.0 / k, 1.0 / k, total=5)
    record.write()                       # as a throttled rewrite would
    record.on_change(record.data, True)
    page = Cells(dom(tmp_path / "report.html"))
    assert [m.get("content") for m in page.meta_refresh()] == ["5"]
    assert any(a.get("id") == "live" for _, a in page.elements)
    assert_not_blank(screenshot(tmp_path / "report.html", tmp_path / "live.png"))
    record.finish("interrupted", KeyboardInterrupt())
    page = Cells(dom(tmp_path / "report.html"))
    assert page.meta_refresh() == [] and not any(a.get("id") == "live" for _, a in page.elements)


def test_batch_report_sorts_by_any_column_and_links_every_run(tmp_path):
    files = []
    for name, iters in (("short", 2), ("long", 12), ("middle", 5)):
        path = tmp_path / f"{name}.ctl"
        path.write_text(RUN.replace("MAXITERS = 6", f"MAXITERS = {iters}"))
        files.append(str(path))
    bad = tmp_path / "broken.ctl"
    bad.write_text("MAKE IMAGE 6 6 1 3 45\nTRAIN\n")
    files.append(str(bad))
    out = tmp_path / "batch"
    rows = run_batch(files, str(out), jobs=2, device="cpu", seed=5)
    assert [r.ok for r in rows] == [True, True, True, False]
    finals, ranks = {}, {}
    for r in rows[:3]:
        with open(os.path.join(r.out, "results.json"), encoding="utf-8") as f:
            runs = json.load(f)["runs"]
        finals[r.file] = runs[0]["final_criterion"]
        tests = [run for run in runs if run["command"] == "TEST"]
        # every run was tested: the best has the lowest test error (then final criterion)
        ranks[r.file] = (tests[-1]["misclassification"], finals[r.file])
    report = out / "report.html"
    page = Cells(dom(report))
    table = page.rows["batch"]
    assert [r["file"] for r in table] == files                     # as run, before any sort
    for r in table[:3]:
        assert float(r["final_criterion"]) == finals[r["file"]]
    best = min(ranks, key=ranks.get)
    assert [r["file"] for r in table if r["_class"] == "best"] == [best]
    links = [a["href"] for t, a in page.elements if t == "a" and a.get("href")]
    assert sorted(links) == sorted(f"{os.path.splitext(os.path.basename(f))[0]}/report.html"
                                   for f in files)         # the failed run has its page too
    assert all((out / link).is_file() for link in links)
    # sorted by the address: ascending, descending, by text; an unknown value goes last
    ascending = [r["file"] for r in Cells(dom(report, "#sort=final_criterion")).rows["batch"]]
    assert ascending == sorted(finals, key=finals.get) + [str(bad)]
    descending = [r["file"] for r in Cells(dom(report, "#sort=-final_criterion")).rows["batch"]]
    assert descending == sorted(finals, key=finals.get, reverse=True) + [str(bad)]
    sorted_page = Cells(dom(report, "#sort=-seconds"))
    seconds = [float(r["seconds"]) for r in sorted_page.rows["batch"]]
    assert seconds == sorted(seconds, reverse=True)
    heads = {a.get("data-key"): a.get("aria-sort") for t, a in sorted_page.elements if t == "th"}
    assert heads["seconds"] == "descending" and heads["final_criterion"] is None
    by_status = [r["status"] for r in Cells(dom(report, "#sort=status")).rows["batch"]]
    assert by_status == sorted(by_status, key=str.lower)
    assert_not_blank(screenshot(report, tmp_path / "batch.png", size=(1200, 900)))


SWEEP = """\
SWEEP WPEN = 0, 0.01
SWEEP SEEDS = 2
MAKE IMAGE 6 6 1 3 45
CONVOLUTIONAL LAYER 2 1 1 1 1 1 1
ANNEAL ITERS = 3
MAXITERS = 3
TRAIN
CLEAR
MAKE IMAGE 6 6 1 3 30
TEST
"""


@pytest.mark.slow
def test_sweep_page_shows_the_combinations_and_error_bars(tmp_path):
    ctl = tmp_path / "sweep.ctl"
    ctl.write_text(SWEEP)
    out = tmp_path / "batch"
    rows = run_batch([str(ctl)], str(out), jobs=2, device="cpu")
    assert all(r.ok for r in rows) and len(rows) == 4
    page = Cells(dom(out / "report.html"))
    groups = page.rows["groups"]
    assert [g["value:WPEN"] for g in groups] == ["0", "0.01"]
    for g, pair in zip(groups, (rows[:2], rows[2:])):
        tests = [r.test_misclassification for r in pair]
        assert float(g["test_misclassification_mean"]) == pytest.approx(sum(tests) / 2)
        assert g["runs"] == "2"
    means = [float(g["test_misclassification_mean"]) for g in groups]
    assert [g["_class"] for g in groups].count("best") == 1
    assert groups[means.index(min(means))]["_class"] == "best"
    figures = [(a["data-measure"], a["data-swept"]) for t, a in page.elements
               if t == "figure" and "data-swept" in a]
    assert figures == [("final_criterion", "WPEN"), ("train_misclassification", "WPEN"),
                       ("test_misclassification", "WPEN")]
    assert_not_blank(screenshot(out / "report.html", tmp_path / "sweep.png", size=(1200, 1800)))
