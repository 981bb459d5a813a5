"""A conv_small first layer's own kernels (conv_small.cu): the layer and the pooling layer whose
windows tile it in one forward launch; for average pooling, the first layer's weight gradient
straight from the pooled deltas; without one, its weight gradient a position a thread from its
own deltas. Max pooling's gradient from its winners is launches.conv_grad_pooled. Which of these
a net takes is first_layer_plan's choice (the kernel plan's first-layer part)."""

from dataclasses import dataclass

from .conv_tiled import SMEM_BYTES
from .kernel_args import (CONV_GRAD_AVG, CONV_GRAD_FIRST, CONV_SMALL_AVG_FIXED, CONV_SMALL_POOL,
                          CONV_SMALL_POOL_FIXED, CONV_SMALL_POOL_VALUES)
from .launches import (CONV_SMALL_THREADS, _blocks, _conv_shape, _covered, conv_grad_pooled,
                       conv_grad_pooled_shape, conv_small_stage_row, windows_tile_exactly)

# conv_grad_avg (conv_small.cu): threads of a slice group, and at most this many to a block
AVG_GRAD_LANES = 64
AVG_GRAD_THREADS = 512


def _weight_rows(layer):
    """A convolutional layer's weight rows: its window's taps on every prior slice, and the bias."""
    s = layer.spec
    return s.filter_v * s.filter_h * layer.prior_depth + 1


def _shape_constants(layer):
    """The constants a first-layer kernel is compiled for (window, strides, padding, the prior
    layer's size) and whether its windows reach into padding (bounds are then checked)."""
    s = layer.spec
    rin, cin = _covered(layer)
    padded = (s.pad_v > 0 or s.pad_h > 0 or rin > layer.prior_height or cin > layer.prior_width)
    return (s.filter_v, s.filter_h, layer.prior_depth, s.stride_v, s.stride_h, s.pad_v, s.pad_h,
            layer.prior_height, layer.prior_width), int(padded)


# conv_grad_first pays for a first layer of at most this many weight rows (a 3 x 3 window on one
# band: vgg-mnist's gradient 0.51 -> 0.22 ms on the H200); with more, each thread keeps a few
# slices and the window's inputs are read again for every few (inexact's 51 rows: 0.14 -> 0.79,
# cifar-conv's 76: 0.82 -> 2.39), so the products keep them
FIRST_GRAD_ROWS = 10


@dataclass(frozen=True)
class FirstLayerChoice:
    """The first layer's part of the kernel plan (see first_layer_plan)."""
    fused_pool: bool = False
    fused_pool_gradient: bool = False
    pooled_grad: bool = False
    direct_grad: bool = False


def first_layer_plan(arch, rows, width, options, pool_tiles):
    """The FirstLayerChoice of an architecture whose first layer is conv_small's of `width`
    padded slices (None: not conv_small) and `rows` weight rows: whether it is computed together
    with the pooling after it (stride = width, and the kernel's shared memory fits without
    opting in) in forward-only evaluations (fused_pool), in gradients too (fused_pool_gradient),
    and whether its weight gradient is then taken from the pooled deltas (pooled_grad:
    conv_grad_pooled for max pooling whose windows tile it, where it fits; conv_grad_avg for
    average pooling, which a fused gradient needs: its launch writes no activations of the first
    layer); else whether it is taken from the layer's own deltas by conv_grad_first
    (direct_grad: where the layer has at most FIRST_GRAD_ROWS weight rows, or wherever it fits
    with options.first_grad True; never with it False)."""
    layers = arch.layers
    fused, fused_grad, pooled = _pooling_choice(layers, rows, width, options, pool_tiles)
    direct = (width is not None and not pooled and options.first_grad is not False
              and FirstGradient.fits(layers[0]) and (options.first_grad or rows <= FIRST_GRAD_ROWS))
    return FirstLayerChoice(fused, fused_grad, pooled, direct)


def _pooling_choice(layers, rows, width, options, pool_tiles):
    """(fused_pool, fused_pool_gradient, pooled_grad) of first_layer_plan."""
    if not (options.fuse and width is not None and len(layers) > 1
            and not layers[1].kind.has_weights):
        return False, False, False
    spec = layers[1].spec
    smem = 4 * (rows * width + 2 * CONV_SMALL_THREADS * conv_small_stage_row(layers[0].depth))
    if not (spec.stride_v == spec.width_v and spec.stride_h == spec.width_h
            and smem <= SMEM_BYTES):
        return False, False, False
    if not layers[1].kind.keeps_winners:
        average = options.pooled_grad and FirstGradient.fits(layers[0], layers[1])
        return True, average, average
    shape = conv_grad_pooled_shape(layers[0], layers[1], layers[0].depth)
    fits = shape is not None and shape[2] <= SMEM_BYTES
    return True, 1 in pool_tiles, options.pooled_grad and 1 in pool_tiles and fits


class FirstGradient:
    """The weight gradient of a conv_small first layer a position a thread (conv_small.cu),
    built for the layer's shape: conv_grad_avg from its average pooling's deltas (pool_layer
    given; the layer's activations computed again), or conv_grad_first from the layer's own
    deltas. A thread group takes GS slices and each thread keeps weight rows x GS sums; the
    variants (`gGS`, the three largest GS whose sums fit MAX_SUMS) add in the same order, so
    they give the same bits, and the tuner times them at the gradient's launch site."""

    MAX_SUMS = 80                   # weight rows x slices one thread keeps
    SLICES = (8, 4, 2, 1)

    def __init__(self, rt, layer, pool_layer=None):
        self.rt = rt
        self.layer = layer
        self.pooled = pool_layer is not None
        self.rows = _weight_rows(layer)
        shape, self.padded = _shape_constants(layer)
        self.constants = shape + (layer.height, layer.width)
        if self.pooled:
            self.constants += (pool_layer.spec.width_v, pool_layer.spec.width_h)
        self.candidates = [f"g{gs}" for gs in self.SLICES if self.rows * gs <= self.MAX_SUMS][:3]
        self._built = False

    @classmethod
    def fits(cls, layer, pool_layer=None):
        """Whether the kernel can take this first layer (and its average pooling layer)."""
        if pool_layer is not None and (pool_layer.kind.keeps_winners
                                       or not windows_tile_exactly(pool_layer)):
            return False
        return _weight_rows(layer) <= cls.MAX_SUMS

    @property
    def family(self):
        return "conv_grad_avg" if self.pooled else "conv_grad_first"

    def function(self, variant):
        return f"{self.family}_" + "_".join(map(str, self.constants)) + f"_{variant}"

    def kernels(self):
        consts = ", ".join(map(str, self.constants))
        params = CONV_GRAD_AVG if self.pooled else CONV_GRAD_FIRST
        return [(self.function(v), f"{params.family.upper()}({self.function(v)}, {consts}, "
                 f"{v[1:]}, {self.padded})", params) for v in self.candidates]

    def build_request(self):
        """(kernel file, defines, kernels): what Runtime.specialize builds for the gradient (the
        backend asks for it with the net's other kernels; launch asks again, which finds it)."""
        return "conv_small.cu", {}, self.kernels()

    def shape(self, variant, n_cols):
        """(blocks along the slices, threads, shared-memory bytes) of a launch of n_cols slices."""
        gs = int(variant[1:])
        groups = -(-n_cols // gs)
        per_block = min(groups, AVG_GRAD_THREADS // AVG_GRAD_LANES)
        threads = per_block * AVG_GRAD_LANES
        weights = per_block if self.pooled else 0
        return -(-groups // per_block), threads, 4 * self.rows * gs * (weights + threads // 32)

    def launch(self, tuner, lp, *, src, lda, weights, delta, n_lo, n_hi, n_cases, chunk, subs,
               part):
        L = self.layer
        params = CONV_GRAD_AVG if self.pooled else CONV_GRAD_FIRST
        args = params.pack(src=src, lda=lda, weights=weights, ldw=lp.lay.cols, delta=delta,
                           depth=L.depth, n_lo=n_lo, n_hi=n_hi, n_cases=n_cases, chunk=chunk,
                           subs=subs, part=part)
        n_cols = n_hi - n_lo
        if not self._built:
            self.rt.specialize(*self.build_request())
            self._built = True

        def run(variant):
            blocks, threads, smem = self.shape(variant, n_cols)
            self.rt.launch(self.function(variant), (blocks, -(-n_cases // chunk) * subs, 1),
                           (threads, 1, 1), *args, shared=smem)

        work = float(n_cases) * L.height * L.width * n_cols * self.rows
        tuner.run(("gradient", 0, n_cols, n_cases), self.candidates, work, run)


class FirstLayerPool:
    """A conv_small first layer and the pooling whose windows tile it, in one kernel: the
    compiled-once conv_small_pool_WIDTH (max) or conv_small_avg_WIDTH (average), and, where the
    window's accumulators fit the registers, variants built for this layer's shape
    (conv_small_pool_fixed, conv_small_avg_fixed; conv_small.cu; same bits). The tuner times
    them at the launch site ("forward pooled", 0, cases). Forward-only evaluations need no
    winners: for max pooling they choose among the generic kernel (told not to write them) and
    conv_small_pool_values variants (one tanhf per slice instead of one per window position) at
    ("forward pooled values", 0, cases). gradient: where the plan takes the first layer's
    weight gradient from the pooled deltas, a FirstGradient for average pooling (None for
    max pooling, whose gradient is conv_grad_pooled)."""

    # variant: (blocks a multiprocessor the compiler is asked to fit: 128 or 168 registers,
    # whether the loop over filter rows stays rolled: a fifth of the code, see conv_small.cu)
    FIXED = {"fixed_b4": (4, 0), "fixed_b3": (3, 0), "rolled_b4": (4, 1)}
    VALUES = "_v"                   # the suffix of the fixed variants that write no winners
    MAX_ACCUMULATORS = 128          # window positions x padded slices a thread may sum at once

    def __init__(self, rt, layer, pool_layer, width, pooled_grad=False):
        self.rt = rt
        self.layer = layer
        self.pool_layer = pool_layer
        self.width = width
        self.average = not pool_layer.kind.keeps_winners
        ps = pool_layer.spec
        shape, padded = _shape_constants(layer)
        self.constants = shape + (ps.width_v, ps.width_h, width, padded)
        fits = ps.width_v * ps.width_h * width <= self.MAX_ACCUMULATORS
        self.fixed = dict(self.FIXED) if fits else {}
        # what the tuner may choose from, with the winners and without them
        self.candidates = ["generic"] + list(self.fixed)
        self.value_candidates = (self.candidates if self.average
                                 else ["generic"] + [v + self.VALUES for v in self.fixed])
        self.gradient = (FirstGradient(rt, layer, pool_layer)
                         if self.average and pooled_grad else None)
        self._built = False

    @property
    def family(self):
        return "conv_small_avg" if self.average else "conv_small_pool"

    def function(self, variant):
        if variant == "generic":
            return f"{self.family}_{self.width}"
        return f"{self.family}_" + "_".join(map(str, self.constants)) + f"_{variant}"

    def kernels(self):
        """(function name, instantiation line, KernelParams) of the fixed variants (for max
        pooling with the winners and without them)."""
        consts = ", ".join(map(str, self.constants))
        kinds = (((CONV_SMALL_AVG_FIXED, ""),) if self.average
                 else ((CONV_SMALL_POOL_FIXED, ""), (CONV_SMALL_POOL_VALUES, self.VALUES)))
        out = []
        for v, (minb, rolled) in self.fixed.items():
            for params, suffix in kinds:
                f = self.function(v + suffix)
                out.append((f, f"{params.family.upper()}({f}, {consts}, {minb}, {rolled})", params))
        return out

    def build_requests(self):
        """[(kernel file, defines, kernels)]: what Runtime.specialize builds for this layer: the
        fixed variants where they fit, and the gradient's kernels where it has its own."""
        own = [("conv_small.cu", {}, self.kernels())] if self.fixed else []
        return own + ([self.gradient.build_request()] if self.gradient else [])

    def _build(self):
        if not self._built and self.fixed:
            self.rt.specialize("conv_small.cu", {}, self.kernels())
        self._built = True

    def launch(self, tuner, lp, src, lda, nb, weights, out, ids):
        """The pooled values into out and, unless ids is NULL, the winners into ids."""
        self._build()
        L, P = self.layer, self.pool_layer
        total = nb * P.height * P.width
        nt = CONV_SMALL_THREADS
        args = CONV_SMALL_POOL.pack(**_conv_shape(L, src, lda, weights, lp.lay.cols),
                                    pool_height=P.height, pool_width=P.width,
                                    pool_width_v=P.spec.width_v, pool_width_h=P.spec.width_h,
                                    out=out, ids=ids, total=total)

        smem = 4 * (lp.rows * self.width + 2 * nt * conv_small_stage_row(L.depth))

        def run(variant):
            self.rt.launch(self.function(variant), _blocks(total, nt), (nt, 1, 1), *args,
                           shared=smem)

        work = float(total) * P.spec.width_v * P.spec.width_h * lp.rows * self.width
        if int(ids) or self.average:
            tuner.run(("forward pooled", 0, nb), self.candidates, work, run)
        else:
            tuner.run(("forward pooled values", 0, nb), self.value_candidates, work, run)

    def gradient_partials(self, tuner, lp, *, src, lda, weights, delta, ids, pooled, n_lo, n_hi,
                          n_cases, chunk, subs, part):
        """The first layer's weight-gradient partial sums from the pooling layer's deltas (and,
        for max pooling, its winners and pooled values): `subs` partials per chunk of cases."""
        if self.gradient is None:
            conv_grad_pooled(self.rt, lp, self.pool_layer, src=src, lda=lda, delta=delta, ids=ids,
                             pooled=pooled, n_lo=n_lo, n_hi=n_hi, n_cases=n_cases, chunk=chunk,
                             subs=subs, part=part)
            return
        self.gradient.launch(tuner, lp, src=src, lda=lda, weights=weights, delta=delta, n_lo=n_lo,
                             n_hi=n_hi, n_cases=n_cases, chunk=chunk, subs=subs, part=part)
