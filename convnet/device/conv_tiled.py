"""Tiled convolution kernels (kernels/conv_tiled.cu), compiled for one layer shape at a time.

A convolutional layer's activation and delta backpropagation can be computed by the gather
product of gemm.cu (general, driven by index tables) or by conv_tiled.cu's kernels, which take
the layer's dimensions as compile-time constants and copy each case's prior activations (conv_fwd)
or deltas (conv_bwd) into shared memory once, forming the windows there. Both are candidates of
the same launch site: the tuner times them on the real data and keeps the faster, and they give
the same bits (same multiply-add order; tested). A layer's weight gradient is conv_grad's alone
where a variant fits (it adds in its own order, cases then positions), else gemm_tn's; its
variants include conv_grad_warp (a warp a partial sum, for narrow layers), which adds in the same
order.

This module knows which shapes and tile variants fit (shared memory, threads);
conv_tiled_launch.py how each kernel is built and started.
"""

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np


SOURCE = "conv_tiled.cu"
SMEM_BYTES = 48 * 1024          # shared memory of a block that needs no opt-in
GRAD_SUBS = 8                   # conv_grad: partial sums per chunk of cases (each 32 cases)
GRAD_THREADS = 1024             # threads of a conv_grad block
GRAD_TAPROW_FLOATS = 80         # accumulators of a conv_grad thread that takes a filter row
# conv_grad_warp: (output rows a band, warps a block) of its variants; the partial sums per chunk
# of cases of a layer that has it (4 cases each, so that the warps are many); the most columns
# (4 accumulators each) a lane keeps
WARP_GRAD_BANDS = ((2, 4), (4, 2), (4, 4))
WARP_GRAD_WIDE = (1, 2)         # the one taken where none of those fits (layers of long rows)
WARP_GRAD_SUBS = 64
WARP_GRAD_COLUMNS = 24
# conv_grad's float32 variants beat the tensor cores at layers this narrow, and through windows
# this wide (grad_pays)
NARROW_SLICES = 16
WIDE_TAPS, WIDE_POSITIONS, WIDE_SLICES = 25, 256, 48
SMEM_SHARE = 114 * 1024         # at most this much when opted in: two blocks per multiprocessor
                                # (of Hopper's 228 KB)
MAX_THREADS = 256               # threads of a conv_fwd block
DELTA_THREADS = 512             # threads of a conv_bwd block
REGISTERS = 65536               # per multiprocessor
# conv_fwd: (positions, slices) per thread, tried in this order, and the registers a tile is
# held to (see forward_variants)
THREAD_TILES = ((8, 8), (4, 8), (8, 4))
TILE_REGISTERS = {(8, 8): 128}
# conv_fwd: threads across the slices of the "whole warps" tiles (see _whole_warp_variants), and
# the registers those tiles are held to
WARP_COLUMNS = 4
WARP_TILE_REGISTERS = 128
# conv_fwd: a variant's window loads taking more than this many shared-memory wavefronts a warp
# (4 without conflicts) get a spread twin (_spread_variants)
SPREAD_WAVEFRONTS = 6
# conv_fwd: the positions of a thread that takes every slice of a narrow layer (4 of 12 slices ran
# 1.2x as fast as 8 on vgg-mnist's 28 x 28 x 12 layer)
ONE_COLUMN_POSITIONS = 4
# conv_bwd: the registers a thread is budgeted (4 x 16 accumulators and a tap row of weights fit
# without spilling on LeNet's second layer); a prior row wider than DELTA_NARROW_ROW takes
# 4 accumulators a column more and DELTA_ROW_EXTRA registers besides; rows of more than
# DELTA_MAX_ROW columns stay with the gather product
DELTA_REGISTERS = 96
DELTA_NARROW_ROW = 16
DELTA_ROW_EXTRA = 48
DELTA_MAX_ROW = 32
# conv_bwd: a wide row's columns in this many runs, each its own threads (vgg-mnist's 28 x 28 x 12
# delta 1.24-1.28 -> 1.19-1.22 ms on an H200; halves lost there and on LeNet's rows of 12)
DELTA_PARTS = 4


def _ceil(a, b):
    return -(-a // b)


@dataclass(frozen=True)
class ConvShape:
    """The dimensions of one convolutional layer that conv_tiled.cu is compiled for."""
    PH: int
    PW: int
    PD: int
    H: int
    W: int
    D: int
    FV: int
    FH: int
    PV: int
    PZ: int
    SV: int
    SH: int
    LDW: int

    @classmethod
    def of(cls, layer, ldw):
        s = layer.spec
        return cls(layer.prior_height, layer.prior_width, layer.prior_depth, layer.height,
                   layer.width, layer.depth, s.filter_v, s.filter_h, s.pad_v, s.pad_h,
                   s.stride_v, s.stride_h, ldw)

    def defines(self):
        return {f"CT_{k}": v for k, v in self.__dict__.items()}

    @property
    def tag(self):
        """A name part that tells shapes apart."""
        return (f"{self.PH}x{self.PW}x{self.PD}_{self.FV}x{self.FH}p{self.PV}x{self.PZ}"
                f"s{self.SV}x{self.SH}_{self.H}x{self.W}x{self.D}_l{self.LDW}")

    # the sizes conv_tiled.cu derives (namespace ct)
    @property
    def pd4(self):
        return _ceil(self.PD, 4) * 4

    def column_floats(self, spread=False):
        """Floats from one position to the next along a row of a case's shared copy (ct::Copy:
        for a spread variant an odd number of 16-byte units)."""
        return self.pd4 + 4 if spread and self.pd4 // 4 % 2 == 0 else self.pd4

    def row_floats(self, spread=False):
        """Floats of one prior row of a case's shared copy (ct::Copy<spread>::ROW)."""
        cin = (self.W - 1) * self.SH + self.FH
        cs = self.column_floats(spread)
        return cin * cs + (4 if (cin * cs // 4) % 2 == 0 else 0)

    def case_floats(self, spread=False):
        """Floats of one case's shared copy (ct::Copy<spread>::CASE)."""
        return ((self.H - 1) * self.SV + self.FV) * self.row_floats(spread)

    @property
    def staged_floats(self):
        """Floats of one case's outputs staged by a spread variant (positions ct::SD apart)."""
        return self.H * self.W * (self.D + 1 - self.D % 2)

    @property
    def out_floats(self):
        return self.H * self.W * self.D

    # the delta kernel's shared copy of a case's deltas (namespace ctb, ConvBwdTile)
    @property
    def jd4(self):
        return _ceil(self.D, 4) * 4

    def delta_case_floats(self, cases, pad=False):
        u = self.W * self.jd4 // 4
        drow = u + (9 - u % 8) % 8
        u = self.H * drow
        return 4 * (u + (((1 if pad else cases % 8)) - u % 8 + 8) % 8)


@dataclass(frozen=True)
class ForwardVariant:
    """CASES cases per block, TM positions x TN slices per thread, MINB blocks per multiprocessor,
    TPS filter taps per stage of weights (one block-wide synchronisation per stage)."""
    cases: int
    tm: int
    tn: int
    minb: int
    tps: int = 1
    spread: bool = False            # a thread's positions TR apart (conv_fwd_body's SPREAD)

    def ncol(self, shape):
        return _ceil(shape.D, self.tn)

    def threads(self, shape):
        return _ceil(self.cases * shape.H * shape.W, self.tm) * self.ncol(shape)

    def smem(self, shape):
        staged = shape.staged_floats if self.spread else shape.out_floats
        xs = _ceil(self.cases * max(shape.case_floats(self.spread), staged), 4) * 4
        return 4 * (xs + 2 * self.tps * shape.pd4 * self.ncol(shape) * self.tn)

    @property
    def suffix(self):
        return (f"c{self.cases}_m{self.tm}_n{self.tn}_b{self.minb}"
                + (f"_t{self.tps}" if self.tps > 1 else "") + ("_sp" if self.spread else ""))

    def wavefronts(self, shape):
        """Shared-memory wavefronts of a warp's 16-byte load of its windows, averaged over the
        block's warps and a thread's positions (4 without bank conflicts): quarter warps, 8
        groups of 4 banks, distinct addresses in one group taking a wavefront each."""
        return _wavefronts(self.cases, self.tm, self.ncol(shape), self.spread, shape)

    def fits(self, shape, smem_limit=SMEM_BYTES):
        return (self.ncol(shape) * self.tn <= shape.LDW and self.smem(shape) <= smem_limit
                and 32 <= self.threads(shape) <= MAX_THREADS)


def _lanes_padded(lanes):
    """The threads conv_bwd gives one prior row when PAD: a power of two up to 16, then whole
    warps (ConvBwdTile::LP)."""
    if lanes > 16:
        return _ceil(lanes, 32) * 32
    return next(p for p in (1, 2, 4, 8, 16) if p >= lanes)


@dataclass(frozen=True)
class DeltaVariant:
    """CASES cases per block; a thread owns one prior row of one case (or with PARTS one of that
    many runs of its columns) and 4 prior slices. PAD: the threads of a prior row are padded to
    whole warps (or a power of two), so a warp's threads share their prior row and take the same
    taps; TPS taps per stage of weights (1 or a filter row). AHEAD (TPS 1): one block a
    multiprocessor takes CASES cases after another, each one's deltas copied while the one before
    is summed."""
    cases: int
    pad: bool = False
    tps: int = 1
    parts: int = 1
    ahead: bool = False

    def threads(self, shape):
        lanes = shape.PD // 4 * self.cases
        return (_lanes_padded(lanes) if self.pad else lanes) * self.parts * shape.PH

    def columns(self, shape):
        """The prior columns a thread owns (4 sums each)."""
        return _ceil(shape.PW, self.parts)

    def smem(self, shape):
        copies = 2 if self.ahead else 1
        return 4 * (copies * self.cases * shape.delta_case_floats(self.cases, self.pad)
                    + 2 * self.tps * shape.jd4 * shape.PD)

    def blocks(self, M, multiprocessors):
        """The blocks of a launch for M cases: a block a CASES cases, or AHEAD one a
        multiprocessor (at most one a CASES cases)."""
        groups = _ceil(M, self.cases)
        return min(groups, multiprocessors) if self.ahead else groups

    @property
    def suffix(self):
        return (f"c{self.cases}" + ("_w" if self.pad else "")
                + (f"_t{self.tps}" if self.tps > 1 else "")
                + (f"_p{self.parts}" if self.parts > 1 else "") + ("_a" if self.ahead else ""))

    def fits(self, shape, smem_limit=SMEM_BYTES):
        return self.smem(shape) <= smem_limit and 32 <= self.threads(shape) <= DELTA_THREADS

    def minb(self, shape):
        """Blocks per multiprocessor the register allocation must allow: those of
        DELTA_REGISTERS per thread, or for a prior row wider than DELTA_NARROW_ROW its 4
        accumulators a column and DELTA_ROW_EXTRA (ptxas budgets blocks rounded up to 128
        threads); AHEAD: one, its shared memory being over SMEM_SHARE."""
        if self.ahead:
            return 1
        cols = self.columns(shape)
        per_thread = DELTA_REGISTERS if cols <= DELTA_NARROW_ROW else 4 * cols + DELTA_ROW_EXTRA
        return max(1, REGISTERS // (_ceil(self.threads(shape), 128) * 128 * per_thread))


def delta_variants(shape, has_delta, smem_limit=SMEM_BYTES):
    """The delta kernel's variants for this shape (empty: the gather product alone): strides of
    1, prior depth a multiple of 4, a prior row of at most DELTA_MAX_ROW columns (4 accumulators
    a column).
    Threads of a prior row next to each other: the most cases per block that fit, and one
    fewer. Prior rows padded to warps (smem_limit above 48 KB: the device lets a block opt in):
    the most cases that fill a warp and half a warp, with a tap or a filter row per stage."""
    if (not has_delta or shape.SV != 1 or shape.SH != 1 or shape.PD % 4
            or shape.PW > DELTA_MAX_ROW):
        return []
    share = min(smem_limit, SMEM_SHARE)
    # within 48 KB, else (a case's copy over 48 KB) opted in
    fitting = ([c for c in range(1, 9) if DeltaVariant(c).fits(shape)]
               or [c for c in range(1, 9) if DeltaVariant(c).fits(shape, share)])
    out = [DeltaVariant(c) for c in fitting[::-1][:2]]
    if smem_limit > SMEM_BYTES:
        ncol = shape.PD // 4
        for lanes in (32, 16):
            cases = max(1, lanes // ncol)
            for tps in (1, shape.FH):
                v = DeltaVariant(cases, True, tps)
                if v.fits(shape, share) and v not in out:
                    out.append(v)
    out += _parted_twins(out, shape, share)
    return out + _ahead_twins(out, shape, smem_limit)


def _parted_twins(variants, shape, smem_limit):
    """Twins of the delta variants with a prior row's columns in DELTA_PARTS runs of their own
    threads, where a row is wider than DELTA_NARROW_ROW (and the twin fits)."""
    if shape.PW <= DELTA_NARROW_ROW:
        return []
    twins = [dataclasses.replace(v, parts=DELTA_PARTS) for v in variants]
    return [v for v in twins if v.fits(shape, smem_limit)]


def _ahead_twins(variants, shape, smem_limit):
    """Twins of the delta variants that run one block a multiprocessor (its registers or shared
    memory allow no second), a tap a stage, taking group after group of cases, each group's
    deltas copied while the one before is summed: there a block's copy is otherwise waited for
    with nothing else to run. Where both copies fit the shared memory a block may opt in to
    (smem_limit); they then take over SMEM_SHARE, one block a multiprocessor."""
    alone = [v for v in variants
             if v.tps == 1 and (v.minb(shape) == 1 or v.smem(shape) > SMEM_SHARE)]
    twins = [dataclasses.replace(v, ahead=True) for v in alone]
    return [v for v in twins if v.fits(shape, smem_limit) and v.smem(shape) > SMEM_SHARE]


def forward_variants(shape, smem_limit=SMEM_BYTES):
    """The tile variants worth timing for this shape (empty: the layer stays with gemm_nn).
    For each thread tile, the most cases per block that fit (and, for the largest tile, one
    fewer, leaving room for more blocks per multiprocessor); where the device lets a block opt in
    to more shared memory (smem_limit), each of these also with a filter row of taps per stage."""
    out = []
    for tm, tn in THREAD_TILES:
        if tm > shape.H * shape.W:
            continue
        fitting = []
        for cases in range(1, 17):
            v = ForwardVariant(cases, tm, tn, 1)
            if v.fits(shape):
                fitting.append(cases)
        if not fitting:
            continue
        picks = [fitting[-1]] + ([fitting[-2]] if (tm, tn) == THREAD_TILES[0] and len(fitting) > 1 else [])
        for cases in picks:
            v = ForwardVariant(cases, tm, tn, 1)
            # the 8 x 8 tile with its positions in one row of the layer fits in 128 registers
            # without spilling (ptxas, LeNet's second layer), and left to itself the compiler
            # takes one more, which costs a block per multiprocessor; the rest is left to it
            # (ptxas budgets registers for blocks rounded up to 128 threads)
            minb = 1
            if (tm, tn) in TILE_REGISTERS and shape.W % tm == 0:
                block = _ceil(v.threads(shape), 128) * 128
                minb = max(1, REGISTERS // (block * TILE_REGISTERS[tm, tn]))
            out.append(ForwardVariant(cases, tm, tn, minb))
    if smem_limit > SMEM_BYTES and out:
        # the largest tile with the fewest more cases whose threads fill whole warps (LeNet's
        # second layer: 2 cases are 112 threads, three and a half warps; 4 cases are 7 warps),
        # in the shared memory a block may opt in to
        tm, tn = out[0].tm, out[0].tn
        for cases in range(out[0].cases + 1, 17):
            v = ForwardVariant(cases, tm, tn, 1)
            if not v.fits(shape, min(smem_limit, SMEM_SHARE)):
                break
            if v.threads(shape) % 32 == 0:
                block = _ceil(v.threads(shape), 128) * 128
                minb = (max(1, REGISTERS // (block * TILE_REGISTERS[tm, tn]))
                        if (tm, tn) in TILE_REGISTERS and shape.W % tm == 0 else 1)
                out.append(ForwardVariant(cases, tm, tn, minb))
                break
    out += _whole_warp_variants(shape, out, smem_limit)
    out += _one_column_variants(shape, out, smem_limit)
    if smem_limit > SMEM_BYTES and shape.FH > 1:
        staged = [ForwardVariant(v.cases, v.tm, v.tn, v.minb, shape.FH) for v in out]
        out += [v for v in staged if v.fits(shape, min(smem_limit, SMEM_SHARE))]
    return out + _spread_variants(shape, out, smem_limit)


@functools.lru_cache(maxsize=None)
def _wavefronts(cases, tm, ncol, spread, shape):
    """ForwardVariant.wavefronts, counted once for all variants of the same threads and layout
    (every plan asks again, and a filter row a stage changes neither)."""
    rows = cases * shape.H * shape.W
    tr = _ceil(rows, tm)
    t = np.arange(tr * ncol)
    i = np.arange(tm)[:, None]
    g = t % tr + i * tr if spread else t % tr * tm + i       # each thread's positions
    g = np.where(g < rows, g, 0)
    start = ((g // (shape.H * shape.W)) * shape.case_floats(spread)
             + (g // shape.W % shape.H) * shape.SV * shape.row_floats(spread)
             + (g % shape.W) * shape.SH * shape.column_floats(spread))   # aoff
    # quarter warps of 8 lanes (the last one padded with its last lane: no new address), their
    # addresses sorted; the distinct ones in the busiest group of 4 banks are its wavefronts
    start = np.pad(start, ((0, 0), (0, -len(t) % 8)), mode="edge")
    quarters = np.sort(start.reshape(tm, -1, 8), axis=2)
    new = np.ones(quarters.shape, bool)
    new[..., 1:] = quarters[..., 1:] != quarters[..., :-1]
    group = quarters // 4 % 8
    busiest = np.max([(new & (group == k)).sum(axis=2) for k in range(8)], axis=0)
    return 4 * int(busiest.sum()) / busiest.size


def _spread_variants(shape, variants, smem_limit):
    """The spread twins (a thread's positions TR apart) of the variants whose window loads have
    bank conflicts: over SPREAD_WAVEFRONTS wavefronts a warp's load where 4 would do, and more
    than the twin's (the CIFAR-sized net's 16 x 16 x 48 layer, 4 consecutive positions a thread
    on 24 slices: 16)."""
    pairs = ((v, dataclasses.replace(v, spread=True)) for v in variants)
    return [twin for v, twin in pairs
            if SPREAD_WAVEFRONTS < v.wavefronts(shape) > twin.wavefronts(shape)
            and twin.fits(shape, min(smem_limit, SMEM_SHARE))]


def _whole_warp_variants(shape, taken, smem_limit):
    """Tiles whose blocks are a multiple of 4 warps, so that each of a multiprocessor's four
    schedulers gets the same number of warps. With 7 threads across LeNet's 50 slices (8 x 8
    tiles: 56 slices) no count of cases fills the schedulers evenly (two blocks of 7 warps are
    4 + 4 + 3 + 3), and a block waits for the busiest. Here 4 threads take the slices, each
    ceil(depth / 4) of them (any number: conv_tiled.cu deals them out in groups of 4), with as
    many positions as 64 accumulators allow; for each such tile the fewest cases whose threads
    are a multiple of 128, and twice that."""
    hw = shape.H * shape.W
    tn = _ceil(shape.D, WARP_COLUMNS)
    tm = next((t for t in (8, 4, 2) if t * tn <= 64), None)
    if tm is None or tn < 5 or (tm, tn) in THREAD_TILES or hw % tm or shape.W % tm:
        return []
    per_case = hw // tm * WARP_COLUMNS
    first = next((c for c in range(1, 17) if c * per_case % 128 == 0), None)
    out = []
    for cases in ((first, 2 * first) if first else ()):
        block = _ceil(cases * per_case, 128) * 128
        v = ForwardVariant(cases, tm, tn, max(1, REGISTERS // (block * WARP_TILE_REGISTERS)))
        if v.fits(shape, min(smem_limit, SMEM_SHARE)) and v not in taken:
            out.append(v)
    return out


def _one_column_variants(shape, taken, smem_limit):
    """Tiles of one thread across every slice of a layer of 9-16 slices (padded to 4), so none
    is computed for nothing (8-slice tiles take 16 for 12); ONE_COLUMN_POSITIONS positions a
    thread, the most cases that fit in a block and one fewer."""
    tn = shape.jd4
    if not 8 < tn <= 16:
        return []
    tiles = (ForwardVariant(cases, ONE_COLUMN_POSITIONS, tn, 1) for cases in range(1, 17))
    fitting = [v for v in tiles if v.fits(shape, min(smem_limit, SMEM_SHARE))]
    return [v for v in fitting[-2:] if v not in taken]


@dataclass(frozen=True)
class GradVariant:
    """conv_grad: a block takes `rows` filter rows; a thread keeps TN columns of 4 weight rows (4
    prior slices) of one tap (and a group of threads the bias row), or with TAPROW of every tap
    of its filter row (each window column it loads then serves every tap that reaches it; the
    last filter row's first slices also keep the bias row). Two stages of shared memory, the next
    case loading while this one is summed, or one where two do not fit (the same sums in the
    same order)."""
    tn: int
    taprow: bool = False
    rows: int = 1
    stages: int = 2

    def ncolg(self, shape):
        return _ceil(shape.D, self.tn)

    def threads(self, shape):
        groups = shape.pd4 // 4 * (self.rows if self.taprow else shape.FH) + (0 if self.taprow else 1)
        return groups * self.ncolg(shape)

    def grid(self, shape, n_partials):
        """Blocks across the filter rows, and the partials."""
        return _ceil(shape.FV, self.rows), n_partials, 1

    def smem(self, shape):
        stage = shape.case_floats() + shape.H * shape.W * self.ncolg(shape) * self.tn
        return 4 * self.stages * (_ceil(stage, 4) * 4)

    @property
    def suffix(self):
        return (f"n{self.tn}" + (f"_r{self.rows if self.rows > 1 else ''}" if self.taprow else "")
                + ("_s1" if self.stages == 1 else ""))

    def fits(self, shape, smem_limit):
        # TAPROW: at most 80 accumulators (a 5-tap filter row of 4 x 4)
        return (self.smem(shape) <= smem_limit and 32 <= self.threads(shape) <= GRAD_THREADS
                and (self.rows == 1 or self.taprow) and self.rows <= shape.FV
                and (not self.taprow or shape.FH * 4 * self.tn <= GRAD_TAPROW_FLOATS))


@dataclass(frozen=True)
class GradWarpVariant:
    """conv_grad_warp: a warp a partial sum, its lanes each 4 prior slices of a tap and one lane
    the bias row, for layers whose window has fewer than 32 such groups; `rows` output rows of a
    case in a warp's shared memory at a time (two such bands: the next one copied while one is
    summed), `warps` partials a block. Its sums are conv_grad's, in conv_grad's order."""
    rows: int
    warps: int
    stages = 2                      # bands of a warp in shared memory at once

    def threads(self, shape):
        return 32 * self.warps

    def grid(self, shape, n_partials):
        return _ceil(n_partials, self.warps), 1, 1

    def smem(self, shape):
        prior_rows = (self.rows - 1) * shape.SV + shape.FV
        stage = _ceil(prior_rows * shape.row_floats() + self.rows * shape.W * shape.jd4, 4) * 4
        return 4 * self.warps * 2 * stage

    @property
    def suffix(self):
        return f"w{self.warps}_b{self.rows}"

    def fits(self, shape, smem_limit):
        return (_window_groups(shape) < 32 and shape.jd4 <= WARP_GRAD_COLUMNS
                and self.rows <= shape.H and self.smem(shape) <= smem_limit)


def _window_groups(shape):
    """Groups of 4 prior slices in a layer's window: its weight rows, 4 at a time."""
    return shape.FV * shape.FH * shape.pd4 // 4


def grad_pays(shape, variants):
    """Whether conv_grad's variants (these) beat the tensor cores at a layer's weight gradient,
    by what was measured (NOTES.md, "A warp a partial sum"): where conv_grad_warp fits, and for
    other narrow layers (windows of fewer than 64 groups of 4 prior slices, at most
    NARROW_SLICES slices: 16 slices on 16 through 3 x 3, 1.87 -> 1.54 ms), and through windows of
    WIDE_TAPS taps or more over WIDE_POSITIONS positions of at most WIDE_SLICES slices, where a
    thread's window column serves a filter row of taps (the CIFAR-sized net's padded 5 x 5
    layer: 2.09 -> 1.80 ms; LeNet's 8 x 8 positions, 50 slices, stayed level or behind)."""
    if not variants:
        return False
    if any(isinstance(v, GradWarpVariant) for v in variants):
        return True
    if _window_groups(shape) < 64 and shape.jd4 <= NARROW_SLICES:
        return True
    return (shape.FV * shape.FH >= WIDE_TAPS and shape.H * shape.W >= WIDE_POSITIONS
            and shape.D <= WIDE_SLICES)


def grad_subs(shape, variants):
    """Partial sums per chunk of cases of a layer whose conv_grad variants are these: as many
    as conv_grad_warp needs warps where grad_pays (there conv_grad's other variants gained with
    them too), else GRAD_SUBS."""
    return WARP_GRAD_SUBS if grad_pays(shape, variants) else GRAD_SUBS


def grad_variants(shape, smem_limit=SMEM_BYTES):
    """conv_grad's variants for this shape (empty: the layer's gradient stays with gemm_tn):
    prior depth a multiple of 4 (a thread's 4 weight rows are one 16-byte load of a window).
    They add in their own order, not gemm_tn's (see conv_tiled.cu), so a layer takes either
    these or gemm_tn's tiles, never a choice between the two. Where no variant's two stages fit,
    the same variants with one stage (a layer's variants and so its kernels otherwise stay as
    they were)."""
    if shape.PD % 4:
        return []
    every = shape.FV
    candidates = (GradVariant(4, True), GradVariant(2, True), GradVariant(4, True, every),
                  GradVariant(4))
    limit = min(smem_limit, SMEM_SHARE)
    warps = [v for v in (GradWarpVariant(rows, warps) for rows, warps in WARP_GRAD_BANDS)
             if v.fits(shape, limit)] or [v for v in [GradWarpVariant(*WARP_GRAD_WIDE)]
                                          if v.fits(shape, limit)]
    found = [v for v in dict.fromkeys(candidates) if v.fits(shape, limit)]
    if found:
        return found + warps
    single = (dataclasses.replace(v, stages=1) for v in candidates)
    return [v for v in dict.fromkeys(single) if v.fits(shape, limit)] + warps
