"""The terminal progress line shown while a TRAIN runs (never written to CONVNET.LOG)."""

import sys
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

    def __init__(self, stream=None, min_interval=0.1, clock=time.monotonic):
        self.stream = stream if stream is not None else sys.stdout
        self.min_interval = min_interval
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
