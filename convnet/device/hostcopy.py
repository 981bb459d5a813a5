"""Large host copies in a few threads.

An evaluation at host weights copies the float64 weights into the page-locked buffer the device
reads (the gradient comes back without a copy: handback.py). For a net of a million weights that
is 8.5 MB, and one thread copies about 11 GB/s (0.7-0.8 ms on an H200 machine's Xeon) while the
bus moves the same bytes in 0.16 ms. numpy lets go of the interpreter lock while it copies, so a
few threads, each taking a slice, divide that time. Smaller copies stay in the caller's thread:
at LeNet's 3.4 MB the threads' hand-off took back more than they saved (benchmarks/NOTES.md,
"Host copies in threads").
"""

import functools
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

# Smallest copy cut into slices (bytes read or written, the larger): measured on an H200
# machine's 16-core Xeon, threads won at 8.5 MB and lost at 3.4 MB; from 1 MiB on an H100
# machine, local-rgb's 1.6 MB made its gradient 0.59-0.62 -> 0.68-0.71 ms.
PARALLEL_COPY_BYTES = 6 << 20
# Most threads a copy uses (the caller's among them). On an H100 machine's 16 cores an 8.5 MB copy
# took 0.66 / 0.36 / 0.27 / 0.32-0.43 ms on 1 / 2 / 4 / 8 threads, but wide-fc's gradient from host
# weights 2.19-2.22 / 2.12-2.20 / 2.39-2.46 / 2.55-2.67 ms: beyond two threads the evaluation got
# slower though the copy did not (why was not established).
MOST_COPY_THREADS = 2

_pool = None
_pool_pid = None


@functools.lru_cache(maxsize=None)
def copy_threads():
    """How many threads a large copy uses on this machine (1: the caller's only). Asked once:
    os.cpu_count() took 6-14 us a call there (under cProfile), every evaluation at host weights
    (benchmarks/NOTES.md, "Host copies in threads")."""
    return max(1, min(MOST_COPY_THREADS, os.cpu_count() or 1))


def _executor(workers):
    """The process's pool of copy threads (made again in a forked child, whose copy of the
    parent's pool has no threads)."""
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():
        _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="convnet-copy")
        _pool_pid = os.getpid()
    return _pool


def _copyto(dst, src):
    """np.copyto, quietly: a float64 past float32's range becomes infinite, as on the device."""
    with np.errstate(over="ignore"):
        np.copyto(dst, src)


def copy_into(dst, src):
    """dst[...] = src for one-dimensional arrays of one length (src converted to dst's type), in
    slices on several threads when large. The result is the plain copy's, bit for bit."""
    n = dst.shape[0]
    if src.shape != dst.shape:
        raise ValueError(f"copy of {src.shape} into {dst.shape}")
    threads = copy_threads()
    if threads == 1 or max(dst.nbytes, src.nbytes) < PARALLEL_COPY_BYTES:
        _copyto(dst, src)
        return dst
    step = -(-n // threads)
    pool = _executor(threads - 1)
    futures = [pool.submit(_copyto, dst[lo:lo + step], src[lo:lo + step])
               for lo in range(step, n, step)]
    _copyto(dst[:step], src[:step])
    for future in futures:
        future.result()
    return dst


def copied(src):
    """A new array equal to the one-dimensional src (copy_into)."""
    return copy_into(np.empty(src.shape, src.dtype), src)
