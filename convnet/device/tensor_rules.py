"""The rules of shapes that put a gather product on the tensor cores (split TF32, or with CUDA
PRECISION = TF32 one TF32 product) or keep it on the float32 kernels, each from what the suite
measured (benchmarks/NOTES.md). They are rules, not timings, so a run's bits do not depend on the
machine's timings; kernel_plan.py applies them to every layer.
"""

from .conv_tiled import grad_pays


def runs_of_four(depth):
    """Whether a gathered layer of this depth gives the gather products runs of four floats on
    16-byte boundaries (depth-fastest layout), which the quad variants copy 16 bytes at a time."""
    return depth % 4 == 0


# A first conv_small layer's activation (not computed with its pooling) goes to the tensor cores
# from this many inputs in its window (taps x bands): 7 x 7 x 3, 0.55 -> 0.48 ms (24 slices) and
# 0.55 -> 0.52 (32, strided-rgb); 5 x 5 x 3, 1.49-1.59 -> 1.43; but 5 x 5 x 2 (inexact) 0.15 ->
# 0.19 and 3 x 3 x 1 0.61-0.66 -> 0.87, where conv_small's direct kernel leads.
FIRST_TENSOR_MIN_INPUTS = 64


def first_on_tensor_cores(layer):
    """Whether a first conv_small layer's window is wide enough for the tensor cores."""
    return layer.n_prior_weights - 1 >= FIRST_TENSOR_MIN_INPUTS


# Below this many positions a CONV or LOCAL layer's products are too small for the runs of four
# to pay on the tensor cores (inexact's 4 x 4 layer: activation 0.050 -> 0.066 ms, delta 0.075
# -> 0.082, where layers of 49 to 256 positions gained 10-33 %).
TENSOR_MIN_POSITIONS = 32


def runs_of_two(depth):
    """Whether a gathered layer of this depth gives runs of two floats on 8-byte boundaries."""
    return depth % 2 == 0


def pairs_only(layer, forward):
    """Whether a CONV or LOCAL layer's gather product (its activation, or with forward False the
    delta from it) reads runs of two but not of four (the PAIRS variants: tuning.PAIRS)."""
    depth = layer.prior_depth if forward else layer.depth
    return not layer.kind.whole_prior and runs_of_two(depth) and not runs_of_four(depth)


def _runs_pay(layer, depth, runs=runs_of_four):
    """Whether runs (of four, or `runs`) in a gathered depth put a CONV or LOCAL product on them."""
    return runs(depth) and layer.height * layer.width >= TENSOR_MIN_POSITIONS


# Where the prior layer has fewer slices, a tiled activation stays ahead of the runs of four
# whatever its window (vgg-mnist's 14 x 14 x 24 layer on 12 slices: 0.38 against 0.46 ms; on 24
# slices the runs of four lead)
TILED_MIN_PRIOR = 16


def split_tf32_forward_pays(layer, tiled):
    """Whether a layer's activation is faster on the tensor cores, by what the suite measured
    (NOTES.md, "Tensor cores", "Runs of four"): not for 16 columns or fewer (the float32 tiles
    of 16 columns were faster); where conv_tiled.cu has forward variants, only where the prior
    layer's inputs come in runs of four, the layer has TENSOR_MIN_POSITIONS positions and the
    window has fewer than TILED_OVER_TF32_TAPS taps (strided-rgb's 3 x 3: 0.53 -> 0.41 ms; at
    5 x 5 the tiled kernels, which reuse each input across the taps, stayed ahead) and the prior
    layer has at least TILED_MIN_PRIOR slices; yes
    otherwise (a fully connected layer's on the split variants for dense rows where its launch
    allows them). Where conv_patch.cu's variants fit the layer (tiled.patch: windows of 16 taps
    or more), which form its windows from a patch of prior rows copied once, yes where the prior
    layer has at least TILED_MIN_PRIOR slices (cifar-conv's 5 x 5 layer on 24 slices: 1.72 ->
    1.36 ms; vgg-mnist's 3 x 3 on 12 stays tiled, 0.37 against 0.45: NOTES.md, "Windows from a
    patch")."""
    if layer.depth <= 16:
        return False
    if tiled is not None and tiled.patch and layer.prior_depth >= TILED_MIN_PRIOR:
        return True
    if tiled is not None and tiled.fwd:
        return (_runs_pay(layer, layer.prior_depth) and layer.prior_depth >= TILED_MIN_PRIOR
                and not _keeps_tiled(layer, tiled.fwd))
    return True


def split_tf32_delta_pays(layer, tiled):
    """Whether the delta backpropagated from a layer is faster on the tensor cores: from a fully
    connected layer, where it has over 128 neurons (dense rows: LeNet's 500, 0.29 -> 0.22 ms);
    from any other layer of TENSOR_MIN_POSITIONS positions, where its deltas come in runs of four
    (avgpool-deep's 64 slices: 1.44 -> 0.97 ms), or of two without tiled delta variants (50
    slices into 10: 2.31 -> 2.11 ms; LeNet's 50 stays tiled: 1.18 against 1.26-1.30)."""
    if layer.kind.whole_prior:
        return layer.depth > 128
    no_tiled = tiled is None or not tiled.bwd
    return _runs_pay(layer, layer.depth) or _runs_pay(layer, layer.depth, runs_of_two) and no_tiled


def float32_grad_pays(tiled):
    """Whether a layer's weight gradient is faster in conv_grad's float32 variants than on the
    tensor cores (conv_tiled.grad_pays): narrow layers, where conv_grad_warp fits (split TF32's
    tiles of 16 or 24 columns and a hundred or more gathered weight rows ran at a fifth of their
    rate on wider layers), and wide windows over many positions."""
    return tiled is not None and grad_pays(tiled.shape, tiled.grad.values())


# CUDA PRECISION = TF32 (one TF32 product): measured on the suite (NOTES.md, "One TF32
# product"), it beats the float32 kernels at every weight gradient and every activation and delta
# of over 16 columns, except where conv_tiled.cu's kernels reuse each input they load across a
# window of many taps (LeNet's and cifar-conv's 5 x 5: tiled 0.94 against 1.01 ms, 1.29 against
# 1.65); at 3 x 3 the one TF32 product won (strided-rgb 0.56 -> 0.42 ms, avgpool-deep 0.61 -> 0.55).
TILED_OVER_TF32_TAPS = 16


def _keeps_tiled(layer, variants):
    """Whether a layer's tiled variants (of one step) stay ahead of one TF32 product."""
    return bool(variants) and layer.spec.filter_v * layer.spec.filter_h >= TILED_OVER_TF32_TAPS


def tf32_forward_pays(layer, tiled):
    """With CUDA PRECISION = TF32: whether a layer's activation takes the tensor cores (where the
    prior layer's inputs come in runs of four, whatever the window: NOTES.md, "Runs of four")."""
    return layer.depth > 16 and (runs_of_four(layer.prior_depth)
                                 or not _keeps_tiled(layer, tiled.fwd if tiled else None))


def tf32_delta_pays(layer, tiled):
    """With CUDA PRECISION = TF32: whether the delta backpropagated from a layer takes the
    tensor cores (where the layer's deltas come in runs of four, whatever the window)."""
    return layer.depth > 16 and (runs_of_four(layer.depth)
                                 or not _keeps_tiled(layer, tiled.bwd if tiled else None))
