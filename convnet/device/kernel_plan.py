"""Kernel choice as one plan: which kernel family computes each step of each layer, the variants
the tuner may choose among, how the weight gradient is cut into launches, and every device byte.

    choice = plan_kernels(arch, options, shared_optin, precision)   # per layer: families, variants
    batch = choice.batch_plan(n_cases, batch_limit, params) # batches, launch splits, bytes
    device_bytes(arch, n_cases, batch_limit, params)        # the same count, without a device

Everything here is a pure function of the architecture, the options (DeviceOptions), the device's
shared-memory limit, the number of cases and the device parameters; nothing needs a GPU. The
backend (backend.py) builds the kernels the plan names, the evaluator (evaluator.py) asks the
plan which family runs where, and the workspace, CUDA.LOG and memory.py take their byte counts
from :class:`BatchPlan`.
"""

from dataclasses import dataclass, field, replace
from typing import Dict, FrozenSet, Optional, Tuple

from .conv_patch import Geometry, has_delta_variants, patch_variants, pools_in_epilogue
from .conv_tiled import (SMEM_BYTES, ConvShape, delta_variants, forward_variants, grad_subs,
                         grad_variants)
from .first_layer import first_layer_plan
from .launches import (CONV_SMALL_FLOATS, CONV_SMALL_SLICES, POOLED_GRAD_SUBS, line_parts,
                       windows_tile)
from .layout import layer_layouts
from ..params import FLOAT32, TF32
from .options import DeviceOptions
from .plan import CHUNK, GradPlan, gradient_launch_slices, split_batches
from .tensor_rules import (first_on_tensor_cores, float32_grad_pays, split_tf32_delta_pays,
                           split_tf32_forward_pays, tf32_delta_pays, tf32_forward_pays)

# Kernel families of the forward step (activation)
GEMM_NN = "gemm_nn"                     # the gather product, or a conv_tiled forward variant
CONV_SMALL = "conv_small"               # a small CONV layer: its direct kernel, or the gather
                                        # and tiled products where the tuner finds them faster
CONV_SMALL_POOL = "conv_small_pool"     # a conv_small first layer and the pooling after it
POOL_FORWARD = "pool_forward"
WITH_PRIOR = "with the layer before"    # computed in the launch of the layer before
# ... of the delta step (backpropagation into the prior layer)
POOL_BACKWARD = "pool_backward"
POOL_BACKWARD_TILES = "pool_backward_tiles"
# ... of the weight gradient
GEMM_TN = "gemm_tn"
GEMM_TN_SPLIT = "gemm_tn_split"         # gemm_tn's partial sums on the tensor cores, split TF32
CONV_GRAD = "conv_grad"
CONV_GRAD_POOLED = "conv_grad_pooled"   # the first layer's, from the pooling layer's deltas
CONV_GRAD_FIRST = "conv_grad_first"     # the first layer's, a position a thread (first_layer.py)

FAMILIES = (GEMM_NN, CONV_SMALL, CONV_SMALL_POOL, POOL_FORWARD, POOL_BACKWARD,
            POOL_BACKWARD_TILES, GEMM_TN, GEMM_TN_SPLIT, CONV_GRAD, CONV_GRAD_POOLED,
            CONV_GRAD_FIRST)

# The kernel files (kernels/*.cu) a family's functions are in; conv_tiled.cu's variants (the
# CONV_GRAD family and the tiled candidates) are built per layer shape, so they have none here.
# The tensor cores' variants are in a file of their own (KernelPlan.tensor_file), built only for
# a plan that puts some step on them.
_PRODUCTS = ("gemm.cu", "gemm_async.cu")
FAMILY_FILES = {GEMM_NN: _PRODUCTS, GEMM_TN: _PRODUCTS, GEMM_TN_SPLIT: (),
                CONV_SMALL: ("conv_small.cu",) + _PRODUCTS, CONV_SMALL_POOL: ("conv_small.cu",),
                CONV_GRAD_POOLED: ("conv_small.cu",), CONV_GRAD_FIRST: ("conv_small.cu",),
                POOL_FORWARD: ("pool.cu",), POOL_BACKWARD: ("pool.cu",),
                POOL_BACKWARD_TILES: ("pool.cu",)}
# the softmax, the weights' copies and the gradient's sums serve every net
EVERY_NET_FILES = ("output.cu", "weights.cu")


@dataclass(frozen=True)
class TiledVariants:
    """conv_tiled.cu's variants of one convolutional layer, by candidate name: forward
    (activation; also with the pooling window `pool` in its epilogue when given), delta
    backpropagation and weight gradient; and conv_patch.cu's on the tensor cores, of its
    activation (patch; with `pool`, their bands hold whole windows and each has a twin with
    the pooling in its epilogue) and of the delta into the prior layer (patch_delta)."""
    shape: ConvShape
    pool: Optional[Tuple[int, int]]
    fwd: Dict[str, object]
    bwd: Dict[str, object]
    grad: Dict[str, object]
    patch: Dict[str, object] = field(default_factory=dict)
    patch_delta: Dict[str, object] = field(default_factory=dict)

    @property
    def any(self):
        return bool(self.fwd or self.bwd or self.grad or self.patch or self.patch_delta)

    @property
    def float32(self):
        """Whether conv_tiled.cu has variants of this layer (conv_tiled_launch.ConvTiled)."""
        return bool(self.fwd or self.bwd or self.grad)


@dataclass(frozen=True)
class LayerSteps:
    """The kernel families of one layer (None: no such step) and the tiled variants that are
    candidates beside the gather products."""
    index: int
    label: str
    forward: str
    delta: Optional[str]
    gradient: Optional[str]
    forward_variants: Tuple[str, ...] = ()
    delta_variants: Tuple[str, ...] = ()
    gradient_variants: Tuple[str, ...] = ()


@dataclass(frozen=True)
class GradientSplit:
    """How one layer's weight gradient is cut for a batch: slices (FC: neurons) per launch,
    launches per batch, scratch floats of a launch, positions summed into one partial (per
    slot) and partial-sum slots per chunk of cases."""
    slices_per_launch: int
    launches: int
    scratch_floats: int
    positions_per_slot: int
    slots: int


def padded_slices(depth):
    """conv_small's slice count, padded to a multiple of 4."""
    return -(-depth // 4) * 4


def _conv_small_widths(arch, layouts):
    widths = {}
    for layer in arch.layers:
        if layer.kind.shares_weights and layer.depth <= CONV_SMALL_SLICES:
            width = padded_slices(layer.depth)
            if layouts[layer.index].rows * width <= CONV_SMALL_FLOATS:
                widths[layer.index] = width
    return widths


def tiled_variants(layer, ldw, shared_optin, pool=None, forward=True):
    """The TiledVariants of a convolutional layer whose weight rows are ldw floats long, on a
    device whose kernels may opt in to shared_optin bytes of shared memory; forward=False: no
    forward variants (the layer's activation is another kernel's)."""
    shape = ConvShape.of(layer, ldw)
    return TiledVariants(
        shape, pool,
        {f"tiled_{v.suffix}": v for v in forward_variants(shape, shared_optin)} if forward else {},
        {f"tiled_{v.suffix}": v for v in delta_variants(shape, layer.index > 0, shared_optin)},
        {f"tiled_{v.suffix}": v for v in grad_variants(shape, shared_optin)},
        _patch_names(Geometry.forward(shape), shared_optin, _patch_pool(shape, pool))
        if forward else {},
        _patch_names(Geometry.delta(shape), shared_optin)
        if has_delta_variants(shape, layer.index > 0) else {})


def _patch_pool(shape, pool):
    """The pooling window the patch variants of a layer take in their epilogue, or None."""
    return pool if pools_in_epilogue(Geometry.forward(shape), pool) else None


def _patch_names(geometry, shared_optin, pool=None):
    return {f"patch_{v.suffix}": v for v in patch_variants(geometry, shared_optin, pool)}


def _tiled_layers(arch, layouts, options, shared_optin, conv_small, pool_tiles):
    """conv_tiled.cu's variants of every convolutional layer that has some, and the pooling
    layers computed in the epilogue of the forward variants of the layer before them. A conv_small
    first layer's activation has none: its products are too small for them (10 weight rows on
    one band) and its direct kernel reads its inputs in order; a later conv_small layer's are
    candidates beside the direct kernel (vgg-mnist's 14 x 14 x 24 layers)."""
    tiled, conv_pool = {}, set()
    if not options.tiled:
        return tiled, conv_pool
    for layer in arch.layers:
        if not layer.kind.shares_weights:
            continue
        following = layer.index + 1
        pool = None
        if options.pool_epilogue and following in pool_tiles:
            spec = arch.layers[following].spec
            pool = (spec.width_v, spec.width_h)
        variants = tiled_variants(layer, layouts[layer.index].cols, shared_optin, pool,
                                  forward=not (layer.index == 0 and 0 in conv_small))
        if variants.any:
            tiled[layer.index] = variants
        if variants.fwd and pool:
            conv_pool.add(following)
    return tiled, conv_pool


@dataclass(frozen=True)
class KernelPlan:
    """Every layer's kernel families (see :func:`plan_kernels`). The attributes name the
    choices: conv_small (layer index -> padded slices), pool_tiles (pooling layers
    backpropagated by pool_backward_tiles), tiled (layer index -> TiledVariants), conv_pool
    (pooling layers computed in a tiled forward epilogue), fused_pool (a conv_small first layer
    pools as it goes in forward-only evaluations), fused_pool_gradient (... in gradients too),
    pooled_grad (the first layer's gradient from the pooled deltas), the steps on the tensor
    cores (split TF32): split_gradients (layers whose weight gradients), split_forward (whose
    activations' gather products) and split_delta (whose delta backpropagation products); tf32:
    those steps take one TF32 product instead of split TF32 (CUDA PRECISION = TF32); and
    first_grad (the first layer's gradient from its own deltas a position a thread,
    conv_grad_first). first_layer.first_layer_plan makes the first layer's choices."""
    arch: object = field(repr=False)
    layouts: Dict[int, object] = field(repr=False)
    conv_small: Dict[int, int]
    pool_tiles: FrozenSet[int]
    tiled: Dict[int, TiledVariants]
    conv_pool: FrozenSet[int]
    fused_pool: bool
    fused_pool_gradient: bool
    pooled_grad: bool
    labels: Tuple[str, ...]
    split_gradients: FrozenSet[int] = frozenset()
    split_forward: FrozenSet[int] = frozenset()
    split_delta: FrozenSet[int] = frozenset()
    tf32: bool = False
    first_grad: bool = False

    # ------------------------------------------------------------ the questions of an evaluation
    def forward_family(self, index, fused=True, want_delta=False):
        """The family of layer `index`'s activation; fused=False: every layer on its own."""
        layer = self.arch.all_layers[index]
        first = fused and self.fused_pool and (self.fused_pool_gradient or not want_delta)
        if (first and index == 1) or (fused and index in self.conv_pool):
            return WITH_PRIOR
        if first and index == 0:
            return CONV_SMALL_POOL
        if not layer.kind.has_weights:
            return POOL_FORWARD
        if index in self.conv_small and index not in self.split_forward:
            return CONV_SMALL
        return GEMM_NN

    def pools_in_epilogue(self, index, fused=True):
        """Whether layer `index`'s forward launch also computes the pooling layer after it."""
        return fused and index + 1 in self.conv_pool

    def delta_family(self, index):
        """The family that backpropagates layer `index`'s delta into the layer before it; None
        for the first layer; CONV_GRAD_POOLED where the first layer's gradient is taken from
        this layer's deltas instead (nothing is backpropagated)."""
        if index == 0:
            return None
        if index == 1 and self.pooled_grad:
            return CONV_GRAD_POOLED
        if index in self.pool_tiles:
            return POOL_BACKWARD_TILES
        if not self.arch.all_layers[index].kind.has_weights:
            return POOL_BACKWARD
        return GEMM_NN

    def gradient_family(self, index):
        """The family of layer `index`'s weight-gradient partial sums (None: no weights)."""
        if not self.arch.all_layers[index].kind.has_weights:
            return None
        if index == 0 and self.pooled_grad:
            return CONV_GRAD_POOLED
        if index == 0 and self.first_grad:
            return CONV_GRAD_FIRST
        if index in self.split_gradients:
            return GEMM_TN_SPLIT
        tiled = self.tiled.get(index)
        if tiled is not None and tiled.grad:
            return CONV_GRAD
        return GEMM_TN

    def steps(self):
        """Every layer's LayerSteps (forward in a fused evaluation with a gradient)."""
        out = []
        for layer in self.arch.all_layers:
            index = layer.index
            tiled = self.tiled.get(index)
            out.append(LayerSteps(
                index, self.labels[index], self.forward_family(index, want_delta=True),
                self.delta_family(index), self.gradient_family(index),
                tuple(tiled.fwd) if tiled else (), tuple(tiled.bwd) if tiled and index else (),
                tuple(tiled.grad) if tiled else ()))
        return out

    def kernel_files(self):
        """The kernel files whose functions this plan may launch, in any evaluation (criterion,
        outputs or gradient, fused or not): what the runtime builds before the first one."""
        families = set()
        for layer in self.arch.all_layers:
            i = layer.index
            families.update(self.forward_family(i, fused, delta)
                            for fused in (False, True) for delta in (False, True))
            families.update((self.delta_family(i), self.gradient_family(i)))
        files = [f for family in FAMILIES if family in families for f in FAMILY_FILES.get(family, ())]
        if self.split_gradients or self.split_forward or self.split_delta:
            files.append(self.tensor_file)
        return tuple(dict.fromkeys(files + list(EVERY_NET_FILES)))

    @property
    def tensor_file(self):
        """The kernel file of this plan's tensor-core variants: one TF32 product or split TF32."""
        return "gemm_tf32.cu" if self.tf32 else "gemm_split.cu"

    # ------------------------------------------------------------ launch splits and bytes
    def patch_bytes(self):
        """The device bytes of the weights split into fragments for conv_patch.cu's variants."""
        return sum(Geometry.forward(v.shape).fragment_bytes * bool(v.patch)
                   + Geometry.delta(v.shape).fragment_bytes * bool(v.patch_delta)
                   for v in self.tiled.values())

    def own_bytes(self):
        """The backend's own device buffers: static_bytes and the weights' fragments."""
        return static_bytes(self.arch) + self.patch_bytes()

    def grad_plan(self, index):
        layer = self.arch.all_layers[index]
        return GradPlan.of(layer, self.layouts[index].rows)

    def grad_slots(self, index, n_total):
        """(positions per partial sum, partial sums per chunk of cases) of a layer's weight
        gradient: conv_grad's or conv_grad_pooled's sub-chunks over every position, or
        gemm_tn's position ranges."""
        grad = self.grad_plan(index)
        family = self.gradient_family(index)
        if family in (CONV_GRAD_POOLED, CONV_GRAD_FIRST):
            return grad.groups, POOLED_GRAD_SUBS
        if family == CONV_GRAD:
            tiled = self.tiled[index]
            return grad.groups, grad_subs(tiled.shape, tiled.grad.values())
        return grad.slots_for(n_total)

    def bytes_per_case(self):
        """Device bytes per case of a batch, for the automatic MAX BATCH: every layer's
        activation and winners, two deltas as wide as the widest layer, the classes, the
        inputs, the gradient scratch of a chunk's every slice (per case), and the float64
        log likelihood and probabilities."""
        layers = self.arch.all_layers
        n_classes = self.arch.n_classes
        floats = (sum(layer.n_neurons for layer in layers)
                  + 2 * max(layer.n_neurons for layer in layers) + n_classes)
        ints = sum(layer.n_neurons for layer in layers if layer.kind.keeps_winners)
        scratch = max([self.grad_plan(layer.index).scratch_floats(
                           CHUNK, layer.depth, self.grad_slots(layer.index, CHUNK)[1]) / CHUNK
                       for layer in layers if layer.kind.has_weights] + [0])
        return 4 * (floats + ints + self.arch.n_inputs + scratch) + 8 * (1 + n_classes)

    def batch_plan(self, n_cases, batch_limit, params):
        """The batches, launch splits and device buffers of an evaluator of n_cases cases with
        MAX BATCH batch_limit in force (params: a DeviceParams, for MAX HID GRAD and MAX MEM
        GRAD)."""
        return BatchPlan.of(self, n_cases, batch_limit, params)


def plan_kernels(arch, options=DeviceOptions(), shared_optin=SMEM_BYTES, precision=FLOAT32):
    """The KernelPlan of an architecture: which family computes each step, and the tiled
    variants that fit a device whose kernels may opt in to `shared_optin` bytes of shared
    memory; precision: CUDA PRECISION (TF32: the tensor-core steps take one TF32 product)."""
    layouts, _, _ = layer_layouts(arch)
    conv_small = _conv_small_widths(arch, layouts)
    pool_tiles = frozenset(layer.index for layer in arch.layers
                           if options.pool_tiles and not layer.kind.has_weights
                           and windows_tile(layer, layer.kind))
    tiled, conv_pool = _tiled_layers(arch, layouts, options, shared_optin, conv_small, pool_tiles)
    first = first_layer_plan(arch, layouts[0].rows if 0 in conv_small else 0, conv_small.get(0),
                             options, pool_tiles)
    tf32 = precision == TF32
    split = _split_gradients(arch, options, first.pooled_grad or first.direct_grad, tiled)
    split_forward, split_delta = _split_products(arch, options, conv_small, tiled, tf32,
                                                 first.fused_pool)
    # a step on the tensor cores needs no float32 tiled variants built (nor, for a forward step,
    # the pooling in their epilogue)
    tiled = {i: v for i, v in ((i, replace(v, grad={} if i in split else v.grad,
                                           fwd={} if i in split_forward else v.fwd,
                                           patch=v.patch if i in split_forward else {},
                                           patch_delta=v.patch_delta if i in split_delta else {},
                                           bwd={} if i in split_delta else v.bwd))
                               for i, v in tiled.items()) if v.any}
    conv_pool = {i + 1 for i, v in tiled.items()
                 if v.pool and (v.fwd or v.patch and _patch_pool(v.shape, v.pool))}
    labels = tuple(f"Layer {i + 1} {layer.kind}" for i, layer in enumerate(arch.layers)) \
        + ("Output",)
    return KernelPlan(arch, layouts, conv_small, pool_tiles, tiled, frozenset(conv_pool),
                      first.fused_pool, first.fused_pool_gradient, first.pooled_grad, labels,
                      split, split_forward, split_delta, tf32, first.direct_grad)


def _split_products(arch, options, conv_small, tiled, tf32=False, fused_first=False):
    """(layers whose activation, layers whose delta backpropagation) run as gather products on
    the tensor cores (gemm_nn's split TF32 variants, or with tf32 their one-product twins):
    every such gather product where options.tensor_cores is True, none where it is False, and
    where it is None those that split_tf32_forward_pays and split_tf32_delta_pays pick (with
    tf32: tf32_forward_pays and tf32_delta_pays). fused_first: the first layer is computed with
    its pooling (first_layer.py)."""
    if options.tensor_cores is False:
        return frozenset(), frozenset()
    products = [layer for layer in arch.all_layers if layer.kind.has_weights]
    every = bool(options.tensor_cores)
    forward_pays = tf32_forward_pays if tf32 else split_tf32_forward_pays
    delta_pays = tf32_delta_pays if tf32 else split_tf32_delta_pays
    # a conv_small layer's activation only where it has tiled variants, or it is a wide window's
    # first layer (first_on_tensor_cores); its delta never (12 and 24 columns were slower there:
    # vgg-mnist 1.56 -> 1.87 ms, 0.54 -> 0.63)
    forward = [layer.index for layer in products
               if (layer.index not in conv_small or layer.index in tiled and tiled[layer.index].fwd
                   or layer.index == 0 and not fused_first and first_on_tensor_cores(layer))
               and (every or forward_pays(layer, tiled.get(layer.index)))]
    delta = [layer.index for layer in products
             if layer.index > 0 and layer.index not in conv_small
             and (every or delta_pays(layer, tiled.get(layer.index)))]
    return frozenset(forward), frozenset(delta)


def _split_gradients(arch, options, first_own, tiled):
    """The layers whose weight-gradient partial sums run on the tensor cores (gemm_tn's split
    TF32 variants, or with tf32 their one-product twins): of the layers with weights whose
    gradient is not the first layer's own kernel's (first_own), every one unless
    options.tensor_cores is False, and by the rule (None) not those where conv_grad's float32
    variants are faster (float32_grad_pays). Elsewhere split TF32 leads them (NOTES.md, "Rules
    measured again", "A warp a partial sum": strided-rgb's 3 x 3 layer of stride 2, 0.46
    against 0.37 ms; lenet-60k's 5 x 5 layer, 5.15 against 4.81)."""
    if options.tensor_cores is False:
        return frozenset()
    return frozenset(layer.index for layer in arch.all_layers
                     if layer.kind.has_weights and not (layer.index == 0 and first_own)
                     and (options.tensor_cores or not float32_grad_pays(tiled.get(layer.index))))


# ------------------------------------------------------------------------------ device bytes
def _valid_taps(size, prior, filter_size, stride, pad):
    """(position, tap) pairs along one axis whose input falls inside the prior layer."""
    return sum(1 for pos in range(size) for tap in range(filter_size)
               if 0 <= pos * stride - pad + tap < prior)


def index_ints(arch):
    """(descriptor ints, table ints) of the gather products (plan.ModelPlan's arrays), counted
    from the shapes: five ints a group, and the A and B offsets of every group's rows."""
    desc = table = 0
    for layer in arch.all_layers:
        if not layer.kind.has_weights:
            continue
        d = layer.depth
        if layer.kind.whole_prior:
            desc += 5 + (5 if layer.index > 0 else 0)
            table += 2 * (layer.n_prior + 1) + (2 * d if layer.index > 0 else 0)
            continue
        s = layer.spec
        window = s.filter_v * s.filter_h * layer.prior_depth + 1
        groups = layer.height * layer.width
        desc += 5 * groups
        table += groups * window + window
        if layer.index > 0:
            pairs = (_valid_taps(layer.height, layer.prior_height, s.filter_v, s.stride_v, s.pad_v)
                     * _valid_taps(layer.width, layer.prior_width, s.filter_h, s.stride_h, s.pad_h))
            desc += 5 * layer.prior_height * layer.prior_width
            table += 2 * d * pairs
    return max(desc, 1), max(table, 1)


def static_bytes(arch):
    """The backend's own device buffers: gemm_nn descriptors and index tables; the forward,
    backward and device-to-host index maps (int32); the forward layout (counted twice: also for
    the float32 weights in host order); the penalty mask (bytes); the float64 weights on the
    device and in the page-locked staging buffer; line_point's partial sums; the backward
    layout."""
    _, n_fwd, n_bwd = layer_layouts(arch)
    n_weights = arch.n_weights
    desc, table = index_ints(arch)
    return (4 * (desc + table) + 4 * 3 * n_weights + 4 * n_fwd + n_weights + 16 * n_weights
            + 8 * line_parts(n_weights) + 4 * n_fwd + 4 * max(n_bwd, 1))


def data_bytes(arch, n_cases):
    """An evaluator's per-data buffers: float32 images, int32 classes, float64 probabilities and
    log likelihoods, the criterion and penalty, and the float64 gradient accumulator and
    result."""
    n = int(n_cases)
    return (4 * n * arch.n_inputs + 4 * n + 8 * n * arch.n_classes + 8 * n + 40
            + 16 * arch.n_weights)


class BatchPlan:
    """The batches ((start, stop) of each), the launch splits of the weight gradient (splits:
    layer index -> GradientSplit) and the device buffers of the largest batch (buffers:
    [(name, bytes)], in allocation order), with the data and static bytes: the evaluator, its
    Workspace, CUDA.LOG section 3 and memory.py read them here."""

    def __init__(self, n_cases, batches, splits, buffers, data, static):
        self.n_cases = n_cases
        self.batches = batches
        self.batch_cases = max(stop - start for start, stop in batches)
        self.n_batches = len(batches)
        self.splits = splits
        self.buffers = buffers
        self.data_bytes = data
        self.static_bytes = static

    @property
    def total_bytes(self):
        return self.data_bytes + self.static_bytes + sum(n for _, n in self.buffers)

    @classmethod
    def of(cls, plan, n_cases, batch_limit, params):
        batches = split_batches(n_cases, batch_limit)
        batch_cases = max(stop - start for start, stop in batches)
        splits = _gradient_splits(plan, n_cases, batch_cases, params)
        buffers = _batch_buffers(plan, batch_cases, splits)
        return cls(n_cases, batches, splits, buffers, data_bytes(plan.arch, n_cases),
                   plan.own_bytes())


def _gradient_splits(plan, n_cases, batch_cases, params):
    splits = {}
    for layer in plan.arch.all_layers:
        if not layer.kind.has_weights:
            continue
        grad = plan.grad_plan(layer.index)
        per_slot, slots = plan.grad_slots(layer.index, n_cases)
        per = gradient_launch_slices(grad, batch_cases, params.max_hid_grad, params.max_mem_grad,
                                     slots)
        splits[layer.index] = GradientSplit(per, -(-layer.depth // per),
                                            grad.scratch_floats(batch_cases, per, slots),
                                            per_slot, slots)
    return splits


def _batch_buffers(plan, batch_cases, splits):
    """[(name, bytes)]: activations and winners of every layer, two delta buffers, the gradient
    partial-sum scratch and (CONV layers) float64 per-chunk totals."""
    arch, nb = plan.arch, batch_cases
    buffers = []
    for layer in arch.all_layers:
        label = plan.labels[layer.index]
        buffers.append((f"{label} activations", 4 * nb * layer.n_neurons))
        if layer.kind.keeps_winners:
            buffers.append((f"{label} max-pooling winners", 4 * nb * layer.n_neurons))
    widest = max(layer.n_neurons for layer in arch.all_layers)
    buffers.append(("delta (two buffers)", 8 * nb * widest))
    scratch = max([1] + [split.scratch_floats for split in splits.values()])
    buffers.append(("gradient partial-sum scratch", 4 * scratch))
    chunks = -(-nb // CHUNK)
    totals = max([1] + [chunks * plan.layouts[i].rows * split.slices_per_launch
                        for i, split in splits.items()
                        if arch.all_layers[i].kind.shares_weights and split.slots > 1])
    buffers.append(("convolution gradient chunk totals (float64)", 8 * totals))
    return buffers


def device_bytes(arch, n_cases, batch_limit, params, options=DeviceOptions(),
                 shared_optin=SMEM_BYTES):
    """Every device byte an evaluator of n_cases cases with MAX BATCH batch_limit allocates,
    with the backend's own: the BatchPlan's total."""
    plan = plan_kernels(arch, options, shared_optin, params.precision)
    return plan.batch_plan(n_cases, batch_limit, params).total_bytes
