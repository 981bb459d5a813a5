"""The parameters of every CUDA kernel, by name, in one table.

Each kernel family (the functions of kernels/*.cu that share one parameter list) is described
once, in the order of its C parameter list. Launch code fills the parameters by name:

    rt.launch(name, grid, block, *POOL_FORWARD.pack(src=..., prior_height=..., ...))

``pack`` checks that every parameter is given exactly once and converts each value to the C
type (pointer, int, double), so a reordered or forgotten argument is an error here, not a wrong
result on the device. PyCUDA's ``prepare`` signature is derived from the same table.
"""

import numpy as np

PTR, INT, DOUBLE = "P", "i", "d"
_CONVERT = {PTR: lambda v: np.uintp(int(v)), INT: np.int32, DOUBLE: np.float64}


class KernelParams:
    """The parameter list of one kernel family: names and C types, in order."""

    def __init__(self, family, source, **params):
        self.family = family
        self.source = source                 # the .cu file that defines it (products: by tile)
        self.names = tuple(params)
        self.types = tuple(params.values())
        self._converters = tuple(_CONVERT[t] for t in self.types)

    @property
    def signature(self):
        """PyCUDA's prepare() string."""
        return "".join(self.types)

    def pack(self, **values):
        """The arguments in C order, converted to their C types."""
        if len(values) != len(self.names):
            missing = [n for n in self.names if n not in values]
            extra = [n for n in values if n not in self.names]
            raise TypeError(f"{self.family}: missing {missing}, unknown {extra}")
        try:
            return tuple(c(values[n]) for n, c in zip(self.names, self._converters))
        except KeyError as e:
            raise TypeError(f"{self.family}: missing parameter {e}") from None


# The shape of a pooling layer, shared by its forward and backward kernels.
_POOL_SHAPE = dict(prior_height=INT, prior_width=INT, prior_depth=INT, height=INT, width=INT,
                   width_v=INT, width_h=INT, stride_v=INT, stride_h=INT, is_max=INT)
# The shape of a convolutional layer computed directly (conv_small.cu).
_CONV_SHAPE = dict(src=PTR, lda=INT, prior_height=INT, prior_width=INT, prior_depth=INT,
                   height=INT, width=INT, filter_v=INT, filter_h=INT, pad_v=INT, pad_h=INT,
                   stride_v=INT, stride_h=INT, weights=PTR, ldw=INT, depth=INT)
_FLATTEN = dict(part=PTR, n_part=INT, rows=INT, pld=INT, n_cols=INT, n_lo=INT, depth=INT,
                local_cols=INT, ldw=INT, dev_to_host=PTR, acc=PTR)

GEMM_NN = KernelParams(
    "gemm_nn", "gemm.cu", src=PTR, lda=INT, tables=PTR, desc=PTR, B=PTR, b_ld=INT, M=INT, N=INT,
    out=PTR, ldo=INT, prior=PTR, epi=INT, n_groups=INT)
GEMM_TN = KernelParams(
    "gemm_tn", "gemm.cu", src=PTR, lda=INT, tables=PTR, desc=PTR, delta=PTR, ldd=INT, depth=INT,
    rows=INT, n_lo=INT, n_hi=INT, n_cases=INT, chunk=INT, groups=INT, gps=INT, slots=INT,
    local_cols=INT, part=PTR, nz=INT)
CONV_SMALL = KernelParams("conv_small", "conv_small.cu", **_CONV_SHAPE, out=PTR, total=INT)
# conv_tiled.cu: compiled per layer shape (conv_tiled.py), so not in FAMILIES
CONV_FWD = KernelParams("conv_fwd", "conv_tiled.cu", src=PTR, lda=INT, weights=PTR, M=INT, out=PTR,
                        ldo=INT)
CONV_FWD_POOL = KernelParams("conv_fwd_pool", "conv_tiled.cu", src=PTR, lda=INT, weights=PTR,
                             M=INT, pout=PTR, ldp=INT, pids=PTR)
CONV_BWD = KernelParams("conv_bwd", "conv_tiled.cu", delta=PTR, ldd=INT, weights=PTR, M=INT, out=PTR,
                        ldo=INT, prior=PTR, epi=INT)
_CONV_GRAD_ARGS = dict(src=PTR, lda=INT, delta=PTR, ldd=INT, n_lo=INT, n_hi=INT, n_cases=INT,
                       chunk=INT, subs=INT, part=PTR)
CONV_GRAD = KernelParams("conv_grad", "conv_tiled.cu", **_CONV_GRAD_ARGS)
# conv_grad's partial sums a warp a partial (narrow layers): the same arguments
CONV_GRAD_WARP = KernelParams("conv_grad_warp", "conv_tiled.cu", **_CONV_GRAD_ARGS)
# conv_patch.cu: a convolutional layer's activation, and the delta into the prior layer, on the
# tensor cores, compiled per layer shape (conv_patch.py): the weights split into fragments, then
# the products
CONV_PATCH_WEIGHTS = KernelParams("conv_patch_weights", "conv_patch.cu", weights=PTR, frag=PTR)
CONV_PATCH_DELTA_WEIGHTS = KernelParams("conv_patch_delta_weights", "conv_patch.cu", weights=PTR,
                                        frag=PTR)
_CONV_PATCH_ARGS = dict(src=PTR, lda=INT, frag=PTR, M=INT, out=PTR, ldo=INT, prior=PTR, epi=INT)
CONV_PATCH = KernelParams("conv_patch", "conv_patch.cu", **_CONV_PATCH_ARGS)
CONV_PATCH_DELTA = KernelParams("conv_patch_delta", "conv_patch.cu", **_CONV_PATCH_ARGS)
# the activation with the max pooling after it in its epilogue: the pooled layer's activation and
# winners (ldp a case)
CONV_PATCH_POOL = KernelParams("conv_patch_pool", "conv_patch.cu", src=PTR, lda=INT, frag=PTR,
                               M=INT, pout=PTR, ldp=INT, pids=PTR)
_CONV_SMALL_POOL_ARGS = dict(**_CONV_SHAPE, pool_height=INT, pool_width=INT, pool_width_v=INT,
                             pool_width_h=INT, out=PTR, ids=PTR, total=INT)
CONV_SMALL_POOL = KernelParams("conv_small_pool", "conv_small.cu", **_CONV_SMALL_POOL_ARGS)
# the same for one layer shape, compiled per first layer (launches.FirstLayerPool): same arguments
CONV_SMALL_POOL_FIXED = KernelParams("conv_small_pool_fixed", "conv_small.cu",
                                     **_CONV_SMALL_POOL_ARGS)
# and without the winners (ids not read), for forward-only evaluations
CONV_SMALL_POOL_VALUES = KernelParams("conv_small_pool_values", "conv_small.cu",
                                      **_CONV_SMALL_POOL_ARGS)
# average pooling after a conv_small first layer: compiled per width, and per first layer
CONV_SMALL_AVG = KernelParams("conv_small_avg", "conv_small.cu", **_CONV_SMALL_POOL_ARGS)
CONV_SMALL_AVG_FIXED = KernelParams("conv_small_avg_fixed", "conv_small.cu",
                                    **_CONV_SMALL_POOL_ARGS)
# the first layer's weight gradient from its average pooling's deltas (compiled per first layer)
CONV_GRAD_AVG = KernelParams("conv_grad_avg", "conv_small.cu", src=PTR, lda=INT, weights=PTR,
                             ldw=INT, delta=PTR, depth=INT, n_lo=INT, n_hi=INT, n_cases=INT,
                             chunk=INT, subs=INT, part=PTR)
# ... and from its own deltas (Wf is not read)
CONV_GRAD_FIRST = KernelParams("conv_grad_first", "conv_small.cu", src=PTR, lda=INT, weights=PTR,
                               ldw=INT, delta=PTR, depth=INT, n_lo=INT, n_hi=INT, n_cases=INT,
                               chunk=INT, subs=INT, part=PTR)
# the first layer's weight gradient from its max-pooling layer's deltas and winners
CONV_GRAD_POOLED = KernelParams(
    "conv_grad_pooled", "conv_small.cu", src=PTR, lda=INT, prior_height=INT, prior_width=INT,
    prior_depth=INT, height=INT, width=INT, filter_v=INT, filter_h=INT, pad_v=INT, pad_h=INT,
    stride_v=INT, stride_h=INT, row_stride=INT, delta=PTR, ids=PTR, pooled=PTR, pool_height=INT,
    pool_width=INT, depth=INT, n_lo=INT, n_hi=INT, n_cases=INT, chunk=INT, subs=INT, part=PTR)
POOL_FORWARD = KernelParams("pool_forward", "pool.cu", src=PTR, **_POOL_SHAPE, out=PTR, ids=PTR,
                            nb=INT)
POOL_BACKWARD = KernelParams("pool_backward", "pool.cu", delta=PTR, ids=PTR, **_POOL_SHAPE,
                             prior_act=PTR, out=PTR, nb=INT)
POOL_BACKWARD_TILES = KernelParams("pool_backward_tiles", "pool.cu", delta=PTR, ids=PTR, pooled=PTR,
                                   prior_width=INT, prior_depth=INT, height=INT, width=INT,
                                   width_v=INT, width_h=INT, out=PTR, nb=INT)
# the name suffix of the pooling kernels that take four slices a thread (pool.cu)
POOL_FOUR = "_x4"
SOFTMAX_LL = KernelParams("softmax_ll", "output.cu", logits=PTR, ncls=INT, nb=INT, classes=PTR,
                          probs=PTR, ll=PTR, delta=PTR)
LL_SUM = KernelParams("ll_sum", "output.cu", ll=PTR, n=INT, out=PTR)
WEIGHTS_SCATTER = KernelParams("weights_scatter", "weights.cu", w=PTR, n=INT, fwd_index=PTR,
                               bwd_index=PTR, fwd=PTR, bwd=PTR)
GRAD_FLATTEN = KernelParams("grad_flatten", "weights.cu", **_FLATTEN)
GRAD_FLATTEN_D = KernelParams("grad_flatten_d", "weights.cu", **_FLATTEN)
GRAD_SLOT_SUM = KernelParams("grad_slot_sum", "weights.cu", part=PTR, slots=INT, chunks=INT,
                             pstride=INT, tot=PTR)
GRAD_FINISH = KernelParams("grad_finish", "weights.cu", acc=PTR, w=PTR, mask=PTR, n=INT,
                           scale=DOUBLE, pen2=DOUBLE, grad=PTR)
# the line search's trial points formed on the device (line.py)
LINE_POINT = KernelParams("line_point", "weights.cu", x=PTR, d=PTR, t=PTR, n=INT, mask=PTR, w32=PTR,
                          pen_part=PTR)
# the refinement's vector operations on the device (line.py, DeviceVectors)
VEC_STEP = KernelParams("vec_step", "weights.cu", out=PTR, x=PTR, t=DOUBLE, d=PTR, n=INT)
VEC_DIRECTION = KernelParams("vec_direction", "weights.cu", d=PTR, beta=DOUBLE, g=PTR, n=INT)
VEC_NEG = KernelParams("vec_neg", "weights.cu", out=PTR, v=PTR, n=INT)
VEC_SUMS = KernelParams("vec_sums", "weights.cu", a=PTR, b=PTR, n=INT, mode=INT, part=PTR)
VEC_FINISH = KernelParams("vec_finish", "weights.cu", part=PTR, n_parts=INT, k=INT, out=PTR)
# mini-batch descent on the device (minibatch.cu, device/minibatch.py)
MINIBATCH_GATHER = KernelParams("minibatch_gather", "minibatch.cu", x=PTR, classes=PTR, order=PTR,
                                counters=PTR, batch=INT, n_inputs=INT, xb=PTR, cb=PTR)
MINIBATCH_GATHER_SHIFTED = KernelParams("minibatch_gather_shifted", "minibatch.cu", x=PTR,
                                        classes=PTR, order=PTR, shifts=PTR, counters=PTR,
                                        batch=INT, rows=INT, cols=INT, bands=INT, xb=PTR, cb=PTR)
MINIBATCH_UPDATE = KernelParams("minibatch_update", "minibatch.cu", w=PTR, grad=PTR, first=PTR,
                                second=PTR, rates=PTR, counters=PTR, n=INT, adam=INT,
                                momentum=DOUBLE, nesterov=INT, beta1=DOUBLE, beta2=DOUBLE,
                                epsilon=DOUBLE, w32=PTR)
MINIBATCH_ADVANCE = KernelParams("minibatch_advance", "minibatch.cu", counters=PTR, ll=PTR,
                                 epoch_ll=PTR)
# weights each block of line_point and vec_sums covers (LINE_BLOCK in weights.cu)
LINE_BLOCK = 4096
LINE_THREADS = 256

FAMILIES = (GEMM_NN, GEMM_TN, CONV_SMALL, CONV_SMALL_POOL, CONV_SMALL_AVG, CONV_GRAD_POOLED,
            POOL_FORWARD, POOL_BACKWARD, POOL_BACKWARD_TILES, SOFTMAX_LL, LL_SUM, WEIGHTS_SCATTER,
            GRAD_FLATTEN, GRAD_FLATTEN_D, GRAD_SLOT_SUM, GRAD_FINISH, LINE_POINT, VEC_STEP,
            VEC_DIRECTION, VEC_NEG, VEC_SUMS, VEC_FINISH, MINIBATCH_GATHER,
            MINIBATCH_GATHER_SHIFTED, MINIBATCH_UPDATE, MINIBATCH_ADVANCE)

# conv_small.cu is compiled for these padded slice counts (a function per width).
CONV_SMALL_WIDTHS = (4, 8, 12, 16, 20, 24, 28, 32)


def compiled_functions(nn_tiles, tn_tiles, tile_source):
    """(source file, function name, KernelParams) of every function the runtime loads;
    tile_source(tile) names the file of a product's tile shape."""
    out = [(tile_source(t), f"{p.family}_{t}", p)
           for p, tiles in ((GEMM_NN, nn_tiles), (GEMM_TN, tn_tiles)) for t in tiles]
    widths = (CONV_SMALL, CONV_SMALL_POOL, CONV_SMALL_AVG)      # a function per width
    for params in widths:
        out += [(params.source, f"{params.family}_{v}", params) for v in CONV_SMALL_WIDTHS]
    out += [(p.source, p.family + POOL_FOUR, p)
            for p in (POOL_FORWARD, POOL_BACKWARD, POOL_BACKWARD_TILES)]
    out += [(p.source, p.family, p) for p in FAMILIES
            if p not in (GEMM_NN, GEMM_TN) + widths]
    return out
