"""Ctrl-C and SIGTERM during a run: the first Ctrl-C asks the running phase to move on, a second
one or a SIGTERM ends the run with its log complete up to that point."""

import signal
from contextlib import contextmanager

from .errors import Interrupted


class Interrupt:
    """Counts Ctrl-C presses: the first asks the running phase to move on, the second ends the run.

    While ``active`` is False (no interruptible phase is running) the first press ends the run.
    """

    def __init__(self):
        self.count = 0
        self.active = False
        self.ended = None           # the Interrupted that ended the run, once raised

    def reset(self):
        self.count = 0

    def handler(self, signum, frame):
        self.count += 1
        if self.count >= 2 or not self.active:
            self._end(Interrupted("run ended by the user (Ctrl-C)", signal.SIGINT))

    def terminate(self, signum, frame):
        """SIGTERM (``timeout``, batch schedulers, Dask) ends the run at once, like a second Ctrl-C."""
        self._end(Interrupted("run ended by SIGTERM", signal.SIGTERM))

    def _end(self, exc):
        self.ended = exc
        raise exc

    def stop_requested(self):
        """Whether the running phase should move on (a first Ctrl-C). Raises the run's end again
        when the exception a signal raised was lost: a signal that arrives while a compiled
        library runs a Python callback (Numba's compiler does) has its exception printed and
        dropped there, and the run would go on."""
        if self.ended is not None:
            raise self.ended
        return self.count > 0

    @contextmanager
    def phase(self):
        """An interruptible phase: a first Ctrl-C is left for the phase to notice."""
        self.reset()
        self.active = True
        try:
            yield self
        finally:
            self.active = False


@contextmanager
def signals(interrupt):
    """Install the Ctrl-C and SIGTERM handlers while a session runs (main thread only)."""
    try:
        previous = {signal.SIGINT: signal.signal(signal.SIGINT, interrupt.handler),
                    signal.SIGTERM: signal.signal(signal.SIGTERM, interrupt.terminate)}
    except ValueError:           # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
