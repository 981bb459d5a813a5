"""conv_patch.cu's variants of one convolutional layer's activation on the tensor cores, and
their launches: a block copies its cases' prior rows once into shared memory (the patch) and
forms every window from it, where the gather products copy each input once a window. The
variants give the gather products' bits (the same family: split TF32, or one TF32 product), so
they are candidates beside them wherever the kernel plan puts an activation on the tensor cores.
The module of a layer shape is built with the rest of the net's kernels."""

from dataclasses import dataclass

from .conv_tiled import SMEM_BYTES
from .kernel_args import CONV_PATCH, CONV_PATCH_WEIGHTS

SOURCE = "conv_patch.cu"
STAGES = 3                      # stages of weight fragments in flight
# positions a block aims at (a case's rows, or whole cases where a case has fewer): on an H100,
# LeNet's 8 x 8 x 50 layer 0.64 ms either way, cifar-conv's 16 x 16 x 48 layer 1.22 ms with 128
# and 1.50 with 64 (NOTES.md, "Windows from a patch")
BLOCK_POSITIONS = (128, 64)
WARP_ROWS = 32                  # positions of a warp (two m16 tiles)
MAX_COLUMNS = 56                # columns of a block; wider layers take blocks of BLOCK_COLUMNS
BLOCK_COLUMNS = 32
MAX_THREADS = 1024


def _ceil(a, b):
    return -(-a // b)


@dataclass(frozen=True)
class PatchVariant:
    """ROWS rows of a case's positions (or CASES whole cases) a block, warps of WM positions x
    BN columns."""
    rows: int
    cases: int
    wm: int
    bn: int

    def positions(self, shape):
        return self.cases * self.rows * shape.W

    def threads(self, shape):
        return 32 * _ceil(self.positions(shape), self.wm)

    def grid(self, shape, M):
        bands = _ceil(shape.H, self.rows)
        return (_ceil(M, self.cases) * bands, _ceil(shape.D, self.bn), 1)

    def smem(self, shape):
        """Bytes of dynamic shared memory: the patch, the weight fragments' stages and the
        window offsets of every k (conv_patch_body)."""
        prior_rows = (self.rows - 1) * shape.SV + shape.FV
        patch = _ceil(self.cases * prior_rows * patch_columns(shape) * column_floats(shape), 4) * 4
        fragments = STAGES * 2 * (self.bn // 8) * 32 * 4
        return 4 * (patch + fragments + 16 * stages(shape))

    @property
    def suffix(self):
        return f"r{self.rows}_c{self.cases}_w{self.wm}_n{self.bn}"

    def fits(self, shape, smem_limit):
        return self.smem(shape) <= smem_limit and self.threads(shape) <= MAX_THREADS


def column_floats(shape):
    """Floats from one position to the next in the patch (cp::CS): the prior slices padded to an
    odd number of 16-byte units."""
    pd4 = _ceil(shape.PD, 4) * 4
    return pd4 if pd4 // 4 % 2 else pd4 + 4


def patch_columns(shape):
    return (shape.W - 1) * shape.SH + shape.FH


def stages(shape):
    """Stages of 16 k of the window and the bias (cp::NS)."""
    return _ceil(shape.FV * shape.FH * shape.PD + 1, 16)


def fragment_columns(shape):
    """Columns of the weights' B fragments (cp::NT8 x 8): the slices padded to 8, or past
    MAX_COLUMNS to whole blocks of BLOCK_COLUMNS."""
    return _ceil(shape.D, 8) * 8 if shape.D <= MAX_COLUMNS else _ceil(shape.D, BLOCK_COLUMNS) * BLOCK_COLUMNS


def fragment_bytes(shape):
    """Bytes of the weights split into B fragments (conv_patch_weights)."""
    return stages(shape) * 2 * fragment_columns(shape) // 8 * 32 * 16


def patch_variants(shape, smem_limit=SMEM_BYTES):
    """The variants that fit a layer shape and a device's shared memory."""
    bn = min(fragment_columns(shape), BLOCK_COLUMNS if shape.D > MAX_COLUMNS else MAX_COLUMNS)
    out = {}
    for target in BLOCK_POSITIONS:
        per_case = shape.H * shape.W
        cases, rows = ((max(1, target // per_case), shape.H) if per_case <= target
                       else (1, max(1, target // shape.W)))
        v = PatchVariant(rows, cases, WARP_ROWS, bn)
        if v.fits(shape, smem_limit):
            out.setdefault(v.suffix, v)
    return list(out.values())


class ConvPatch:
    """conv_patch.cu's kernels of one convolutional layer: candidate names for the tuner (in
    `variants`) and the activation's launch. passes: 3 (split TF32) or 1 (one TF32 product)."""

    def __init__(self, rt, shape, variants, passes):
        self.rt = rt
        self.shape = shape
        self.variants = dict(variants)
        self.passes = passes
        self._fragments = None
        self._built = False

    def function(self, tile):
        return f"conv_patch_{self.shape.tag}_p{self.passes}_{self.variants[tile].suffix}"

    @property
    def weights_function(self):
        return f"conv_patch_weights_{self.shape.tag}"

    def kernels(self):
        """(function name, instantiation line, KernelParams) of every variant."""
        out = [(self.weights_function, f"CONV_PATCH_WEIGHTS({self.weights_function})",
                CONV_PATCH_WEIGHTS)]
        for tile, v in self.variants.items():
            name = self.function(tile)
            out.append((name, f"CONV_PATCH({name}, {v.rows}, {v.cases}, {v.wm}, {v.bn}, "
                              f"{STAGES}, {self.passes})", CONV_PATCH))
        return out

    def build_request(self):
        """(kernel file, defines, kernels): what Runtime.specialize builds for this layer."""
        return SOURCE, self.shape.defines(), self.kernels()

    def allocate(self):
        """The device buffer of the split weights (the context active)."""
        self._fragments = self.rt.alloc(fragment_bytes(self.shape))

    def _build(self):
        if not self._built:
            self.rt.specialize(*self.build_request())
            for tile, v in self.variants.items():
                if v.smem(self.shape) > SMEM_BYTES:
                    self.rt.allow_shared(self.function(tile), v.smem(self.shape))
            self._built = True

    def forward(self, tile, *, src, lda, weights, M, out, ldo, epi):
        """out = epi(the layer's activation) for M cases, with variant `tile`: the weights split
        into fragments, then the products."""
        self._build()
        v = self.variants[tile]
        n = fragment_bytes(self.shape) // 16
        self.rt.launch(self.weights_function, (_ceil(n, 256), 1, 1), (256, 1, 1),
                       *CONV_PATCH_WEIGHTS.pack(weights=weights, frag=self._fragments))
        self.rt.launch(self.function(tile), v.grid(self.shape, M), (v.threads(self.shape), 1, 1),
                       *CONV_PATCH.pack(src=src, lda=lda, frag=self._fragments, M=M, out=out,
                                        ldo=ldo, epi=epi),
                       shared=v.smem(self.shape))
