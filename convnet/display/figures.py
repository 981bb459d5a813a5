"""Figures as bytes (PNG) or text (SVG), drawn by a process of their own when a run started one.

matplotlib takes the better part of a second to import, and the first figure another while its
fonts load: more than the rest of a short run's start. A run that will draw (a TRAIN or a TEST:
the criterion curve, the report's charts) calls ``start()`` as it begins; the drawing process
(figure_worker.py) then imports matplotlib and draws a first figure while the run reads its data
and trains, on a core of its own, so the run itself never imports matplotlib. Without that process
(never started, or gone) a figure is drawn here by the same code, so it is the same figure. A
machine of one core, or CONVNET_DRAW_INLINE=1 in the environment (the tests set it, so that a
test run imports matplotlib once), draws in the run's own process.

A request is the name of a builder in plots.py, its arguments and the format; the answer is the
figure's bytes or text, or the user error the builder raised (figure_worker.py).
"""

import atexit
import os
import subprocess
import sys

from ..atomic import write_atomically
from ..errors import ConvnetError, Interrupted
from .figure_worker import answer_to, receive, send

INLINE_VARIABLE = "CONVNET_DRAW_INLINE"     # set (to anything but empty): no drawing process
PHASE_FIELDS = ("name", "title", "unit", "chart", "trace", "criterion")   # what a curve draws


class DrawingProcess:
    """The one drawing process of this process (``process``), started at most once."""

    def __init__(self):
        self.proc = None
        self.generation = 0           # tickets of a process that was stopped get no answer
        self.sent = self.received = 0
        self.answers = {}

    def start(self):
        if self.proc is not None:
            return
        if os.environ.get(INLINE_VARIABLE) or available_cores() < 2:
            # drawn here: matplotlib loaded now, so that no Ctrl-C lands in the middle of its
            # import later (a module half imported fails every figure after it)
            from . import plots  # noqa: F401
            return
        package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (package_parent, os.environ.get("PYTHONPATH")) if p))
        try:
            # a session of its own: Ctrl-C at the terminal reaches the run, which stops it
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "convnet.display.figure_worker"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                start_new_session=True)
        except OSError:
            self.proc = None
            return
        atexit.register(self.stop)

    def request(self, request):
        """Send ``request``; returns its ticket for ``answer``, or None when there is no
        process (or it failed)."""
        if self.proc is None:
            return None
        try:
            send(self.proc.stdin, request)
        except Interrupted:
            self.stop()
            raise
        except Exception:             # gone, or a request it cannot take: drawn here instead
            self.stop()
            return None
        self.sent += 1
        return (self.generation, self.sent - 1)

    def answer(self, ticket):
        """The answer to the request of ``ticket``, or None when the process is gone. Answers
        come in the order of the requests; those read on the way are kept."""
        while ticket not in self.answers:
            if self.proc is None or ticket[0] != self.generation:
                return None
            try:
                answer = receive(self.proc.stdout)
            except Interrupted:       # Ctrl-C while waiting: the answer may be half read
                self.stop()
                raise
            except Exception:
                self.stop()
                return None
            self.answers[(self.generation, self.received)] = answer
            self.received += 1
        return self.answers.pop(ticket)

    def stop(self):
        proc, self.proc = self.proc, None
        if proc is None:
            return
        self.generation += 1
        self.sent = self.received = 0
        self.answers = {}
        proc.kill()                     # it holds nothing to keep, and may still be loading
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


process = DrawingProcess()


def available_cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def start():
    """Start the drawing process (once; a process that cannot start leaves drawing here)."""
    process.start()


def stop():
    process.stop()


class Figure:
    """A figure asked for now and taken later (``result``): figures asked for together are
    drawn side by side by the drawing process; without one, ``result`` draws it here."""

    def __init__(self, kind, builder, *args, **kwargs):
        self.request = (kind, builder, args, kwargs)
        self.ticket = process.request(self.request)
        self.value = None

    def result(self):
        """The SVG text or PNG bytes; a ConvnetError where the builder raises one."""
        if self.value is None:
            answer = None if self.ticket is None else process.answer(self.ticket)
            if answer is None or answer[0] == "failed":
                answer = answer_to(self.request)
            status, value = answer
            if status == "error":
                raise ConvnetError(value)
            self.value = value
        return self.value


def draw(kind, builder, *args, **kwargs):
    """The figure ``plots.<builder>(*args, **kwargs)`` as SVG text (``kind`` "svg") or PNG bytes
    ("png"); a ConvnetError where the builder raises one."""
    return Figure(kind, builder, *args, **kwargs).result()


def svg(builder, *args, **kwargs):
    """The figure as an ``<svg>`` element to put in a page (plots.svg_markup)."""
    return draw("svg", builder, *args, **kwargs)


def save_png(path, builder, *args, **kwargs):
    """Write the figure to ``path`` as a PNG, replaced at once; returns the path."""
    return PendingPicture(path, builder, *args, **kwargs).write()


class PendingPicture:
    """A PNG asked for now, written to its file by ``write`` (atomically)."""

    def __init__(self, path, builder, *args, **kwargs):
        self.path = path
        self.figure = Figure("png", builder, *args, **kwargs)

    def write(self):
        write_atomically(self.path, self.figure.result(), "figure", sync=False)
        return self.path


def criterion_curve_later(result, path):
    """The ``criterion.png`` every TRAIN writes, from its TrainResult, asked for now and written
    by the PendingPicture's ``write``: each phase's criterion but the last's named in the title,
    then the final criterion."""
    named = [f"{p.name} {p.criterion:.6g}" for p in result.phases[:-1]]
    title = "TRAIN: " + ", ".join(named + [f"final {result.final_criterion:.6g}"])
    phases = [{name: getattr(p, name, None) for name in PHASE_FIELDS} for p in result.phases]
    return PendingPicture(path, "criterion_figure", phases, title=title)
