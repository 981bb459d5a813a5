"""Thread counts for the host path: our worker threads and the BLAS library's own threads.

The host path runs its own worker threads over blocks of cases. Each worker calls compiled kernels
that release the GIL and numpy matrix products, which go to the BLAS library numpy was built with.
If that library also started threads of its own, two workers would each start more threads and
the machine would be oversubscribed, and a "one thread" timing would not be one core. So while a
host computation runs, the BLAS library is held to one thread and the previous setting is restored
afterwards.

numpy's wheels ship OpenBLAS (symbols prefixed ``scipy_`` in recent wheels); other builds may use
a plain OpenBLAS. Where no known control function is found (for example MKL), nothing is changed
and :func:`blas_controllable` says so.
"""

import contextlib
import ctypes
import os
import threading

_SET_NAMES = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
              "openblas_set_num_threads64_", "openblas_set_num_threads")
_GET_NAMES = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
              "openblas_get_num_threads64_", "openblas_get_num_threads")

_lock = threading.Lock()
_found = None          # (set, get) ctypes functions, () when none was found
_holders = 0           # nested or concurrent holders of the one-thread setting
_saved = None


def default_threads():
    """All the threads Numba was configured for (its NUMBA_NUM_THREADS; by default every core)."""
    import numba        # here, not above: a GPU run holds BLAS to one thread without Numba
    return int(numba.config.NUMBA_NUM_THREADS)


def _loaded_libraries():
    paths = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and "blas" in os.path.basename(parts[-1]).lower():
                    if parts[-1] not in paths:
                        paths.append(parts[-1])
    except OSError:
        pass
    return paths


def _find():
    global _found
    if _found is not None:
        return _found
    import numpy  # noqa: F401  (loads the BLAS library)
    _found = ()
    for path in _loaded_libraries():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for set_name, get_name in zip(_SET_NAMES, _GET_NAMES):
            try:
                set_f = getattr(lib, set_name)
                get_f = getattr(lib, get_name)
            except AttributeError:
                continue
            set_f.argtypes = [ctypes.c_int]
            set_f.restype = None
            get_f.argtypes = []
            get_f.restype = ctypes.c_int
            _found = (set_f, get_f)
            return _found
    return _found


def blas_controllable():
    """True where the BLAS library's thread count can be set at run time."""
    return bool(_find())


def blas_threads():
    """The BLAS library's current thread count, or None where it cannot be read."""
    f = _find()
    return int(f[1]()) if f else None


def set_blas_threads(n):
    """Set the BLAS library's thread count (no effect where it cannot be controlled)."""
    f = _find()
    if f:
        f[0](int(n))


@contextlib.contextmanager
def single_threaded_blas():
    """Hold the BLAS library to one thread for the duration; nested and concurrent use is safe."""
    global _holders, _saved
    f = _find()
    if not f:
        yield
        return
    with _lock:
        if _holders == 0:
            _saved = int(f[1]())
            if _saved != 1:
                f[0](1)
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _saved is not None and _saved != 1:
                f[0](_saved)
