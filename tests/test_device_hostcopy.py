"""The host copies of an evaluation at host weights (convnet/device/hostcopy.py): large ones cut
into slices on several threads give exactly the plain copy, at every length and slice edge."""

import os
import threading
import warnings

import numpy as np
import pytest

from convnet.device import hostcopy


@pytest.mark.parametrize("n", [1, 7, 262_147, 786_431, 786_432, 786_435, 1_067_789])
def test_copies_equal_the_plain_copy(n, monkeypatch):
    monkeypatch.setattr(hostcopy, "copy_threads", lambda: 4)
    src = np.random.default_rng(n).standard_normal(n)
    dst = np.full(n, np.nan)
    assert hostcopy.copy_into(dst, src) is dst
    assert np.array_equal(dst, src)
    out = hostcopy.copied(src)
    assert out is not src and not np.shares_memory(out, src)
    assert out.dtype == src.dtype and np.array_equal(out, src)


@pytest.mark.parametrize("n", [1, 7, 786_435, 1_067_789])
def test_copies_rounded_to_float32_equal_numpy_rounding(n, monkeypatch):
    """A float64 source into a float32 buffer (the weights a device takes rounded): numpy's
    rounding to nearest, subnormals kept, past the range infinite, on any slices, quietly."""
    monkeypatch.setattr(hostcopy, "copy_threads", lambda: 4)
    rng = np.random.default_rng(n)
    src = rng.standard_normal(n) * 2.0 ** rng.integers(-150, 130, n)
    src[: min(n, 4)] = [1e-40, -1e-46, 1 + 2.0 ** -24, -5e38][: min(n, 4)]
    expected = np.empty(n, np.float32)
    with np.errstate(over="ignore"):
        expected[:] = src
    dst = np.full(n, np.nan, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hostcopy.copy_into(dst, src)
    assert np.array_equal(dst, expected)


def test_large_copies_use_other_threads_and_small_ones_do_not(monkeypatch):
    monkeypatch.setattr(hostcopy, "copy_threads", lambda: 3)
    seen = set()

    def spy(dst, src):
        seen.add(threading.get_ident())
        dst[...] = src

    monkeypatch.setattr(hostcopy.np, "copyto", spy)
    small = np.arange(1000.0)
    hostcopy.copied(small)
    assert seen == {threading.get_ident()}
    big = np.arange(hostcopy.PARALLEL_COPY_BYTES // 8 + 5, dtype=np.float64)
    assert np.array_equal(hostcopy.copied(big), big)
    assert len(seen) > 1


def test_a_slice_of_a_larger_buffer_is_copied_in_place():
    buffer = np.zeros(600_000)
    src = np.random.default_rng(3).standard_normal(600_000)
    hostcopy.copy_into(buffer[100:500_100], src[100:500_100])
    assert np.array_equal(buffer[100:500_100], src[100:500_100])
    assert not buffer[:100].any() and not buffer[500_100:].any()


def test_shapes_must_agree():
    with pytest.raises(ValueError):
        hostcopy.copy_into(np.zeros(5), np.zeros(6))


def test_a_forked_child_makes_its_own_pool():
    big = np.arange(hostcopy.PARALLEL_COPY_BYTES // 8 * 2, dtype=np.float64)
    hostcopy.copied(big)                             # the parent's pool exists
    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    pid = os.fork()
    if pid == 0:                                     # child: a hang here would fail the test
        ok = np.array_equal(hostcopy.copied(big), big)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_the_thread_count_is_asked_of_the_system_once(monkeypatch):
    """copy_threads() asks os.cpu_count() once per process, not at every copy (each call took
    microseconds that a small net's evaluation at host weights paid every time)."""
    calls = []
    monkeypatch.setattr(hostcopy.os, "cpu_count", lambda: calls.append(1) or 16)
    hostcopy.copy_threads.cache_clear()
    try:
        assert hostcopy.copy_threads() == min(hostcopy.MOST_COPY_THREADS, 16)
        for _ in range(3):
            hostcopy.copy_into(np.zeros(10), np.ones(10))
        assert hostcopy.copy_threads() == min(hostcopy.MOST_COPY_THREADS, 16) and calls == [1]
    finally:
        hostcopy.copy_threads.cache_clear()
