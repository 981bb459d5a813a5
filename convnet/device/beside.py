"""A second stream for the weight gradients, so that each runs beside the delta it pairs with.

Going down the net, a layer's weight gradient and the delta backpropagated from it both read the
layer's deltas and nothing the other writes. On their own, a large one leaves the device's last
round of blocks part empty and a small one leaves most of it idle; side by side, each fills what
the other leaves. The main stream waits for the gradient before it writes the next delta into
the buffer the gradient reads, so the sums (and their bits) are those of one stream.

Only evaluations recorded as CUDA graphs and not timed do this: the tuner times each candidate
alone, and CUDA.LOG's table gives each activity its own time.
"""

import contextlib


class GradientStream:
    """The stream beside an evaluation's main one, and the two events that fork and join it."""

    def __init__(self, rt):
        flags = rt.cuda.event_flags.DISABLE_TIMING
        self.stream = rt.cuda.Stream()
        self.forked = rt.cuda.Event(flags)      # the main stream's work so far, the deltas in it
        self.done = rt.cuda.Event(flags)        # the gradient beside it

    @contextlib.contextmanager
    def beside(self, rt):
        """Launches inside go to this stream, after everything queued on rt.stream so far."""
        self.forked.record(rt.stream)
        self.stream.wait_for_event(self.forked)
        with rt.on_stream(self.stream):
            yield
        self.done.record(self.stream)

    def join(self, rt):
        """rt.stream goes on only once the launches of the last `beside` are done."""
        rt.stream.wait_for_event(self.done)
