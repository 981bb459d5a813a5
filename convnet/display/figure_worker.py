"""The drawing process (figures.py starts it): reads requests on its input, answers each with the
figure drawn by plots.py, and ends when its input does. Each figure is drawn in a child forked
from it, so the figures a run asks for at once are drawn side by side.

It imports matplotlib at once, before the first request, while the run that started it reads its
data and trains. (Drawing a first figure ahead as well gained nothing: a figure takes as long to
draw the first time as the next.)
"""

import collections
import os
import pickle
import selectors
import signal
import struct
import sys
import traceback

from ..errors import ConvnetError

HEADER = struct.Struct("<Q")          # each message: its length, then the pickled request or answer

BUILDERS = ("criterion_figure", "validation_figure", "confusion_figure", "overlay_figure",
            "errorbar_figure")


def answer_to(request):
    """("ok", the figure's SVG text or PNG bytes) or ("error", a user error's message)."""
    from . import plots
    kind, builder, args, kwargs = request
    if builder not in BUILDERS or kind not in ("svg", "png"):
        raise ValueError(f"not a figure request: {kind} {builder}")
    try:
        fig = getattr(plots, builder)(*args, **kwargs)
        return "ok", plots.svg_markup(fig) if kind == "svg" else plots.png_bytes(fig)
    except ConvnetError as e:
        return "error", str(e)


def send(stream, message):
    stream.write(encode(message))
    stream.flush()


def receive(stream):
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        raise EOFError("the drawing process ended")
    size, = HEADER.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the drawing process ended")
    return pickle.loads(data)


def safe_answer(request):
    try:
        return answer_to(request)
    except Exception:                     # the run draws it itself, and sees the error there
        return "failed", traceback.format_exc()


def encode(message):
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


def take_message(buffer):
    """The first whole message of ``buffer`` (a bytearray, which loses it), or None."""
    if len(buffer) < HEADER.size:
        return None
    size, = HEADER.unpack_from(buffer)
    if len(buffer) < HEADER.size + size:
        return None
    data = bytes(buffer[HEADER.size:HEADER.size + size])
    del buffer[:HEADER.size + size]
    return pickle.loads(data)


class Drawing:
    """One figure being drawn by a child process: its pid, the pipe its answer comes on."""

    def __init__(self, pid, fd):
        self.pid, self.fd, self.data, self.done = pid, fd, bytearray(), False


class Server:
    """Draws every request in a child forked from this process (matplotlib already loaded), so
    the figures a run asks for together are drawn side by side; answers go back in the order
    of the requests. One thread, one loop over the pipes: requests are always read, so a run
    that sends several before reading an answer never waits on this process."""

    def __init__(self, in_fd, out_fd):
        self.in_fd, self.out_fd = in_fd, out_fd
        os.set_blocking(out_fd, False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(in_fd, selectors.EVENT_READ, "requests")
        self.incoming, self.outgoing = bytearray(), bytearray()
        self.drawing = collections.deque()          # in the order of the requests
        self.input_open, self.watching_output = True, False

    def run(self):
        while self.input_open or self.drawing or self.outgoing:
            for key, _ in self.selector.select():
                if key.data == "requests":
                    self._read_requests()
                elif key.data == "answers":
                    self._write_answers()
                else:
                    self._read_child(key.data)
            self._forward()

    def _read_requests(self):
        data = os.read(self.in_fd, 1 << 16)
        if not data:
            self.input_open = False
            self.selector.unregister(self.in_fd)
            return
        self.incoming += data
        while (request := take_message(self.incoming)) is not None:
            self.drawing.append(self._start(request))

    def _start(self, request):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:                                # the child: draw, answer, leave at once
            status = 1
            try:
                os.close(read_end)
                data = memoryview(encode(safe_answer(request)))
                while data:
                    data = data[os.write(write_end, data):]
                status = 0
            finally:
                os._exit(status)
        os.close(write_end)
        drawing = Drawing(pid, read_end)
        self.selector.register(read_end, selectors.EVENT_READ, drawing)
        return drawing

    def _read_child(self, drawing):
        data = os.read(drawing.fd, 1 << 16)
        if data:
            drawing.data += data
            return
        self.selector.unregister(drawing.fd)
        os.close(drawing.fd)
        os.waitpid(drawing.pid, 0)
        drawing.done = True

    def _forward(self):
        while self.drawing and self.drawing[0].done:
            drawing = self.drawing.popleft()
            self.outgoing += drawing.data or encode(("failed", "the figure's process ended "
                                                               "without an answer"))
        self._write_answers()

    def _write_answers(self):
        if self.outgoing:
            try:
                del self.outgoing[:os.write(self.out_fd, self.outgoing)]
            except BlockingIOError:
                pass
        wanted = bool(self.outgoing)
        if wanted != self.watching_output:
            if wanted:
                self.selector.register(self.out_fd, selectors.EVENT_WRITE, "answers")
            else:
                self.selector.unregister(self.out_fd)
            self.watching_output = wanted


def serve(stdin, stdout):
    from . import plots  # noqa: F401  (matplotlib, loaded while the run that started this trains)
    if not hasattr(os, "fork"):
        while True:                                 # one figure after another
            try:
                request = receive(stdin)
            except EOFError:
                return
            send(stdout, safe_answer(request))
    Server(stdin.fileno(), stdout.fileno()).run()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # the run stops it
    serve(sys.stdin.buffer, sys.stdout.buffer)
