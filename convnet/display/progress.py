"""What a run shows while it works, never written to CONVNET.LOG: the terminal progress line of
a TRAIN, the lines of a batch as its files start and end, and the note that kernels compile."""

import sys
import threading
import time


def _clock(seconds):
    seconds = int(round(max(0.0, seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class ProgressLine:
    """A live one-line progress display for a terminal, rewritten in place with a carriage return.

    The trainer calls it as ``progress(phase, iteration, current, best)`` (``total=`` may add the
    phase's iteration limit, which lets the line estimate the time remaining). It writes only to
    the stream it was given (never to CONVNET.LOG); ``close()`` ends the line.
    """

    # Without a terminal (piped, in CI) whole lines are written instead, one at each phase's
    # start and end and at most one every PLAIN_INTERVAL seconds between.
    PLAIN_INTERVAL = 10.0

    def __init__(self, stream=None, min_interval=0.1, clock=time.monotonic, plain=False):
        self.stream = stream if stream is not None else sys.stdout
        self.plain = plain
        self.min_interval = self.PLAIN_INTERVAL if plain else min_interval
        self.clock = clock
        self.start = clock()
        self.phase = None
        self.phase_start = self.start
        self.phase_first = None          # the first iteration number seen in this phase
        self.last_write = None
        self.width = 0                   # length of the line on the screen, to blank leftovers
        self.pending = None              # a line not yet shown (throttled)

    def format(self, phase, iteration, current, best, total=None, now=None):
        now = self.clock() if now is None else now
        parts = [f"{phase}", f"iteration {iteration}" + (f"/{total}" if total else "")]
        if current is not None:
            parts.append(f"criterion {current:.6g}")
        if best is not None:
            parts.append(f"best {best:.6g}")
        parts.append(f"elapsed {_clock(now - self.start)}")
        # iterations finished since this phase's first report, and the time they took
        done = 0 if self.phase_first is None else iteration - self.phase_first
        if total and done > 0 and iteration < total:
            per = (now - self.phase_start) / done
            left = per * (total - iteration)
            parts.append(f"remaining {'at most ' if str(phase).lower().startswith('ref') else ''}"
                         f"{_clock(left)}")
        return "  ".join(parts)

    def __call__(self, phase, iteration, current=None, best=None, total=None):
        now = self.clock()
        changed = phase != self.phase
        if changed:
            if self.pending is not None:           # show where the last phase ended
                self._show(self.pending)
            self.phase = phase
            self.phase_start = now
            self.phase_first = iteration
        text = self.format(phase, iteration, current, best, total, now)
        if changed or self.last_write is None or now - self.last_write >= self.min_interval:
            self._show(text)
            self.last_write = now
            self.pending = None
        else:
            self.pending = text

    def _show(self, text):
        if self.plain:
            self.stream.write(text + "\n")
            self.stream.flush()
            return
        pad = max(0, self.width - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self.width = len(text)

    def close(self):
        """Show the last state and end the line (a no-op when nothing was shown)."""
        if self.pending is not None:
            self._show(self.pending)
            self.pending = None
        if self.width:
            self.stream.write("\n")
            self.stream.flush()
            self.width = 0

    def __del__(self):
        # A line left open when the last reference goes (the caller forgot close()) is ended here,
        # so that what is printed next starts on a line of its own.
        try:
            self.close()
        except Exception:       # the stream may already be closed at interpreter exit
            pass


class BatchProgress:
    """What `convnet batch` prints while its files run: a line as each session starts and as it
    ends (its time and status), and on a terminal a status line under them, rewritten in place
    (running, done, failed, waiting). Without a terminal only the plain lines, for logs and CI.
    The sessions end on threads of their own; one lock keeps the lines whole."""

    def __init__(self, total, stream=None, terminal=None, clock=time.monotonic):
        self.stream = stream if stream is not None else sys.stderr
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self.clock = clock
        self.start = clock()
        self.total = total
        self.running = self.done = self.failed = 0
        self.status_shown = False
        self.lock = threading.Lock()

    def started(self, name, where="", verb="started"):
        """A session of ``name`` starts (``where``: ' on GPU 1', ...), or with ``verb`` 'queued'
        is handed to a scheduler that starts it when a worker is free."""
        with self.lock:
            self.running += 1
            self._line(f"{verb} {name}{where}")

    def ended(self, row, was_started=True):
        """A session ended (or a file was refused before starting): ``row`` is its BatchRow."""
        with self.lock:
            self.running -= 1 if was_started else 0
            self.done += 1
            self.failed += 0 if row.ok else 1
            took = "" if row.seconds is None else f" in {row.seconds:.1f} s"
            self._line(f"ended {getattr(row, 'name', '') or row.file}{took}: {row.status}")

    def planned(self, total):
        """The batch has ``total`` runs (a sweep file makes several)."""
        self.total = total

    def reused(self, row):
        """A run an earlier start of the batch finished with the same inputs is reused."""
        with self.lock:
            self.done += 1
            self._line(f"reused {getattr(row, 'name', '') or row.file}: finished earlier with "
                       "the same inputs")

    def close(self):
        """Take the status line off the screen (the table follows)."""
        with self.lock:
            if self.status_shown:
                self.stream.write("\r\033[K")
                self.stream.flush()
                self.status_shown = False

    def status(self):
        waiting = self.total - self.done - self.running
        return (f"running {self.running}, done {self.done} of {self.total}"
                f"{f' ({self.failed} failed)' if self.failed else ''}, waiting {waiting}, "
                f"elapsed {_clock(self.clock() - self.start)}")

    def _line(self, text):
        prefix = "\r\033[K" if self.status_shown else ""
        self.stream.write(f"{prefix}[{_clock(self.clock() - self.start)}] {text}\n")
        if self.terminal:
            self.stream.write(self.status())
            self.status_shown = True
        self.stream.flush()


class NoProgress:
    """Stands for BatchProgress where nothing is to be printed."""

    def planned(self, total):
        pass

    def reused(self, row):
        pass

    def started(self, name, where="", verb="started"):
        pass

    def ended(self, row, was_started=True):
        pass

    def close(self):
        pass


class CompileNotice:
    """Says "compiling host kernels (first run only)" when Numba starts compiling one of this
    package's kernels, that is when its cache holds no compiled copy (a first run after an
    install or a change); loading them from the cache says nothing. Use as a context manager
    around a run; it speaks at most once."""

    MESSAGE = "compiling host kernels (first run only)"

    def __init__(self, stream=None):
        self.stream = stream if stream is not None else sys.stdout
        self.said = False
        self.lock = threading.Lock()

    def __enter__(self):
        from numba.core import event
        self.listener = _compile_listener(self)
        event.register("numba:compile", self.listener)
        return self

    def __exit__(self, *exc):
        from numba.core import event
        event.unregister("numba:compile", self.listener)

    def compiling(self, module):
        """A compilation of a function of ``module`` starts (possibly on a worker thread)."""
        if not str(module).startswith("convnet."):
            return
        with self.lock:
            if self.said:
                return
            self.said = True
            self.stream.write(self.MESSAGE + "\n")
            self.stream.flush()


def _compile_listener(notice):
    """A numba.core.event listener that tells ``notice`` of each compilation's module (made here
    so that importing this module does not import Numba)."""
    from numba.core import event

    class Listener(event.Listener):
        def on_start(self, ev):
            dispatcher = (ev.data or {}).get("dispatcher")
            notice.compiling(getattr(getattr(dispatcher, "py_func", None), "__module__", ""))

        def on_end(self, ev):
            pass

    return Listener()
