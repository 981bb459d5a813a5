"""Gradients handed to the caller without a host copy.

An evaluation at host weights ends with the float64 gradient fetched from the device into
page-locked memory. Copying it once more into a fresh array for the caller took longer than the
transfer itself (LeNet's 431,080 weights, 3.4 MB: about 0.3 ms on one core, the bus 0.07 ms).
Instead the gradient is fetched into one of a few page-locked buffers, and the caller's array is
that buffer: it goes back to the pool only once every array made from it is gone, so no later
evaluation writes into a gradient the caller still holds. While every buffer is held (a caller
keeping many gradients) the fetch goes to the evaluator's own buffer and the caller gets a copy,
as before.
"""

import threading
import weakref

import numpy as np

# Most buffers a pool allocates: a conjugate-gradient iteration holds two or three gradients at
# once; more held than this fall back to copies, so page-locked memory stays bounded.
MOST_BUFFERS = 4
# and at most this many bytes of them (a net of 100 million weights gets one buffer of 800 MB,
# none beyond that: every gradient then a copy)
MOST_POOL_BYTES = 1 << 30


class _Lease:
    """The owner of a handed-out buffer's first n elements: every array made from it (views and
    slices too) keeps it, and so the buffer, alive."""

    def __init__(self, buffer, n):
        self.buffer = buffer
        self.__array_interface__ = dict(buffer.__array_interface__, shape=(n,), strides=None)


class HandBack:
    """A pool of page-locked float64 buffers of `size` elements; allocate(size) makes one (with
    the device's context active)."""

    def __init__(self, allocate, size, most=MOST_BUFFERS):
        self._allocate = allocate
        self.size = size
        self.most = min(most, MOST_POOL_BYTES // (8 * max(size, 1)))
        self._free = []
        self.made = 0
        self._lock = threading.Lock()

    def take(self):
        """A buffer no caller holds, or None when `most` are held."""
        with self._lock:
            if self._free:
                return self._free.pop()
            if self.made >= self.most:
                return None
            self.made += 1
        try:
            return self._allocate(self.size)
        except Exception:               # no more page-locked memory, whatever the driver said:
            with self._lock:            # copies from now on, as when every buffer is held
                self.made -= 1
                self.most = self.made
            return None

    def give_back(self, buffer):
        """Return a buffer taken but not handed out."""
        with self._lock:
            self._free.append(buffer)

    def hand_out(self, buffer, n):
        """The caller's array: buffer[:n] itself, the buffer back in the pool once it is gone."""
        lease = _Lease(buffer, n)
        weakref.finalize(lease, self.give_back, buffer)
        return np.asarray(lease)
