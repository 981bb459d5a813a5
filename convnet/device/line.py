"""The line search's trial points, formed and evaluated on the device.

A conjugate-gradient iteration evaluates the gradient at x + t * d for about two values of t. On
the host each of them costs passes over every weight: forming the point, rounding it to float32
for the upload, the weight penalty's sum, copying the gradient out, and its dot product with d
(on LeNet, 431,080 weights, about 2 ms per evaluation beside a 6.5 ms gradient). Here x and d are
sent once per line, and a trial costs the host an 8-byte copy in (t) and a 24-byte copy out:

    line_point   w = x + t * d, rounded to float32 (the same float32 weights as the host would
                 send: the product and the sum each rounded), and the penalty's sum of squares;
    ...          the gradient launches of DeviceEvaluator, unchanged (the same bits);
    vec_sums     the gradient's dot product with d (the slope);
    vec_finish   both sums, put after the log likelihood: one copy fetches the three.

The criterion is the same formula as DeviceEvaluator.gradient's; the penalty's sum and the slope
are added in another order than the host's (blocks of 4096 weights, then the blocks in order), so
they can differ from it in the last bits, the same way on every run.

The optimizer's own vectors live here too (DeviceVectors, conjugate_gradients' ``vectors``): x,
the direction and the gradients stay on the device for the whole refinement, their updates and
sums (the step, the Polak-Ribiere direction and beta's two sums, the slope, the norms) run as
kernels with the element arithmetic of convnet/vectors.py, and only the weights the trainer
keeps after each iteration are copied to the host. With host arrays for x and d (a line made
outside such a refinement) x and d are sent once per line and the accepted point's gradient is
copied back.
"""

import math

import numpy as np

from . import launches as K
from .launches import line_parts
from .runtime import ptr

LINE_POINT = "line point"       # DeviceEvaluator._run's weights: a trial point formed on the device


class LineState:
    """An evaluator's buffers for line searches: x and d (float64), the trial step, the partial
    sums (the penalty's, then the slope's), the fetched scalars, and the gradient of the lowest
    point of the current line."""

    def __init__(self, ev):
        b = ev.backend
        rt = b.rt
        n = b.n_weights
        self.ev = ev
        self.n = n
        self.parts = line_parts(n)
        self.d_x = b.alloc(8 * n)
        self.d_d = b.alloc(8 * n)
        self.d_t = b.alloc(8)
        self.d_part = b.alloc(8 * 2 * self.parts)
        self.d_lowest = b.alloc(8 * n)
        self.h_t = rt.cuda.pagelocked_empty(1, np.float64)
        self.h_out = rt.cuda.pagelocked_empty(3, np.float64)
        self.generation = 0             # which DeviceLine the buffers hold
        self.latest = None              # (generation, evaluation) whose gradient is in d_grad
        ev.allocation.append(f"Line search on the device: x, d and one gradient, "
                             f"{24 * n / 2**20:.1f} MB")
        b.last_allocation = ev.allocation

    def queue_point(self):
        """Queue the trial point's weights (read from d_t) and their scatter into the layouts."""
        b = self.ev.backend
        K.line_point(b.rt, x=self.d_x, d=self.d_d, t=self.d_t, n=self.n, mask=b.d_mask,
                     w32=b.d_w32, pen_part=self.d_part)
        b.queue_scatter()

    def queue_sums(self):
        """Queue the gradient, its slope along d, and the fetch of (log likelihood, penalty sum,
        slope): d_grad[n], and the two sums vec_finish puts after it."""
        ev = self.ev
        b = ev.backend
        rt = b.rt
        n = self.n
        ev._gradient_sums()
        K.vec_sums(rt, a=ev.d_grad, b=self.d_d, n=n, mode=0, part=ptr(self.d_part, self.parts, 8))
        K.vec_finish(rt, part=self.d_part, n_parts=self.parts, k=2, out=ptr(ev.d_grad, n + 1, 8))
        rt.cuda.memcpy_dtoh_async(self.h_out, int(ptr(ev.d_grad, n, 8)), rt.stream)
        b.timer.mark(rt.stream, "Device", "gradient fetch", 1)


class DeviceVector:
    """A float64 vector in device memory: one of the refinement's x, directions or gradients.
    Its memory goes back to its DeviceVectors' spares when it is dropped (a refinement makes a
    gradient vector every iteration, and allocating and freeing device memory each time cost
    about 0.2 ms)."""

    __slots__ = ("buf", "size", "spares")

    def __init__(self, buf, size, spares=None):
        self.buf = buf
        self.size = size
        self.spares = spares

    def __del__(self):
        # the stream runs in order, so work queued on the buffer before it was dropped comes
        # before any work queued by its next owner
        if self.spares is not None:
            self.spares.append(self.buf)


class DeviceVectors:
    """conjugate_gradients' ``vectors`` on the device (the methods of convnet.vectors.HostVectors)
    for one evaluator's weights."""

    def __init__(self, ev):
        b = ev.backend
        self.rt = b.rt
        self.backend = b
        self.n = b.n_weights
        self.parts = line_parts(self.n)
        with self.rt.active():
            self.d_part = b.alloc(8 * 2 * self.parts)
            self.d_out = b.alloc(8 * 2)
            self.h_out = self.rt.cuda.pagelocked_empty(2, np.float64)
            # host(): the weights the trainer keeps after each iteration come through here
            # (page-locked buffers: a fast copy, and no fresh memory to map each time), two of
            # them in turn, so that an array host() returned is left as it is until the call
            # after next (``host_arrays_kept``: the trainer holds the latest without a copy)
            self.h_vecs = [self.rt.cuda.pagelocked_empty(self.n, np.float64) for _ in range(2)]
        self.spares = []                # device memory of dropped vectors, for new ones

    host_arrays_kept = True

    def new(self):
        """An uninitialised vector (the memory of a dropped one where there is one)."""
        buf = self.spares.pop() if self.spares else self.backend.alloc(8 * self.n)
        return DeviceVector(buf, self.n, self.spares)

    def array(self, a):
        if isinstance(a, DeviceVector):
            return a
        a = np.ascontiguousarray(a, dtype=np.float64)
        if a.shape != (self.n,):
            raise ValueError(f"a vector of {self.n} weights, not of shape {a.shape}")
        rt = self.rt
        with rt.active():
            v = self.new()
            rt.stream.synchronize()
            rt.cuda.memcpy_htod(v.buf, a)
        return v

    def copy(self, a):
        if not isinstance(a, DeviceVector):
            return self.array(a)            # the upload is a copy
        rt = self.rt
        with rt.active():
            v = self.new()
            rt.cuda.memcpy_dtod_async(v.buf, a.buf, 8 * self.n, rt.stream)
        return v

    def host(self, v):
        if not isinstance(v, DeviceVector):
            return v
        rt = self.rt
        out = self.h_vecs[0]
        self.h_vecs.reverse()
        with rt.active():
            rt.cuda.memcpy_dtoh_async(out, v.buf, rt.stream)
            rt.stream.synchronize()
        return out

    def result(self, v):
        return np.array(self.host(v))

    def neg(self, v):
        rt = self.rt
        with rt.active():
            out = self.new()
            K.vec_neg(rt, out=out.buf, v=v.buf, n=self.n)
        return out

    def step_into(self, out, x, t, d):
        with self.rt.active():
            K.vec_step(self.rt, out=out.buf, x=x.buf, t=t, d=d.buf, n=self.n)

    def new_direction(self, d, beta, g):
        with self.rt.active():
            K.vec_direction(self.rt, d=d.buf, beta=beta, g=g.buf, n=self.n)

    def _sums(self, a, b, mode):
        rt = self.rt
        k = 1 + mode
        with rt.active():
            K.vec_sums(rt, a=a.buf, b=b.buf, n=self.n, mode=mode, part=self.d_part)
            K.vec_finish(rt, part=self.d_part, n_parts=self.parts, k=k, out=self.d_out)
            rt.cuda.memcpy_dtoh_async(self.h_out, self.d_out, rt.stream)
            rt.stream.synchronize()
            return [float(v) for v in self.h_out[:k]]

    def dot(self, a, b):
        return self._sums(a, b, 0)[0]

    def norm(self, v):
        return math.sqrt(self.dot(v, v))

    def dot_and_change(self, g_new, g):
        s0, s1 = self._sums(g_new, g, 1)
        return s0, s1


class DeviceLine:
    """The points x + t * d of one line search on a DeviceEvaluator's data (conjgrad's ``line``).

    ``evaluate(t)`` -> (criterion, slope along d, handle); ``gradient(handle)`` -> the float64
    gradient of the latest evaluation or of the lowest one so far (the only two a line search
    returns): a DeviceVector when x and d are, else a host array. A line is valid until the
    evaluator's next line is made."""

    def __init__(self, ev, x, d):
        ev.need_classes()
        b = ev.backend
        rt = b.rt
        n = b.n_weights
        # host arrays go up once (and the accepted gradient comes back as one)
        self.host_arrays = not isinstance(x, DeviceVector)
        if self.host_arrays:
            x, d = ev.vectors.array(x), ev.vectors.array(d)
        self.ev = ev
        self.count = 0
        self.lowest = (math.inf, None)
        with rt.active():
            if ev.line_state is None:
                ev.line_state = LineState(ev)
            st = self.state = ev.line_state
            st.generation += 1
            self.generation = st.generation
            rt.cuda.memcpy_dtod_async(st.d_x, x.buf, 8 * n, rt.stream)
            rt.cuda.memcpy_dtod_async(st.d_d, d.buf, 8 * n, rt.stream)

    def _check(self):
        if self.state.generation != self.generation:
            raise RuntimeError("this line search's buffers now hold a later line")

    def evaluate(self, t):
        self._check()
        ev = self.ev
        st = self.state
        b = ev.backend
        rt = b.rt
        with rt.active():
            b.timer.start(rt.stream)
            b.last_allocation = ev.allocation
            st.h_t[0] = t
            rt.cuda.memcpy_htod_async(st.d_t, st.h_t, rt.stream)
            b.timer.line_points += 1
            ev._run("line gradient", LINE_POINT, st.queue_sums)
            rt.stream.synchronize()
            ll, pen, slope = (float(v) for v in st.h_out)
            b.timer.resolve()
            self.count += 1
            st.latest = (self.generation, self.count)
            f = ll * ev.scale + ev._penalty(pen)
            if f < self.lowest[0]:
                # keep this gradient: the search may come back to this point after later trials
                rt.cuda.memcpy_dtod_async(st.d_lowest, ev.d_grad, 8 * st.n, rt.stream)
                self.lowest = (f, self.count)
        slope = slope if math.isfinite(f) else math.nan
        return f, slope, self.count

    def gradient(self, handle):
        self._check()
        ev = self.ev
        st = self.state
        rt = ev.backend.rt
        if handle == self.count and st.latest == (self.generation, handle):
            src = ev.d_grad
        elif handle == self.lowest[1]:
            src = st.d_lowest
        else:
            raise RuntimeError(f"evaluation {handle} of this line is neither the latest nor the lowest")
        with rt.active():
            g = ev.vectors.new()
            rt.cuda.memcpy_dtod_async(g.buf, src, 8 * st.n, rt.stream)
        return ev.vectors.result(g) if self.host_arrays else g
