"""The drawing process (figures.py starts it): reads requests on its input, answers each with the
figure drawn by plots.py, and ends when its input does.

It imports matplotlib at once, before the first request, while the run that started it reads its
data and trains. (Drawing a first figure ahead as well gained nothing: a figure takes as long to
draw the first time as the next.)
"""

import pickle
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
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(HEADER.pack(len(data)) + data)
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


def serve(stdin, stdout):
    from . import plots       # matplotlib, loaded while the run that started this one trains
    while True:
        try:
            request = receive(stdin)
        except EOFError:
            return
        try:
            answer = answer_to(request)
        except Exception:                 # the run draws it itself, and sees the error there
            answer = "failed", traceback.format_exc()
        send(stdout, answer)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # the run stops it
    serve(sys.stdin.buffer, sys.stdout.buffer)
