"""The run report kept up to date while a session runs.

``LiveReport`` is the session record's ``on_change``. It rewrites report.html when the session
ends, when a TRAIN or TEST has finished, and otherwise (a TRAIN running, pictures made) at most
every ``REPORT_INTERVAL`` seconds and never sooner than ``COST_RATIO`` times what the last rewrite
took after it, so the throttled rewrites never take more than 1/(1 + COST_RATIO), about 2 %, of
the time. Charts of finished runs are drawn once and kept.
"""

import os
import time

from ..logs.record import COST_RATIO, Throttle
from .html import write_page
from .run_page import REPORT_NAME, FigureCache, run_page

REPORT_INTERVAL = 3.0


class LiveReport:
    def __init__(self, out, interval=REPORT_INTERVAL, clock=time.monotonic):
        self.folder = out
        self.path = os.path.join(out, REPORT_NAME)
        self.throttle = Throttle(interval, COST_RATIO, clock)
        self.cache = FigureCache()
        self.finished_runs = 0

    def __call__(self, data, final=False):
        finished = sum(r.get("status") != "running" for r in data.get("runs") or [])
        if not (final or finished != self.finished_runs or self.throttle.due()):
            return
        self.finished_runs = finished
        self.throttle.timed(self._write, data)
        data.setdefault("writing_seconds", {})["report"] = round(self.throttle.total, 6)

    def _write(self, data):
        write_page(self.path, run_page(data, self.folder, self.cache))
