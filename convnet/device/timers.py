"""Device timing with CUDA events, for CUDA.LOG's timing table.

An evaluation records one event before its first launch and one after every activity (a layer's
activation, its delta backpropagation, its gradient, the weight copy, ...). The time of an
activity is the time between its event and the one before it, so the activities of an
evaluation add up exactly to the time from the first event to the last. Events are read only
after the evaluation has synchronized, and are reused.
"""


import time


class EventTimer:
    def __init__(self, cuda, enabled=True):
        self.cuda = cuda
        self.enabled = enabled
        self.host_sync = False      # checks: also synchronize and read the host clock at each mark
        self.host_totals = {}
        self._host_t = None
        self._free = []
        self._pending = []          # (label, activity, launches, event)
        self._start = None
        self.totals = {}            # (label, activity) -> [launches, seconds]
        self.total_seconds = 0.0    # sum of all resolved intervals
        self.evaluations = 0

    def _event(self):
        return self._free.pop() if self._free else self.cuda.Event()

    def start(self, stream):
        if not self.enabled:
            return
        if self._start is not None:          # an evaluation that did not finish: drop it
            self._discard()
        self._start = self._event()
        self._start.record(stream)
        if self.host_sync:
            stream.synchronize()
            self._host_t = time.perf_counter()

    def mark(self, stream, label, activity, launches):
        if not self.enabled or self._start is None:
            return
        ev = self._event()
        ev.record(stream)
        self._pending.append((label, activity, launches, ev))
        if self.host_sync:
            stream.synchronize()
            t = time.perf_counter()
            cell = self.host_totals.setdefault((label, activity), [0, 0.0])
            cell[0] += launches
            cell[1] += t - self._host_t
            self._host_t = t

    def resolve(self):
        """Call after the stream has synchronized: adds this evaluation's intervals to the totals."""
        if not self.enabled or self._start is None:
            return
        prev = self._start
        for label, activity, launches, ev in self._pending:
            seconds = ev.time_since(prev) / 1000.0
            cell = self.totals.setdefault((label, activity), [0, 0.0])
            cell[0] += launches
            cell[1] += seconds
            self.total_seconds += seconds
            prev = ev
        self.evaluations += 1
        self._discard()

    def _discard(self):
        if self._start is not None:
            self._free.append(self._start)
        self._free.extend(ev for *_, ev in self._pending)
        self._pending = []
        self._start = None

    def table(self):
        """[(label, activity, launches, seconds)] in first-recorded order."""
        return [(label, activity, calls, secs) for (label, activity), (calls, secs) in self.totals.items()]

    def reset(self):
        self.host_totals = {}
        self.totals = {}
        self.total_seconds = 0.0
        self.evaluations = 0
