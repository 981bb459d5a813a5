"""CUDA graphs and timing events through the CUDA driver API (ctypes; PyCUDA exposes neither).

An evaluation of a small net is a few dozen short launches, and starting each from Python costs
more than the kernel itself. The evaluator therefore records its launch sequence once (stream
capture), after a first, ordinary evaluation has chosen every tile shape, and from then on
starts the whole sequence with one call. Every pointer and size in the sequence is fixed for an
evaluator (its batches, buffers and weights live at fixed device addresses), so the graph is
valid for any weights.

The timing events of CUDA.LOG must be recorded inside the graph too; PyCUDA's events cannot be
(they are recorded as capture dependencies, not timestamps), so the timer uses DriverEvent,
recorded with CU_EVENT_RECORD_EXTERNAL, which makes a captured record a real event-record node.
"""

import ctypes
import gc

CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
CU_EVENT_RECORD_EXTERNAL = 1


class DriverError(RuntimeError):
    pass


class DriverAPI:
    """The few driver functions needed, from libcuda; ``DriverAPI.load()`` is None when absent."""

    _FUNCTIONS = {
        "cuStreamBeginCapture": (("cuStreamBeginCapture_v2", "cuStreamBeginCapture"),
                                 [ctypes.c_void_p, ctypes.c_int]),
        "cuStreamEndCapture": (("cuStreamEndCapture",), [ctypes.c_void_p, ctypes.c_void_p]),
        "cuGraphInstantiateWithFlags": (("cuGraphInstantiateWithFlags",),
                                        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ulonglong]),
        "cuGraphLaunch": (("cuGraphLaunch",), [ctypes.c_void_p, ctypes.c_void_p]),
        "cuGraphExecDestroy": (("cuGraphExecDestroy",), [ctypes.c_void_p]),
        "cuGraphDestroy": (("cuGraphDestroy",), [ctypes.c_void_p]),
        "cuEventCreate": (("cuEventCreate",), [ctypes.c_void_p, ctypes.c_uint]),
        "cuEventDestroy": (("cuEventDestroy_v2", "cuEventDestroy"), [ctypes.c_void_p]),
        "cuEventRecordWithFlags": (("cuEventRecordWithFlags",),
                                   [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]),
        "cuEventSynchronize": (("cuEventSynchronize",), [ctypes.c_void_p]),
        "cuEventElapsedTime": (("cuEventElapsedTime_v2", "cuEventElapsedTime"),
                               [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]),
        "cuGetErrorName": (("cuGetErrorName",), [ctypes.c_int, ctypes.c_void_p]),
    }

    @classmethod
    def load(cls):
        try:
            return cls(ctypes.CDLL("libcuda.so.1"))
        except (OSError, AttributeError):
            return None

    def __init__(self, lib):
        for name, (symbols, argtypes) in self._FUNCTIONS.items():
            for sym in symbols:
                f = getattr(lib, sym, None)
                if f is not None:
                    break
            else:
                raise AttributeError(name)
            f.restype = ctypes.c_int
            f.argtypes = argtypes
            setattr(self, "_" + name, f)

    def call(self, name, *args):
        rc = getattr(self, "_" + name)(*args)
        if rc != 0:
            msg = ctypes.c_char_p()
            self._cuGetErrorName(rc, ctypes.byref(msg))
            raise DriverError(f"{name} failed: {(msg.value or b'?').decode()} ({rc})")


class DriverEvent:
    """A timing event (record / synchronize / time_since, like PyCUDA's) that can be recorded
    inside a captured graph."""

    def __init__(self, api):
        self.api = api
        h = ctypes.c_void_p()
        api.call("cuEventCreate", ctypes.byref(h), 0)
        self.handle = h

    def record(self, stream):
        self.api.call("cuEventRecordWithFlags", self.handle, ctypes.c_void_p(stream.handle), 0)

    def record_captured(self, stream):
        """Record on a capturing stream as an event-record node of the graph (a timestamp each
        time the graph runs; the flag is refused outside capture)."""
        self.api.call("cuEventRecordWithFlags", self.handle, ctypes.c_void_p(stream.handle),
                      CU_EVENT_RECORD_EXTERNAL)

    def synchronize(self):
        self.api.call("cuEventSynchronize", self.handle)

    def time_since(self, other):
        ms = ctypes.c_float()
        self.api.call("cuEventElapsedTime", ctypes.byref(ms), other.handle, self.handle)
        return ms.value

    def __del__(self):
        try:
            self.api.call("cuEventDestroy", self.handle)
        except Exception:           # interpreter shutdown, context gone: nothing to free
            pass


class Graph:
    """A launch sequence captured from a stream once and replayed with one call."""

    def __init__(self, api, stream, record):
        """Runs record() with the stream in capture mode (nothing executes) and instantiates
        what it launched. The garbage collector is held off meanwhile: a collection would free
        unreachable PyCUDA buffers (an earlier backend's, say), and a free is a call that
        capture forbids on this thread; it would end the capture with an error."""
        self.api = api
        s = ctypes.c_void_p(stream.handle)
        collecting = gc.isenabled()
        gc.disable()
        try:
            graph = self._capture(api, s, record)
        finally:
            if collecting:
                gc.enable()
        self.graph = graph
        self.exec = ctypes.c_void_p()
        api.call("cuGraphInstantiateWithFlags", ctypes.byref(self.exec), graph, 0)

    @staticmethod
    def _capture(api, s, record):
        api.call("cuStreamBeginCapture", s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        graph = ctypes.c_void_p()
        try:
            record()
        except BaseException:
            api._cuStreamEndCapture(s, ctypes.byref(graph))     # leave capture mode, then re-raise
            if graph.value:
                api._cuGraphDestroy(graph)
            raise
        api.call("cuStreamEndCapture", s, ctypes.byref(graph))
        return graph

    def launch(self, stream):
        self.api.call("cuGraphLaunch", self.exec, ctypes.c_void_p(stream.handle))

    def __del__(self):
        try:
            self.api.call("cuGraphExecDestroy", self.exec)
            self.api.call("cuGraphDestroy", self.graph)
        except Exception:
            pass
