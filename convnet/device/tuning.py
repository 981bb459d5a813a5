"""Tile shapes of the gather products (kernels/gemm.cu) and the timer that picks one per launch site.

All shapes give the same bits; for every launch site the evaluator times its candidates once on
the real data and keeps the fastest.
"""

# "BMxBN_TMxTN": (BM, BN, threads). gemm_nn: BM cases x BN columns; gemm_tn: BM weight rows x
# BN columns. (gemm_nn's 128 x 64 with 8 x 8 a thread, 256 x 32 with 8 x 4 and the 320 x 20 tiles
# won nowhere in the suite's last three tables and were deleted: NOTES.md, "Variants that won
# nowhere".)
NN_TILES = {"128x64_8x4": (128, 64, 256), "256x32_8x8": (256, 32, 128),
            "128x32_4x4": (128, 32, 256), "128x32_8x4": (128, 32, 128),
            "64x16_4x2": (64, 16, 128), "128x16_8x2": (128, 16, 128),
            "128x64_8x4_k16": (128, 64, 256), "256x32_8x4_k16": (256, 32, 256),
            "128x32_8x4_k16": (128, 32, 128),
            # cp.async variants, _sN: N tiles in flight
            "128x64_8x4_k16_s3": (128, 64, 256), "128x32_8x4_k16_s3": (128, 32, 128),
            "64x16_4x2_s4": (64, 16, 128),
            # taller blocks: fewer, fuller rounds of blocks for large products
            "160x64_8x4_k20": (160, 64, 320),
            # dense rows only (plan.DenseRows), 16-byte copies, dynamic shared memory (NN_SHARED)
            "dense_160x128_10x8_k16_s3": (160, 128, 256), "dense_160x128_10x8_k16_s4": (160, 128, 256),
            "dense_128x128_8x8_k16_s3": (128, 128, 256),
            # dense rows only, at most 16 columns: a thread an output, WARPS x (32 // N) cases a
            # block (nn_rows; BM here is the fewest, at 16 columns)
            "narrow_w4": (8, 16, 128), "narrow_w8": (16, 16, 256)}


def _dense_shared(tile):
    """Bytes of the stages of a dense variant: STAGES x (BM rows of BK + 4 floats, BK rows of BN)."""
    BM, BN, _ = NN_TILES[tile]
    bk, stages = (int(part[1:]) for part in tile.split("_")[-2:])
    return 4 * stages * (BM * (bk + 4) + bk * BN)


NN_DENSE = [t for t in NN_TILES if t.startswith("dense_")]
NN_NARROW = [t for t in NN_TILES if t.startswith("narrow_")]
NARROW_MAX_COLS = 16
# dynamic shared memory of a gemm_nn variant (over 48 KB: the runtime opts in when it loads them)
NN_SHARED = {t: _dense_shared(t) for t in NN_DENSE}
# the dense variants are worth timing for products this wide (a block takes 128 columns)
DENSE_MIN_COLS = 64
TN_TILES = {"128x64_8x4": (128, 64, 256), "128x64_8x8": (128, 64, 128),
            "128x32_4x4": (128, 32, 256), "128x32_8x4": (128, 32, 128),
            "64x32_4x4": (64, 32, 128), "64x16_4x2": (64, 16, 128),
            "32x32_2x4": (32, 32, 128), "32x32_4x4": (32, 32, 64),
            "128x64_8x4_k16": (128, 64, 256), "32x32_4x4_k16": (32, 32, 64),
            "128x64_8x4_k16_s3": (128, 64, 256), "128x32_8x4_k16_s3": (128, 32, 128),
            "32x32_4x4_k16_s4": (32, 32, 64), "32x32_2x4_s4": (32, 32, 128),
            "64x16_4x2_s4": (64, 16, 128)}
# gemm_tn with every column of a launch in one block (gemm_async.cu, gemm_tn_cols_body):
# "cols_TMx4_cCB_sSTAGES": (TM rows per thread, CB cases per stage, STAGES); the block's shape
# is set by the launch's rows and columns (tn_cols_shape)
TN_COLS = {"cols_1x4_c32_s3": (1, 32, 3)}
TN_COLS_MAX = 64                # columns of one block (TN_COLS_MAX in gemm_async.cu)
TN_COLS_THREADS = 256           # at most, per block (the kernels' launch bound)
SHARED_BYTES = 48 * 1024        # dynamic shared memory a block may have without opting in


# gemm_tn on tensor cores, split TF32 (gemm_split.cu; tensor_cores.cuh, gemm_tn_split_body):
# "tcBMxBN_wWMxWN_sS":
# (BM, BN, threads), a warp per WM x WN outputs. Their bits are their own (the same for every
# one of them, not those of the float32 tiles), so a launch site takes its candidates from one
# family or the other (kernel_plan.KernelPlan.split_gradients), never from both.
# (128 x 64 with warps of 32 x 32, and the copy stages of 16 of 128 x 24 and 80 x 24, won nowhere
# in the suite's last three tables and were deleted: NOTES.md, "Variants that won nowhere")
TN_SPLIT = {"tc64x64_w32x32_s3": (64, 64, 128), "tc128x32_w32x32_s3": (128, 32, 128),
            "tc64x32_w32x16_s4": (64, 32, 128),
            "tc32x32_w16x16_s4": (32, 32, 128), "tc64x16_w16x16_s4": (64, 16, 128),
            "tc32x16_w16x8_s4": (32, 16, 128), "tc128x16_w32x16_s4": (128, 16, 128),
            "tc64x16_w32x16_s4": (64, 16, 64),
            # blocks as wide as 24 and 48 columns (warps of 32 x 24), for layers of 17-24 and
            # 33-48 slices, whose columns the blocks above would leave a quarter idle (128 x 48
            # and 64 x 24 lost at every site of the suite and were deleted: NOTES.md, "Runs of
            # four in the weight gradients' loader")
            "tc64x48_w32x24_s3": (64, 48, 128),
            # warps of 32 x 64 outputs: the split operands of a weight row serve twice the columns
            # (1.5-7 % ahead at the gradients of over 48 columns; warps of 64 x 32 lost)
            "tc128x64_w32x64_s3": (128, 64, 128),
            # copy stages of 32 cases, two stages of a copy (gemm_tn_split_body's SUBS 2)
            # (64 x 32 and 128 x 32, 128 x 16 lost or tied everywhere and were deleted)
            "tc64x64_w32x32_k32_s2": (64, 64, 128), "tc128x24_w32x24_k32_s2": (128, 24, 128),
            "tc64x16_w16x16_k32_s3": (64, 16, 128),
            # 80 rows for 65-80 weight rows of 17-24 columns (cifar-conv's first layer: 76 rows,
            # 0.94 -> 0.86 ms); 16-row tiles for a first layer's 10 rows and 112 rows for 109
            # were tried and lost (NOTES.md, "Rules measured again")
            "tc80x24_w16x24_k32_s2": (80, 24, 160)}


# gemm_nn on tensor cores, split TF32 (gemm_split.cu; tensor_cores.cuh, gemm_nn_split_body):
# "tcBMxBN_wWMxWN_sS":
# (BM cases, BN columns, threads); like TN_SPLIT, their bits are their own (kernel_plan's
# split_products say which launch sites take them). The plain gathers' 64-row tiles and the
# runs of four's copy stages of 16 at 128 x 64, 128 x 32 and 64 x 32 won nowhere in the suite's
# last three tables and were deleted (NOTES.md, "Variants that won nowhere"); one plain gather
# a width stays for tables without runs (strided-rgb's three bands: 128 x 32 first).
NN_SPLIT = {"tc128x64_w32x32_s3": (128, 64, 256), "tc128x32_w32x32_s3": (128, 32, 128),
            "tc128x16_w32x16_s4": (128, 16, 128), "tc64x16_w16x16_s4": (64, 16, 128),
            # dense rows only (as NN_DENSE): 16-byte copies of the cases' rows and of B's
            "tcd128x64_w32x32_s3": (128, 64, 256), "tcd64x64_w32x32_s3": (64, 64, 128),
            # any table: 16-byte copies of the runs of four it gives, and of B's rows
            # (tensor_runs.cuh, gemm_nn_quad_split_body)
            "tcq64x64_w32x32_s3": (64, 64, 128), "tcq128x16_w32x16_s4": (128, 16, 128),
            "tcq64x16_w16x16_s4": (64, 16, 128),
            # 24 columns (as TN_SPLIT's; the 48-column ones and 64 x 24 lost everywhere)
            "tcq128x24_w32x24_s3": (128, 24, 128),
            # copy stages of 32 k, two stages of a copy (GEMM_NN_RUNS with SUBS 2; 128 x 16
            # and the dense rows' 64 x 64 lost or tied everywhere and were deleted)
            "tcq128x24_w32x24_k32_s2": (128, 24, 128), "tcq128x32_w32x32_k32_s2": (128, 32, 128),
            "tcq64x64_w32x32_k32_s2": (64, 64, 128), "tcq64x32_w32x16_k32_s3": (64, 32, 128),
            # the runs-of-four tiles that won somewhere, copying runs of two 8 bytes at a time
            # where runs of four fail (tensor_runs.cuh; for gathered depths of 2 mod 4: PAIRS)
            "tcp64x64_w32x32_s3": (64, 64, 128), "tcp128x16_w32x16_s4": (128, 16, 128),
            "tcp64x64_w32x32_k32_s2": (64, 64, 128), "tcp128x32_w32x32_k32_s2": (128, 32, 128),
            "tcp128x24_w32x24_k32_s2": (128, 24, 128), "tcp64x32_w32x16_k32_s3": (64, 32, 128)}
NN_SPLIT_DENSE = [t for t in NN_SPLIT if t.startswith("tcd")]
PAIRS = {t.replace("tcp", "tcq", 1): t for t in NN_SPLIT if t.startswith("tcp")}


# The same tiles with one TF32 product of the rounded operands (CUDA PRECISION = TF32): "tf" for
# "tc" (gemm_tf32.cu: the same bodies with PASSES 1); again a family of their own bits.
def tf32_tiles(tiles):
    """The one-product TF32 variants of split TF32 variants, in the same order."""
    return [tile.replace("tc", "tf", 1) for tile in tiles]


TN_TF32 = dict(zip(tf32_tiles(TN_SPLIT), TN_SPLIT.values()))
NN_TF32 = dict(zip(tf32_tiles(NN_SPLIT), NN_SPLIT.values()))
NN_TF32_DENSE = tf32_tiles(NN_SPLIT_DENSE)
# every tensor-core variant, by the shape of its tile
TN_TENSOR = {**TN_SPLIT, **TN_TF32}
NN_TENSOR = {**NN_SPLIT, **NN_TF32}


def nn_split_candidates(M, N, dense=False, pairs=False):
    """gemm_nn's split TF32 variants worth trying for a launch of M cases and N columns, best
    guess first (any of them gives the same bits); dense: the launch may take the variants for
    dense rows (launches.dense_allowed); pairs: its table gives runs of two, not of four (each
    runs-of-four tile with a PAIRS twin gives way to it)."""
    tiles = _nn_split_tiles(N, dense)
    return [PAIRS.get(t, t) for t in tiles] if pairs else tiles


def patch_candidates(gather, patch):
    """A split activation's candidates: the gather tiles, then a convolutional layer's
    conv_patch.cu variants (the names of `patch`), which form its windows from shared memory."""
    return list(gather) + list(patch)


def _nn_split_tiles(N, dense):
    if N > 32:
        gather = ["tc128x64_w32x32_s3", "tcq64x64_w32x32_s3", "tcq64x64_w32x32_k32_s2"]
        return NN_SPLIT_DENSE + gather if dense else gather
    if N > 16:
        tiles = ["tc128x32_w32x32_s3", "tcq128x32_w32x32_k32_s2", "tcq64x32_w32x16_k32_s3"]
        return tiles + (["tcq128x24_w32x24_s3", "tcq128x24_w32x24_k32_s2"] if N <= 24 else [])
    return ["tc128x16_w32x16_s4", "tc64x16_w16x16_s4", "tcq128x16_w32x16_s4",
            "tcq64x16_w16x16_s4"]


def nn_shape(tile):
    """(BM, BN, threads) of a gemm_nn variant, float32 or split TF32."""
    return NN_TENSOR[tile] if tile in NN_TENSOR else NN_TILES[tile]


def tn_tiles():
    """Every float32 gemm_tn variant the runtime builds: the tile shapes, then the whole-column
    blocks (the split TF32 ones are TN_SPLIT)."""
    return [*TN_TILES, *TN_COLS]


def tn_split_candidates(R, N):
    """gemm_tn's split TF32 variants worth trying for a launch of R weight rows and N columns,
    best guess first (any of them gives the same bits)."""
    if N > 32:
        tiles = ["tc64x64_w32x32_s3", "tc128x64_w32x64_s3", "tc64x64_w32x32_k32_s2"]
        if N <= 48:
            tiles.append("tc64x48_w32x24_s3")
    elif N > 16:
        tiles = ["tc128x32_w32x32_s3", "tc64x32_w32x16_s4", "tc32x32_w16x16_s4"]
        if N <= 24:
            tiles.append("tc128x24_w32x24_k32_s2")
    else:
        tiles = ["tc64x16_w16x16_s4", "tc32x16_w16x8_s4", "tc64x16_w32x16_s4",
                 "tc64x16_w16x16_k32_s3"]
        if R > 64:
            tiles.append("tc128x16_w32x16_s4")
    tiles += _short_tiles(R, N)
    if R <= 32:
        tiles = sorted(tiles, key=lambda t: TN_SPLIT[t][0])
    return tiles


def _short_tiles(R, N):
    """The split TF32 gemm_tn tiles whose rows fit R closely where the usual ones (32, 64, 128
    rows) would leave many of theirs idle: 80 rows for 65-80 rows of 17-24 columns."""
    return ["tc80x24_w16x24_k32_s2"] if 64 < R <= 80 and 16 < N <= 24 else []


def tn_cols_shape(tile, R, N):
    """(threads, row blocks, column blocks, shared bytes) of a whole-column gemm_tn launch of R
    weight rows and N columns, or None where the variant does not fit: RG groups of TM rows and
    NC groups of 4 columns, as many row groups as 256 threads allow, shared out evenly over the
    fewest row blocks; the loaders need a block of at least BR threads and 4 row groups, and a
    block of less than a warp is not worth a launch."""
    tm, cb, stages = TN_COLS[tile]
    width = min(-(-N // 4) * 4, TN_COLS_MAX)
    nc = width // 4
    row_groups = -(-R // tm)
    most = TN_COLS_THREADS // nc
    if most < 4:
        return None
    row_blocks = -(-row_groups // most)
    rg = -(-row_groups // row_blocks)
    threads, br = rg * nc, rg * tm
    smem = 4 * stages * cb * (-(-br // 4) * 4 + width)
    if rg < 4 or br > threads or threads < 32 or smem > SHARED_BYTES:
        return None
    return threads, row_blocks, -(-N // width), smem


def tn_launch_shape(tile, R, N):
    """(threads, column blocks, row blocks, dynamic shared bytes) of a gemm_tn launch of R weight
    rows and N columns with variant `tile` (a tile shape or a whole-column variant that fits)."""
    if tile in TN_COLS:
        threads, row_blocks, col_blocks, shared = tn_cols_shape(tile, R, N)
        return threads, col_blocks, row_blocks, shared
    BM, BN, threads = TN_TENSOR[tile] if tile in TN_TENSOR else TN_TILES[tile]
    return threads, -(-N // BN), -(-R // BM), 0


# the kernel files of the tensor-core variants, by their names' first letters
TENSOR_FILES = {"tc": "gemm_split.cu", "tf": "gemm_tf32.cu"}


def tile_source(tile):
    """The kernel file of a tile shape: the tensor cores' split TF32 variants (tc...) are in
    gemm_split.cu and their one-product twins (tf...) in gemm_tf32.cu; the other cp.async
    variants (named ..._sN) in gemm_async.cu."""
    if tile[:2] in TENSOR_FILES:
        return TENSOR_FILES[tile[:2]]
    return "gemm_async.cu" if tile.rsplit("_", 1)[-1].startswith("s") else "gemm.cu"


# Launches with less work than this (multiply-adds) are not worth timing: first candidate.
TUNE_MIN_WORK = 2e8


def grad_candidates(variants):
    """conv_grad's variants for a convolutional layer's weight gradient (conv_tiled.py), in the
    order given; all of them add in one order, so any of them gives the same bits."""
    return list(variants)


# The candidate of a conv_small layer's activation that is its direct kernel (conv_small.cu)
DIRECT = "conv_small"


def nn_candidates(M, N, conv=(), dense=False, direct=False):
    """Tile shapes worth trying for a gemm_nn launch of M cases and N columns, best guess first;
    conv: a convolutional layer's tiled variants (conv_tiled.py), timed after the gather tiles
    (the first of which serves launches too small to time); dense: whether the launch may take
    the variants for dense rows (its tables and alignment allow them, launches.dense_allowed):
    the dense tiles for wide products, the narrow ones for a few columns; direct: a conv_small
    layer's activation, whose direct kernel (DIRECT) comes first."""
    if N > 32:
        tiles = ["128x64_8x4", "128x64_8x4_k16", "128x64_8x4_k16_s3", "160x64_8x4_k20"]
    elif N > 16:
        big = ["256x32_8x8", "256x32_8x4_k16"]
        small = ["128x32_4x4", "128x32_8x4", "128x32_8x4_k16", "128x32_8x4_k16_s3"]
        tiles = big + small if M >= 4096 else small + big
    else:
        tiles = ["64x16_4x2", "128x16_8x2", "64x16_4x2_s4"]
    if dense and N > DENSE_MIN_COLS:
        tiles = tiles + NN_DENSE
    if dense and N <= NARROW_MAX_COLS:
        # first: the output layer's launches have too little work to be timed (TUNE_MIN_WORK),
        # and a thread an output was the fastest for every such launch measured (NOTES.md)
        tiles = NN_NARROW + tiles
    return ([DIRECT] if direct else []) + tiles + list(conv)


def nn_rows(tile, N):
    """Cases a block of gemm_nn variant `tile` takes in a launch of N columns."""
    BM, _, threads = nn_shape(tile)
    if tile in NN_NARROW:
        return threads // 32 * (32 // N)
    return BM


def tn_candidates(R, N):
    """Tile shapes worth trying for a gemm_tn launch of R weight rows and N columns, best guess
    first, then the whole-column variants that fit in few row blocks."""
    if R <= 32:
        tiles = ["32x32_2x4", "32x32_4x4", "32x32_4x4_k16", "32x32_4x4_k16_s4", "32x32_2x4_s4"]
    elif N > 32:
        tiles = ["128x64_8x4", "128x64_8x8", "128x64_8x4_k16", "128x64_8x4_k16_s3"]
    elif N > 16:
        tiles = ["128x32_4x4", "128x32_8x4", "64x32_4x4", "128x32_8x4_k16_s3"]
    else:
        tiles = ["64x16_4x2", "64x16_4x2_s4"]
    return tiles + [t for t in TN_COLS if _few_row_blocks(tn_cols_shape(t, R, N))]


def _few_row_blocks(shape):
    """A whole-column launch worth timing: it fits, in at most two blocks of rows (with more, each
    block loads the deltas of every column for a few rows; LeNet's second layer, 27 blocks of 19
    rows, took 3x the tile shapes' time)."""
    return shape is not None and shape[1] <= 2


class Tuner:
    """Picks the tile shape of every gemm launch site: the first time a site runs with enough
    work, each candidate is launched ROUNDS times, timed with events, and the fastest is kept.
    The launches are idempotent (they overwrite their outputs), so the timed runs also do the work."""

    ROUNDS = 3

    def __init__(self, rt, enabled):
        self.rt = rt
        self.enabled = enabled
        self.choice = {}
        self.times = {}             # site -> {tile: ms} measured when choosing
        self.sites = {}             # site -> (candidates, launch), for measure()

    def run(self, site, candidates, work, launch):
        tile = self.choice.get(site)
        self.sites[site] = (candidates, launch)
        if tile is None:
            if not self.enabled or len(candidates) == 1 or work < TUNE_MIN_WORK:
                tile = candidates[0]
            else:
                self.times[site] = self._time(candidates, launch)
                tile = min(candidates, key=lambda t: self.times[site][t])
            self.choice[site] = tile
        launch(tile)
        return tile

    def _time(self, candidates, launch):
        """Best of ROUNDS launches of each candidate, the candidates taken in turn (so a clock
        still rising after idle time favours none of them)."""
        cuda, stream = self.rt.cuda, self.rt.stream
        best = {}
        for _ in range(self.ROUNDS):
            for tile in candidates:
                e0, e1 = cuda.Event(), cuda.Event()
                e0.record(stream)
                launch(tile)
                e1.record(stream)
                e1.synchronize()
                ms = e1.time_since(e0)
                best[tile] = min(ms, best.get(tile, ms))
        return best

    def follower(self):
        """A FollowingTuner of this tuner (for a subset of its evaluator's cases)."""
        return FollowingTuner(self)

    def measure(self):
        """Times every candidate of every site seen (benchmarks; call between evaluations, as
        it reruns launches whose inputs may since have been overwritten)."""
        return {site: self._time(c, launch) for site, (c, launch) in self.sites.items()}


class FollowingTuner(Tuner):
    """The tuner of an evaluator over some of another's cases (DeviceEvaluator.subset): it times
    nothing. A launch site takes the choice the other's tuner made at the same site for its own
    number of cases (a site's last part), where that is a candidate here, else the first
    candidate; every candidate gives the same bits, so only the time can differ."""

    def __init__(self, leader):
        super().__init__(leader.rt, False)
        self.leader = leader

    def run(self, site, candidates, work, launch):
        if site not in self.choice:
            led = {key[:-1]: tile for key, tile in self.leader.choice.items()}
            tile = led.get(site[:-1])
            self.choice[site] = tile if tile in candidates else candidates[0]
        return super().run(site, candidates, work, launch)
