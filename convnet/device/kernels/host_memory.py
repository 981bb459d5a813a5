"""Device memory as host arrays, addressed as the kernels address it: every allocation gets its
own range of addresses, so a pointer (an int) names an allocation and an offset into it, and
every access is bounds-checked. The references (*_reference.py) read and write through it."""

import numpy as np


class Alloc:
    """An allocation: its base address (int() of it) and size."""

    def __init__(self, mem, base, nbytes):
        self.mem, self.base, self.nbytes = mem, base, nbytes

    def __int__(self):
        return self.base

    def __index__(self):
        return self.base


class HostMemory:
    """The allocations, new ones filled with 0xAB bytes (like unwritten device memory)."""

    STEP = 1 << 36

    def __init__(self):
        self.bufs = {}
        self.next = self.STEP

    def alloc(self, nbytes):
        base = self.next
        self.next += self.STEP
        self.bufs[base] = np.full(int(nbytes), 0xAB, dtype=np.uint8)   # poisoned, like real memory
        return Alloc(self, base, nbytes)

    def view(self, addr, dtype, count):
        """count items of dtype at addr, bounds-checked."""
        addr = int(addr)
        base = (addr // self.STEP) * self.STEP
        if base not in self.bufs:
            raise AssertionError(f"pointer {addr:#x} is not in any allocation")
        buf = self.bufs[base]
        off = addr - base
        nbytes = int(count) * np.dtype(dtype).itemsize
        if off < 0 or off + nbytes > buf.size:
            raise AssertionError(f"access of {nbytes} bytes at offset {off} beyond an allocation of {buf.size}")
        if off % np.dtype(dtype).itemsize:
            raise AssertionError("misaligned pointer")
        return buf[off:off + nbytes].view(dtype)

    def extent(self, addr, dtype):
        """All items of dtype from addr to the end of its allocation."""
        addr = int(addr)
        base = (addr // self.STEP) * self.STEP
        buf = self.bufs[base]
        return (buf.size - (addr - base)) // np.dtype(dtype).itemsize



class ReferenceBase:
    """What every family's reference reads with: float32 views and gathers by index."""

    def __init__(self, mem):
        self.mem = mem

    def f32(self, addr, count):
        return self.mem.view(addr, np.float32, count)

    def gather(self, addr, dtype, index):
        index = np.asarray(index)
        if index.size == 0:
            return np.zeros(index.shape, dtype)
        assert index.min() >= 0
        return self.mem.view(addr, dtype, int(index.max()) + 1)[index]


def covered(grid, tile_m, tile_n, M, N):
    """Check that a grid of tile_m x tile_n tiles covers M rows and N columns."""
    assert grid[0] * tile_n >= N, f"grid x {grid[0]} x {tile_n} does not cover {N} columns"
    assert grid[1] * tile_m >= M, f"grid y {grid[1]} x {tile_m} does not cover {M} rows"
