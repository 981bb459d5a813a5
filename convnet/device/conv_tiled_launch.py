"""The launches of one convolutional layer's tiled kernels (kernels/conv_tiled.cu; conv_tiled.py
says which variants fit). The module of a layer shape is built the first time one of its kernels
is launched (a layer the tuner never times, because its launches are small, costs no
compilation); the runtime compiles and caches the modules."""

from .conv_tiled import SMEM_BYTES, SOURCE, GradWarpVariant
from .kernel_args import CONV_BWD, CONV_FWD, CONV_FWD_POOL, CONV_GRAD, CONV_GRAD_WARP


class ConvTiled:
    """The tiled kernels of one convolutional layer: candidate names for the tuner and launches.
    fwd and bwd map a candidate name to its variant (activation, delta backpropagation)."""

    def __init__(self, rt, variants):
        """variants: the layer's kernel_plan.TiledVariants (which fit this device)."""
        self.rt = rt
        self.shape = variants.shape
        # (wv, wh): the layer is followed by max pooling whose windows tile it, and each forward
        # variant is also built with that pooling in its epilogue (kernel "fwd_pool")
        self.pool = variants.pool
        self.fwd = dict(variants.fwd)
        self.bwd = dict(variants.bwd)
        self.grad = dict(variants.grad)
        self._built = False

    def variants(self, kernel):
        """The variants of one of the layer's kernels: "fwd", "fwd_pool", "bwd" or "grad"."""
        return {"fwd": self.fwd, "fwd_pool": self.fwd if self.pool else {}, "bwd": self.bwd,
                "grad": self.grad}[kernel]

    def function(self, tile, kernel="fwd"):
        v = self.variants(kernel)[tile]
        # the pooling window is compiled in too, so it is part of the name
        window = f"_w{self.pool[0]}x{self.pool[1]}" if kernel == "fwd_pool" else ""
        return f"conv_{kernel}_{self.shape.tag}{window}_{v.suffix}"

    def kernels(self):
        """(function name, instantiation line, KernelParams) of every variant."""
        out = [(self.function(t), f"CONV_FWD({self.function(t)}, {v.cases}, {v.tm}, {v.tn}, "
                f"{v.minb}, {v.tps}, {int(v.spread)})", CONV_FWD) for t, v in self.fwd.items()]
        out += [(self.function(t, "fwd_pool"), f"CONV_FWD_POOL({self.function(t, 'fwd_pool')}, "
                 f"{v.cases}, {v.tm}, {v.tn}, {v.minb}, {v.tps}, {int(v.spread)}, {self.pool[0]}, "
                 f"{self.pool[1]})", CONV_FWD_POOL) for t, v in self.variants("fwd_pool").items()]
        out += [(self.function(t, "bwd"), f"CONV_BWD({self.function(t, 'bwd')}, {v.cases}, "
                 f"{int(v.pad)}, {v.tps}, {v.minb(self.shape)}, {v.parts}, {int(v.ahead)})",
                 CONV_BWD)
                for t, v in self.bwd.items()]
        out += [self._grad_kernel(t, v) for t, v in self.grad.items()]
        return out

    def _grad_kernel(self, tile, v):
        name = self.function(tile, "grad")
        if isinstance(v, GradWarpVariant):
            return name, f"CONV_GRAD_WARP({name}, {v.rows}, {v.warps})", CONV_GRAD_WARP
        return name, f"CONV_GRAD({name}, {v.tn}, {int(v.taprow)}, {v.rows}, {v.stages})", CONV_GRAD

    def build_request(self):
        """(kernel file, defines, kernels): what Runtime.specialize builds for this layer."""
        return SOURCE, self.shape.defines(), self.kernels()

    def _build(self):
        if not self._built:
            self.rt.specialize(SOURCE, self.shape.defines(), self.kernels())
            for kernel in ("fwd", "fwd_pool", "bwd", "grad"):
                for tile, v in self.variants(kernel).items():
                    if v.smem(self.shape) > SMEM_BYTES:
                        self.rt.allow_shared(self.function(tile, kernel), v.smem(self.shape))
            self._built = True

    def forward(self, tile, *, src, lda, weights, M, out, ldo):
        """out = tanh(the layer's activation) for M cases, with forward variant `tile`."""
        self._build()
        v = self.fwd[tile]
        self.rt.launch(self.function(tile), (-(-M // v.cases), 1, 1), (v.threads(self.shape), 1, 1),
                       *CONV_FWD.pack(src=src, lda=lda, weights=weights, M=M, out=out, ldo=ldo),
                       shared=v.smem(self.shape))

    def forward_pool(self, tile, *, src, lda, weights, M, pout, ldp, pids):
        """The max-pooling layer after this one (pout, pids: its activation and winners, ldp a
        case) for M cases, with forward variant `tile` and the pooling in its epilogue."""
        self._build()
        v = self.fwd[tile]
        self.rt.launch(self.function(tile, "fwd_pool"), (-(-M // v.cases), 1, 1),
                       (v.threads(self.shape), 1, 1),
                       *CONV_FWD_POOL.pack(src=src, lda=lda, weights=weights, M=M, pout=pout, ldp=ldp,
                                           pids=pids),
                       shared=v.smem(self.shape))

    def delta(self, tile, *, delta, ldd, weights, M, out, ldo, prior, epi):
        """out = epi(the prior layer's delta) for M cases, with delta variant `tile`
        (weights: this layer's backward layout)."""
        self._build()
        v = self.bwd[tile]
        self.rt.launch(self.function(tile, "bwd"),
                       (v.blocks(M, self.rt.multiprocessors), 1, 1),
                       (v.threads(self.shape), 1, 1),
                       *CONV_BWD.pack(delta=delta, ldd=ldd, weights=weights, M=M, out=out, ldo=ldo,
                                      prior=prior, epi=epi),
                       shared=v.smem(self.shape))

    def gradient(self, tile, *, src, lda, delta, ldd, n_lo, n_hi, n_cases, chunk, subs, part):
        """The weight gradient's partial sums (subs per chunk of cases) of the slices
        [n_lo, n_hi) into part, with gradient variant `tile`."""
        self._build()
        v = self.grad[tile]
        grid = v.grid(self.shape, -(-n_cases // chunk) * subs)
        self.rt.launch(self.function(tile, "grad"), grid, (v.threads(self.shape), 1, 1),
                       *CONV_GRAD.pack(src=src, lda=lda, delta=delta, ldd=ldd, n_lo=n_lo, n_hi=n_hi,
                                       n_cases=n_cases, chunk=chunk, subs=subs, part=part),
                       shared=v.smem(self.shape))
