"""A conv_small first layer and the pooling layer whose windows tile it, in one kernel
(conv_small.cu): the forward launch that computes both, and, for average pooling, the first
layer's weight gradient straight from the pooled deltas. Max pooling's gradient from its winners
is launches.conv_grad_pooled; the kernel plan decides which of these a net takes."""

from .kernel_args import (CONV_GRAD_AVG, CONV_SMALL_AVG_FIXED, CONV_SMALL_POOL,
                          CONV_SMALL_POOL_FIXED, CONV_SMALL_POOL_VALUES)
from .launches import (CONV_SMALL_THREADS, _blocks, _conv_shape, _covered, conv_grad_pooled,
                       conv_small_stage_row)

# conv_grad_avg (conv_small.cu): threads of a slice group, and at most this many to a block
AVG_GRAD_LANES = 64
AVG_GRAD_THREADS = 512


def tiles_exactly(layer, pool_layer):
    """Whether pool_layer's windows tile `layer` exactly: strides equal to the widths and every
    neuron of the layer in one window."""
    s = pool_layer.spec
    return (s.stride_v == s.width_v and s.stride_h == s.width_h
            and pool_layer.height * s.width_v == layer.height
            and pool_layer.width * s.width_h == layer.width)


class AverageGradient:
    """conv_grad_avg: the weight gradient of a conv_small first layer from its average pooling's
    deltas, the layer's activations computed again (conv_small.cu), built for the layer's shape.
    A thread group takes GS slices and each thread keeps weight rows x GS sums; the variants
    (`gGS`, the three largest GS whose sums fit MAX_SUMS) add in the same order, so they give the
    same bits, and the tuner times them at the gradient's launch site."""

    MAX_SUMS = 80                   # weight rows x slices one thread keeps
    SLICES = (8, 4, 2, 1)

    def __init__(self, rt, layer, pool_layer):
        self.rt = rt
        self.layer = layer
        s, ps = layer.spec, pool_layer.spec
        self.rows = s.filter_v * s.filter_h * layer.prior_depth + 1
        rin, cin = _covered(layer)
        padded = (s.pad_v > 0 or s.pad_h > 0 or rin > layer.prior_height
                  or cin > layer.prior_width)
        self.constants = (s.filter_v, s.filter_h, layer.prior_depth, s.stride_v, s.stride_h,
                          s.pad_v, s.pad_h, layer.prior_height, layer.prior_width, layer.height,
                          layer.width, ps.width_v, ps.width_h)
        self.padded = int(padded)
        self.candidates = [f"g{gs}" for gs in self.SLICES if self.rows * gs <= self.MAX_SUMS][:3]

    @classmethod
    def fits(cls, layer, pool_layer):
        """Whether conv_grad_avg can take this first layer and its pooling layer."""
        s = layer.spec
        return (not pool_layer.kind.keeps_winners and tiles_exactly(layer, pool_layer)
                and s.filter_v * s.filter_h * layer.prior_depth + 1 <= cls.MAX_SUMS)

    def function(self, variant):
        return "conv_grad_avg_" + "_".join(map(str, self.constants)) + f"_{variant}"

    def kernels(self):
        consts = ", ".join(map(str, self.constants))
        return [(self.function(v), f"CONV_GRAD_AVG({self.function(v)}, {consts}, {v[1:]}, "
                 f"{self.padded})", CONV_GRAD_AVG) for v in self.candidates]

    def shape(self, variant, n_cols):
        """(blocks along the slices, threads, shared-memory bytes) of a launch of n_cols slices."""
        gs = int(variant[1:])
        groups = -(-n_cols // gs)
        per_block = min(groups, AVG_GRAD_THREADS // AVG_GRAD_LANES)
        threads = per_block * AVG_GRAD_LANES
        return -(-groups // per_block), threads, 4 * self.rows * gs * (per_block + threads // 32)

    def launch(self, tuner, lp, *, src, lda, weights, delta, n_lo, n_hi, n_cases, chunk, subs,
               part):
        L = self.layer
        args = CONV_GRAD_AVG.pack(src=src, lda=lda, weights=weights, ldw=lp.lay.cols,
                                  delta=delta, depth=L.depth, n_lo=n_lo, n_hi=n_hi,
                                  n_cases=n_cases, chunk=chunk, subs=subs, part=part)
        n_cols = n_hi - n_lo

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
    weight gradient from the pooled deltas, an AverageGradient for average pooling (None for
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
        s, ps = layer.spec, pool_layer.spec
        rin, cin = _covered(layer)
        padded = (s.pad_v > 0 or s.pad_h > 0 or rin > layer.prior_height
                  or cin > layer.prior_width)
        self.constants = (s.filter_v, s.filter_h, layer.prior_depth, s.stride_v, s.stride_h,
                          s.pad_v, s.pad_h, layer.prior_height, layer.prior_width, ps.width_v,
                          ps.width_h, width, int(padded))
        fits = ps.width_v * ps.width_h * width <= self.MAX_ACCUMULATORS
        self.fixed = dict(self.FIXED) if fits else {}
        # what the tuner may choose from, with the winners and without them
        self.candidates = ["generic"] + list(self.fixed)
        self.value_candidates = (self.candidates if self.average
                                 else ["generic"] + [v + self.VALUES for v in self.fixed])
        self.gradient = (AverageGradient(rt, layer, pool_layer)
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
        pooling with the winners and without them) and of the gradient's."""
        consts = ", ".join(map(str, self.constants))
        kinds = (((CONV_SMALL_AVG_FIXED, ""),) if self.average
                 else ((CONV_SMALL_POOL_FIXED, ""), (CONV_SMALL_POOL_VALUES, self.VALUES)))
        out = []
        for v, (minb, rolled) in self.fixed.items():
            for params, suffix in kinds:
                f = self.function(v + suffix)
                out.append((f, f"{params.family.upper()}({f}, {consts}, {minb}, {rolled})", params))
        return out + (self.gradient.kernels() if self.gradient else [])

    def build_requests(self):
        """[(kernel file, defines, kernels)]: what Runtime.specialize builds for this layer
        (nothing where no fixed variant fits and no gradient is built)."""
        kernels = self.kernels()
        return [("conv_small.cu", {}, kernels)] if kernels else []

    def _build(self):
        if not self._built and self.kernels():
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

        def run(variant):
            self.rt.launch(self.function(variant), _blocks(total, nt), (nt, 1, 1), *args,
                           shared=4 * (lp.rows * self.width + 2 * nt * conv_small_stage_row(L.depth)))

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
        self._build()
        self.gradient.launch(tuner, lp, src=src, lda=lda, weights=weights, delta=delta, n_lo=n_lo,
                             n_hi=n_hi, n_cases=n_cases, chunk=chunk, subs=subs, part=part)
