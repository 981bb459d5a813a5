"""Device timing with CUDA events, for CUDA.LOG's timing table.

An evaluation records one event before its first launch and one after every activity (a layer's
activation, its delta backpropagation, its gradient, the weight copy, ...). The time of an
activity is the time between its event and the one before it, so the activities of an
evaluation add up exactly to the time from the first event to the last. Events are read only
after the evaluation has synchronized, and are reused.

Recording and reading a few dozen events costs a small net about a third of its evaluation, so
after the first TIMED_FIRST evaluations only one in TIMED_EVERY is timed; the table says how many
were ("Evaluations timed").

A launch sequence recorded as a CUDA graph records its marks inside the graph: ``capture()``
collects the marks made while the graph is recorded (their events then belong to the graph),
and ``replayed(marks)`` adds them to the evaluation each time the graph runs.
"""


import time


TIMED_FIRST = 10
TIMED_EVERY = 10


class EventTimer:
    def __init__(self, cuda, enabled=True, new_event=None):
        self.calls = 0              # evaluations started, timed or not
        self.cuda = cuda
        self.new_event = new_event or cuda.Event
        self.enabled = enabled
        self._capturing = None      # marks made while a graph is being recorded
        self.host_sync = False      # checks: also synchronize and read the host clock at each mark
        self.host_totals = {}
        self._host_t = None
        self._free = []
        self._pending = []          # (label, activity, launches, event)
        self._start = None
        self.totals = {}            # (label, activity) -> [launches, seconds]
        self.total_seconds = 0.0    # sum of all resolved intervals
        self.evaluations = 0
        self.line_points = 0        # line search trial points formed on the device (line.py)

    def _event(self):
        return self._free.pop() if self._free else self.new_event()

    def start(self, stream):
        if not self.enabled:
            return
        if self._start is not None:          # an evaluation that did not finish: drop it
            self._discard()
        self.calls += 1
        if self.calls > TIMED_FIRST and self.calls % TIMED_EVERY and not self.host_sync:
            return                                  # not timed: marks and resolve do nothing
        self._start = self._event()
        self._start.record(stream)
        if self.host_sync:
            stream.synchronize()
            self._host_t = time.perf_counter()

    def mark(self, stream, label, activity, launches):
        if not self.enabled or self._start is None:
            return
        if self._capturing is not None:      # this event belongs to the graph from now on
            ev = self.new_event()
            getattr(ev, "record_captured", ev.record)(stream)
            self._capturing.append((label, activity, launches, ev))
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

    def begin_capture(self):
        self._capturing = []

    def end_capture(self):
        """The marks made since begin_capture, for replayed()."""
        marks, self._capturing = self._capturing or [], None
        return marks

    def replayed(self, marks):
        """A graph holding these marks has just been launched in this evaluation."""
        if self.enabled and self._start is not None:
            self._pending.extend((label, activity, launches, ev, False)
                                 for label, activity, launches, ev in marks)

    def resolve(self):
        """Call after the stream has synchronized: adds this evaluation's intervals to the totals."""
        if not self.enabled or self._start is None:
            return
        prev = self._start
        for label, activity, launches, ev, *_ in self._pending:
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
        # events recorded by a graph stay with it (a 5th item, False, marks them)
        self._free.extend(entry[3] for entry in self._pending if len(entry) == 4)
        self._pending = []
        self._start = None

    def table(self):
        """[(label, activity, launches, seconds)] in first-recorded order."""
        return [(label, activity, calls, secs) for (label, activity), (calls, secs) in self.totals.items()]

    def reset(self):
        self.line_points = 0
        self.calls = 0
        self.host_totals = {}
        self.totals = {}
        self.total_seconds = 0.0
        self.evaluations = 0
