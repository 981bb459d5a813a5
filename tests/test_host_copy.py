"""The threaded host copies of the device path (convnet/device/host_copy.py): the same values and
bits as numpy's single-threaded copy and sums, at every size around the thresholds."""

import numpy as np
import pytest

from convnet.device import host_copy


@pytest.mark.parametrize("n", [0, 1, 1000, host_copy.PARALLEL_BYTES // 8 - 1,
                               host_copy.PARALLEL_BYTES // 8 * 3 + 7, 1_070_013])
def test_copies_and_sums_match_numpy(n, monkeypatch):
    monkeypatch.setattr(host_copy, "_threads", lambda: 4)     # slices even on a 2-core machine
    rng = np.random.default_rng(n)
    parts = [rng.standard_normal(n) * 10.0 ** k for k in range(3)]
    dst = np.full(n, np.nan)
    assert host_copy.copy_into(dst, parts[0]) is dst
    assert np.array_equal(dst, parts[0])
    again = host_copy.copied(parts[1])
    assert np.array_equal(again, parts[1]) and not np.shares_memory(again, parts[1])
    assert host_copy.summed(parts[:2]).tobytes() == (parts[0] + parts[1]).tobytes()
    assert host_copy.summed(parts).tobytes() == ((parts[0] + parts[1]) + parts[2]).tobytes()


def test_large_arrays_are_cut_into_slices_that_cover_them_once(monkeypatch):
    monkeypatch.setattr(host_copy, "_threads", lambda: 8)
    n = host_copy.SLICE_BYTES // 8 * 5 + 3              # five slices' worth of float64
    seen = []
    host_copy.in_slices(8 * n, n, lambda a, b: seen.append((a, b)))
    seen.sort()
    assert len(seen) == 5 and seen[0][0] == 0 and seen[-1][1] == n
    assert all(b == a2 for (_, b), (a2, _) in zip(seen, seen[1:]))
    seen.clear()
    host_copy.in_slices(1000, 125, lambda a, b: seen.append((a, b)))
    assert seen == [(0, 125)]                           # small: one call, this thread
