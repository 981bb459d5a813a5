"""conv_patch.cu's variants of a convolutional layer's products on the tensor cores, and their
launches: a block copies its cases' rows of the input map once into shared memory (the patch)
and forms every window from it, where the gather products copy each input once a window. The
activation's input map is the prior layer's activations; the delta backpropagated into the
prior layer (strides of 1, this layer's slices a multiple of 16) takes this layer's deltas, with
the window turned around. The variants give the gather products' bits (the same family: split
TF32, or one TF32 product), so they are candidates beside them wherever the kernel plan puts a
step on the tensor cores. Where a max pooling whose windows tile the layer follows (the plan's
conv_pool), each activation variant has a twin that takes it in its epilogue. The module of a
layer shape is built with the rest of the net's kernels."""

from dataclasses import dataclass

from .conv_tiled import SMEM_BYTES, _ceil
from .kernel_args import (CONV_PATCH, CONV_PATCH_DELTA, CONV_PATCH_DELTA_WEIGHTS,
                          CONV_PATCH_POOL, CONV_PATCH_WEIGHTS)

# the kernel parameters of the weights' split and of the products, by delta
_PARAMS = {False: (CONV_PATCH_WEIGHTS, CONV_PATCH), True: (CONV_PATCH_DELTA_WEIGHTS, CONV_PATCH_DELTA)}

SOURCE = "conv_patch.cu"
STAGES = 3                      # stages of weight fragments in flight
# positions a block aims at (a case's rows, or whole cases where a case has fewer): on an H100,
# LeNet's 8 x 8 x 50 layer 0.63 ms with 128 and 0.66 with 64, cifar-conv's 16 x 16 x 48 layer
# 1.28 and 1.43 (NOTES.md, "Windows from a patch")
BLOCK_POSITIONS = (128, 64)
WARP_ROWS = 32                  # positions of a warp (two m16 tiles)
MAX_COLUMNS = 56                # columns of a block whose warps take them all
WIDE_BLOCK, WIDE_WARP = 64, 32  # past MAX_COLUMNS: blocks of 64 columns, warps of 32
DELTA_SLICES = 16               # the delta's: this layer's slices a multiple of this
# windows of fewer taps reuse each input too little to pay for the patch: at 3 x 3 the
# runs-of-four gathers led at every site of the suite (avgpool-deep's activation 1.06 against
# 1.24 ms, its delta 0.94 against 1.22, strided-rgb's 0.38 against 0.50), at 5 x 5 the patch at
# every one (NOTES.md, "Windows from a patch")
MIN_TAPS = 16
MAX_THREADS = 1024


@dataclass(frozen=True)
class Geometry:
    """One product's input map (rows, columns, slices), its outputs' positions and columns,
    the zero rows and columns above and left of the map, strides and window (Geom in
    conv_patch.cu); bias: k ends with the bias input."""
    ih: int
    iw: int
    ic: int
    oh: int
    ow: int
    on: int
    qv: int
    qz: int
    sv: int
    sh: int
    fv: int
    fh: int
    bias: bool

    @classmethod
    def forward(cls, s):
        return cls(s.PH, s.PW, s.PD, s.H, s.W, s.D, s.PV, s.PZ, s.SV, s.SH, s.FV, s.FH, True)

    @classmethod
    def delta(cls, s):
        return cls(s.H, s.W, s.D, s.PH, s.PW, s.PD, s.FV - 1 - s.PV, s.FH - 1 - s.PZ, 1, 1, s.FV,
                   s.FH, False)

    @property
    def stages(self):
        """Stages of 16 k of the window (and the bias)."""
        return _ceil(self.fv * self.fh * self.ic + self.bias, 16)

    @property
    def column_floats(self):
        """Floats from one position to the next in the patch: the slices padded to an odd
        number of 16-byte units."""
        ic4 = _ceil(self.ic, 4) * 4
        return ic4 if ic4 // 4 % 2 else ic4 + 4

    @property
    def patch_columns(self):
        return (self.ow - 1) * self.sh + self.fh

    @property
    def fragment_columns(self):
        """Columns of the weights' B fragments: the output columns padded to 8, or past
        MAX_COLUMNS to whole blocks of WIDE_BLOCK."""
        if self.on <= MAX_COLUMNS:
            return _ceil(self.on, 8) * 8
        return _ceil(self.on, WIDE_BLOCK) * WIDE_BLOCK

    @property
    def fragment_bytes(self):
        return self.stages * 2 * self.fragment_columns // 8 * 32 * 16


@dataclass(frozen=True)
class PatchVariant:
    """ROWS rows of a case's output positions (or CASES whole cases) a block, BN columns, warps
    of WM positions x WN columns."""
    rows: int
    cases: int
    wm: int
    wn: int
    bn: int

    def positions(self, geo):
        return self.cases * self.rows * geo.ow

    def threads(self, geo):
        return 32 * _ceil(self.positions(geo), self.wm) * (self.bn // self.wn)

    def grid(self, geo, M):
        return (_ceil(M, self.cases) * _ceil(geo.oh, self.rows), _ceil(geo.on, self.bn), 1)

    def smem(self, geo, pooled=False):
        """Bytes of dynamic shared memory: the patch, the weight fragments' stages and the
        window offsets of every k (conv_patch_body); pooled: at least the block's activations
        staged for the pooling (rows of BN + 4 floats)."""
        prior_rows = (self.rows - 1) * geo.sv + geo.fv
        patch = _ceil(self.cases * prior_rows * geo.patch_columns * geo.column_floats, 4) * 4
        floats = patch + STAGES * 2 * (self.bn // 8) * 32 * 4 + 16 * geo.stages
        return 4 * max(floats, self.positions(geo) * (self.bn + 4) if pooled else 0)

    @property
    def suffix(self):
        return f"r{self.rows}_c{self.cases}_w{self.wm}x{self.wn}_n{self.bn}"

    def fits(self, geo, smem_limit, pool=None):
        return (self.smem(geo, pool is not None) <= smem_limit
                and self.threads(geo) <= MAX_THREADS
                and (pool is None or self.rows % pool[0] == 0))


def patch_variants(geo, smem_limit=SMEM_BYTES, pool=None):
    """The variants that fit a product's geometry and a device's shared memory (none for a
    window of under MIN_TAPS taps); pool: the (rows, columns) of the max-pooling windows after
    the activation, which each variant's bands then hold whole, for its pooled twin."""
    if geo.fv * geo.fh < MIN_TAPS:
        return []
    bn = geo.fragment_columns if geo.on <= MAX_COLUMNS else WIDE_BLOCK
    wn = bn if geo.on <= MAX_COLUMNS else WIDE_WARP
    step = pool[0] if pool else 1
    out = {}
    for target in BLOCK_POSITIONS:
        per_case = geo.oh * geo.ow
        cases, rows = ((max(1, target // per_case), geo.oh) if per_case <= target
                       else (1, max(step, target // geo.ow // step * step)))
        v = PatchVariant(rows, cases, WARP_ROWS, wn, bn)
        if v.fits(geo, smem_limit, pool):
            out.setdefault(v.suffix, v)
    return list(out.values())


def pools_in_epilogue(geo, pool):
    """Whether max pooling of (rows, columns) windows after an activation of this geometry is
    taken in the patch variants' epilogue: 2 x 2 windows that tile the layer, where a block takes
    every column (the layers of at most MAX_COLUMNS slices): the shapes the GPU tests check the
    pooled twins on. Any other pooling stays a launch of its own."""
    return (pool == (2, 2) and geo.oh % pool[0] == 0 and geo.ow % pool[1] == 0
            and geo.on <= MAX_COLUMNS)


def has_delta_variants(shape, has_delta):
    """Whether the delta into the prior layer has patch variants: strides of 1, this layer's
    slices a multiple of DELTA_SLICES (each tap then whole stages of 16 k, so the zeros past
    the map fill whole stages: the gather product's sums)."""
    return has_delta and shape.SV == shape.SH == 1 and shape.D % DELTA_SLICES == 0


class ConvPatch:
    """conv_patch.cu's kernels of one convolutional layer: candidate names for the tuner
    (`forward`, `delta`: name -> PatchVariant) and the launches. passes: 3 (split TF32) or 1
    (one TF32 product)."""

    def __init__(self, rt, shape, forward, delta, passes, pool=None):
        self.rt = rt
        self.shape = shape
        self.forward_variants = dict(forward)
        self.delta_variants = dict(delta)
        self.passes = passes
        self.pool = pool if forward else None
        self.geometry = {False: Geometry.forward(shape), True: Geometry.delta(shape)}
        self._fragments = {}
        self._built = False

    def variants(self, delta):
        return self.delta_variants if delta else self.forward_variants

    def function(self, tile, delta=False, pooled=False):
        kind = "conv_patch_delta" if delta else "conv_patch"
        if pooled:
            kind = f"conv_patch_pool_w{self.pool[0]}x{self.pool[1]}"
        return f"{kind}_{self.shape.tag}_p{self.passes}_{self.variants(delta)[tile].suffix}"

    def _pooled_kernels(self):
        if self.pool is None:
            return []
        return [(self.function(tile, pooled=True),
                 f"CONV_PATCH_POOL({self.function(tile, pooled=True)}, {v.rows}, {v.cases}, "
                 f"{v.wm}, {v.wn}, {v.bn}, {STAGES}, {self.passes}, {self.pool[0]}, "
                 f"{self.pool[1]})", CONV_PATCH_POOL)
                for tile, v in self.forward_variants.items()]

    def weights_function(self, delta=False):
        return f"conv_patch_{'delta_' if delta else ''}weights_{self.shape.tag}"

    def kernels(self):
        """(function name, instantiation line, KernelParams) of every variant."""
        out = []
        for delta in (False, True):
            if not self.variants(delta):
                continue
            weights, products = _PARAMS[delta]
            name = self.weights_function(delta)
            out.append((name, f"{weights.family.upper()}({name})", weights))
            for tile, v in self.variants(delta).items():
                name = self.function(tile, delta)
                out.append((name, f"{products.family.upper()}({name}, {v.rows}, {v.cases}, "
                                  f"{v.wm}, {v.wn}, {v.bn}, {STAGES}, {self.passes})", products))
        return out + self._pooled_kernels()

    def build_request(self):
        """(kernel file, defines, kernels): what Runtime.specialize builds for this layer."""
        return SOURCE, self.shape.defines(), self.kernels()

    def allocate(self):
        """The device buffers of the split weights (the context active)."""
        for delta in (False, True):
            if self.variants(delta):
                self._fragments[delta] = self.rt.alloc(self.geometry[delta].fragment_bytes)

    def _build(self):
        if not self._built:
            self.rt.specialize(*self.build_request())
            for delta in (False, True):
                geo = self.geometry[delta]
                for tile, v in self.variants(delta).items():
                    if v.smem(geo) > SMEM_BYTES:
                        self.rt.allow_shared(self.function(tile, delta), v.smem(geo))
            geo = self.geometry[False]
            for tile, v in self.forward_variants.items() if self.pool else ():
                if v.smem(geo, True) > SMEM_BYTES:
                    self.rt.allow_shared(self.function(tile, pooled=True), v.smem(geo, True))
            self._built = True

    def _split_weights(self, delta, weights):
        """The weights split into the products' B fragments (the device buffer)."""
        geo, frag = self.geometry[delta], self._fragments[delta]
        n = geo.fragment_bytes // 16
        split, _ = _PARAMS[delta]
        self.rt.launch(self.weights_function(delta), (_ceil(n, 256), 1, 1), (256, 1, 1),
                       *split.pack(weights=weights, frag=frag))
        return frag

    def launch(self, tile, *, delta, src, lda, weights, M, out, ldo, prior, epi):
        """out = epi(the product) for M cases with variant `tile`: the activation (weights: the
        forward layout) or, with delta, the delta into the prior layer (the backward layout);
        the weights are split into fragments first."""
        self._build()
        geo, v = self.geometry[delta], self.variants(delta)[tile]
        frag = self._split_weights(delta, weights)
        self.rt.launch(self.function(tile, delta), v.grid(geo, M), (v.threads(geo), 1, 1),
                       *_PARAMS[delta][1].pack(src=src, lda=lda, frag=frag, M=M, out=out,
                                               ldo=ldo, prior=prior, epi=epi),
                       shared=v.smem(geo))

    def forward_pool(self, tile, *, src, lda, weights, M, pout, ldp, pids):
        """The max-pooling layer after this one (pout, pids: its activation and winners, ldp a
        case; pids NULL: no winners) for M cases, with forward variant `tile` and the pooling
        in its epilogue."""
        self._build()
        geo, v = self.geometry[False], self.forward_variants[tile]
        frag = self._split_weights(False, weights)
        self.rt.launch(self.function(tile, pooled=True), v.grid(geo, M), (v.threads(geo), 1, 1),
                       *CONV_PATCH_POOL.pack(src=src, lda=lda, frag=frag, M=M, pout=pout,
                                             ldp=ldp, pids=pids),
                       shared=v.smem(geo, True))
