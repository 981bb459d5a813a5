"""Tiled convolution kernels (kernels/conv_tiled.cu), compiled for one layer shape at a time.

A convolutional layer's activation and delta backpropagation can be computed by the gather
product of gemm.cu (general, driven by index tables) or by conv_tiled.cu's kernels, which take
the layer's dimensions as compile-time constants and copy each case's prior activations (conv_fwd)
or deltas (conv_bwd) into shared memory once, forming the windows there. Both are candidates of
the same launch site: the tuner times them on the real data and keeps the faster, and they give
the same bits (same multiply-add order; tested). The weight gradient stays with gemm_tn.

The module of a layer shape is built the first time one of its kernels is launched (a layer the
tuner never times, because its launches are small, costs no compilation). This module knows
which shapes and tile variants fit (shared memory, threads) and how each kernel is started; the
runtime compiles and caches the modules.
"""

from dataclasses import dataclass

from .kernel_args import CONV_BWD, CONV_FWD

SOURCE = "conv_tiled.cu"
SMEM_BYTES = 48 * 1024          # static shared memory of one block
MAX_THREADS = 256               # threads of a conv_fwd block
DELTA_THREADS = 512             # threads of a conv_bwd block
REGISTERS = 65536               # per multiprocessor
# conv_fwd: (positions, slices) per thread, tried in this order, and the registers a tile is
# held to (see forward_variants)
THREAD_TILES = ((8, 8), (4, 8), (8, 4))
TILE_REGISTERS = {(8, 8): 128}


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

    @property
    def case_floats(self):
        rin = (self.H - 1) * self.SV + self.FV
        cin = (self.W - 1) * self.SH + self.FH
        row = cin * self.pd4 + (4 if (cin * self.pd4 // 4) % 2 == 0 else 0)
        return rin * row

    @property
    def out_floats(self):
        return self.H * self.W * self.D

    # the delta kernel's shared copy of a case's deltas (namespace ctb, ConvBwdTile)
    @property
    def jd4(self):
        return _ceil(self.D, 4) * 4

    def delta_case_floats(self, cases):
        u = self.W * self.jd4 // 4
        drow = u + (9 - u % 8) % 8
        u = self.H * drow
        return 4 * (u + ((cases % 8) - u % 8 + 8) % 8)


@dataclass(frozen=True)
class ForwardVariant:
    """CASES cases per block, TM positions x TN slices per thread, MINB blocks per multiprocessor."""
    cases: int
    tm: int
    tn: int
    minb: int

    def ncol(self, shape):
        return _ceil(shape.D, self.tn)

    def threads(self, shape):
        return _ceil(self.cases * shape.H * shape.W, self.tm) * self.ncol(shape)

    def smem(self, shape):
        xs = self.cases * max(shape.case_floats, shape.out_floats)
        return 4 * (xs + 2 * shape.pd4 * self.ncol(shape) * self.tn)

    @property
    def suffix(self):
        return f"c{self.cases}_m{self.tm}_n{self.tn}_b{self.minb}"

    def fits(self, shape):
        return (self.ncol(shape) * self.tn <= shape.LDW and self.smem(shape) <= SMEM_BYTES
                and 32 <= self.threads(shape) <= MAX_THREADS)


@dataclass(frozen=True)
class DeltaVariant:
    """CASES cases per block; a thread owns one prior row of one case and 4 prior slices."""
    cases: int

    def threads(self, shape):
        return shape.PD // 4 * self.cases * shape.PH

    def smem(self, shape):
        return 4 * (self.cases * shape.delta_case_floats(self.cases) + 2 * shape.jd4 * shape.PD)

    @property
    def suffix(self):
        return f"c{self.cases}"

    def fits(self, shape):
        return self.smem(shape) <= SMEM_BYTES and 32 <= self.threads(shape) <= DELTA_THREADS


def delta_variants(shape, has_delta):
    """The delta kernel's variants for this shape (empty: the gather product alone): strides of
    1, prior depth a multiple of 4, a prior row of at most 16 columns (4 x 16 accumulators);
    the most cases per block that fit, and one fewer."""
    if (not has_delta or shape.SV != 1 or shape.SH != 1 or shape.PD % 4 or shape.PW > 16):
        return []
    fitting = [c for c in range(1, 9) if DeltaVariant(c).fits(shape)]
    return [DeltaVariant(c) for c in fitting[::-1][:2]]


def forward_variants(shape):
    """The tile variants worth timing for this shape (empty: the layer stays with gemm_nn).
    For each thread tile, the most cases per block that fit (and, for the largest tile, one
    fewer, leaving room for more blocks per multiprocessor)."""
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
    return out


class ConvTiled:
    """The tiled kernels of one convolutional layer: candidate names for the tuner and launches.
    fwd and bwd map a candidate name to its variant (activation, delta backpropagation)."""

    def __init__(self, rt, layer, ldw):
        self.rt = rt
        self.shape = ConvShape.of(layer, ldw)
        self.fwd = {f"tiled_{v.suffix}": v for v in forward_variants(self.shape)}
        self.bwd = {f"tiled_{v.suffix}": v for v in delta_variants(self.shape, layer.index > 0)}
        self._built = False

    def function(self, tile, kind="fwd"):
        v = (self.fwd if kind == "fwd" else self.bwd)[tile]
        return f"conv_{kind}_{self.shape.tag}_{v.suffix}"

    def kernels(self):
        """(function name, instantiation line, KernelParams) of every variant."""
        out = [(self.function(t), f"CONV_FWD({self.function(t)}, {v.cases}, {v.tm}, {v.tn}, "
                f"{v.minb})", CONV_FWD) for t, v in self.fwd.items()]
        out += [(self.function(t, "bwd"), f"CONV_BWD({self.function(t, 'bwd')}, {v.cases})",
                 CONV_BWD) for t, v in self.bwd.items()]
        return out

    def _build(self):
        if not self._built:
            self.rt.specialize(SOURCE, self.shape.defines(), self.kernels())
            self._built = True

    def forward(self, tile, *, src, lda, weights, M, out, ldo):
        """out = tanh(the layer's activation) for M cases, with forward variant `tile`."""
        self._build()
        v = self.fwd[tile]
        self.rt.launch(self.function(tile), (_ceil(M, v.cases), 1, 1), (v.threads(self.shape), 1, 1),
                       *CONV_FWD.pack(src=src, lda=lda, weights=weights, M=M, out=out, ldo=ldo))

    def delta(self, tile, *, delta, ldd, weights, M, out, ldo, prior, epi):
        """out = epi(the prior layer's delta) for M cases, with delta variant `tile`
        (weights: this layer's backward layout)."""
        self._build()
        v = self.bwd[tile]
        self.rt.launch(self.function(tile, "bwd"), (_ceil(M, v.cases), 1, 1),
                       (v.threads(self.shape), 1, 1),
                       *CONV_BWD.pack(delta=delta, ldd=ldd, weights=weights, M=M, out=out, ldo=ldo,
                                      prior=prior, epi=epi))
