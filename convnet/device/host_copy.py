"""Copies of large host arrays in several threads.

An evaluation at host weights copies the weights into the page-locked staging buffer and hands
the caller a copy of the gradient: for a net of a million weights that is 8.5 MB of float64 each
way, about 0.7 ms for one core, against 0.4 ms of transfer and a couple of milliseconds of kernels.
numpy lets go of the interpreter lock while it copies, so slices of one copy run side by side.
"""

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

PARALLEL_BYTES = 1 << 20        # below this, one np.copyto: a thread's hand-off costs more
SLICE_BYTES = 1 << 19           # each thread copies at least this much
MAX_THREADS = 8                 # more add little: a few cores fill the memory bus

_pool = None
_pool_lock = threading.Lock()


def _threads():
    return max(1, min(MAX_THREADS, os.cpu_count() or 1))


def _executor():
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_threads(), thread_name_prefix="convnet-copy")
        return _pool


def in_slices(nbytes, n, work):
    """work(a, b) for slices a:b that cover 0:n, side by side in threads when the arrays worked
    on (nbytes of the largest) are large; each element is done by one call, as a single
    work(0, n) would."""
    slices = min(_threads(), nbytes // SLICE_BYTES)
    if nbytes < PARALLEL_BYTES or slices < 2:
        work(0, n)
        return
    bounds = [n * k // slices for k in range(slices + 1)]
    pieces = [_executor().submit(work, a, b) for a, b in zip(bounds[1:-1], bounds[2:])]
    work(0, bounds[1])                          # the first slice in this thread
    for piece in pieces:
        piece.result()


def copy_into(dst, src):
    """dst[...] = src for two one-dimensional arrays of one dtype and length (np.copyto)."""
    in_slices(src.nbytes, len(src), lambda a, b: np.copyto(dst[a:b], src[a:b]))
    return dst


def copied(src):
    """A new array equal to src (one-dimensional)."""
    return copy_into(np.empty_like(src), src)


def summed(parts):
    """parts[0] + parts[1] + ... (one-dimensional, two or more), added in that order for every
    element: the same bits as the additions done one after another."""
    out = np.empty_like(parts[0])

    def work(a, b):
        np.add(parts[0][a:b], parts[1][a:b], out=out[a:b])
        for part in parts[2:]:
            out[a:b] += part[a:b]
    in_slices(out.nbytes, len(out), work)
    return out
