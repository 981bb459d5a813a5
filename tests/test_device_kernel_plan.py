"""The kernel plan (convnet/device/kernel_plan.py): which family computes each step, and the
device bytes counted from shapes alone. Pure numpy; no GPU."""

import numpy as np
import pytest

from convnet.architecture import Architecture
from convnet.device import kernel_plan as kp
from convnet.device.tensor_rules import pairs_only
from convnet.device import tuning
from convnet.device.options import DeviceOptions
from convnet.device.plan import ModelPlan
from convnet.params import DeviceParams

from test_device_emulated import _random_arch

LENET = (["CONVOLUTIONAL LAYER 20 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
          "CONVOLUTIONAL LAYER 50 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
          "FULLY CONNECTED LAYER 500"], 28, 28, 1, 10)
HOPPER = 227 * 1024


def _lenet():
    return Architecture.from_lines(*LENET)


def _families(plan):
    return [(s.forward, s.delta, s.gradient) for s in plan.steps()]


def test_lenet_steps():
    """LeNet on a Hopper: the first layer pools as it goes and takes its gradient from the pooled
    deltas; the second's activation and weight gradient are on the tensor cores (its activation
    with the patch variants as candidates, its pooling in their epilogue), its delta tiled."""
    plan = kp.plan_kernels(_lenet(), DeviceOptions(), HOPPER)
    assert _families(plan) == [
        (kp.CONV_SMALL_POOL, None, kp.CONV_GRAD_POOLED),
        (kp.WITH_PRIOR, kp.CONV_GRAD_POOLED, None),
        (kp.GEMM_NN, kp.GEMM_NN, kp.GEMM_TN_SPLIT),
        (kp.WITH_PRIOR, kp.POOL_BACKWARD_TILES, None),
        (kp.GEMM_NN, kp.GEMM_NN, kp.GEMM_TN_SPLIT),
        (kp.GEMM_NN, kp.GEMM_NN, kp.GEMM_TN_SPLIT)]
    steps = plan.steps()
    assert plan.tiled[2].patch and not steps[2].forward_variants and steps[2].delta_variants
    assert not steps[2].gradient_variants
    assert not steps[0].forward_variants           # conv_small's activation
    # reading every activation (fused=False): each layer on its own
    assert [plan.forward_family(i, fused=False) for i in range(4)] == [
        kp.CONV_SMALL, kp.POOL_FORWARD, kp.GEMM_NN, kp.POOL_FORWARD]
    # a criterion with the first layer fused, whatever the gradient does
    assert plan.forward_family(1, want_delta=False) == kp.WITH_PRIOR


STRIDED_3X3 = (["CONVOLUTIONAL LAYER 32 3 3 0 0 2 2", "CONVOLUTIONAL LAYER 64 1 1 1 1 2 2",
                "FULLY CONNECTED LAYER 128"], 32, 32, 3, 10)

CIFAR_SIZED = (["CONVOLUTIONAL LAYER 24 2 2 2 2 1 1", "POOLED MAX LAYER 2 2 2 2",
                "CONVOLUTIONAL LAYER 48 2 2 2 2 1 1", "POOLED MAX LAYER 2 2 2 2",
                "FULLY CONNECTED LAYER 96"], 32, 32, 3, 10)


def test_tensor_cores_take_the_steps_the_rule_picks():
    """The steps on the tensor cores (split TF32). By default: every weight gradient (conv_grad's
    variants are built only with the tensor cores off, or where they are faster: narrow layers
    and the CIFAR-sized net's padded 5 x 5 layer) but the first layer's from the pooled
    deltas or, with at most 10 weight rows, from its own deltas a position a thread;
    the activations of more than 16 columns without tiled variants (the fully connected layers
    of LeNet and the CIFAR-sized net, not the output layer; a first conv_small layer's only for
    a wide window: the strided net's 7 x 7 x 3), and those with tiled variants whose inputs come
    in runs of four through a window of under 16 taps from at least 16 slices (the strided net's
    3 x 3 second layer), and those with patch variants from at least 16 slices (LeNet's and the
    CIFAR-sized net's 5 x 5 layers); the deltas from fully connected layers of over 128
    neurons (LeNet's 500, not the CIFAR-sized net's 96) and from other layers whose depth gives
    runs of four (the CIFAR-sized net's 48 and the strided net's 64, not LeNet's 50).
    tensor_cores=True: every one of them, and the tiled variants are not built (the pooling
    after LeNet's second layer then goes into its patch variants' epilogue); False: none."""
    lenet = kp.plan_kernels(_lenet(), DeviceOptions(), HOPPER)
    assert lenet.split_gradients == {2, 4, 5}
    assert lenet.split_forward == {2, 4} and lenet.split_delta == {4}
    assert not lenet.tiled[2].grad and lenet.conv_pool == {3} and lenet.tiled[2].patch
    cifar = kp.plan_kernels(Architecture.from_lines(*CIFAR_SIZED), DeviceOptions(), HOPPER)
    assert cifar.split_gradients == {0, 4, 5}       # its padded 5 x 5 layer on conv_grad
    assert cifar.gradient_family(2) == kp.CONV_GRAD and cifar.grad_slots(2, 5000)[1] == 64
    assert cifar.split_forward == {2, 4} and cifar.split_delta == {2}
    assert 2 in cifar.tiled and cifar.tiled[2].grad and not cifar.tiled[2].fwd
    assert not cifar.tiled[2].bwd and cifar.tiled[2].patch and cifar.tiled[2].patch_delta
    strided = kp.plan_kernels(Architecture.from_lines(*STRIDED_3X3), DeviceOptions(), HOPPER)
    assert strided.split_forward == {0, 1, 2} and strided.split_delta == {1}   # 7 x 7 x 3 first
    assert strided.split_gradients == {0, 1, 2, 3}
    vgg = kp.plan_kernels(Architecture.from_lines(*VGG_SIZED), DeviceOptions(), HOPPER)
    assert vgg.split_gradients == {4, 6, 7}
    assert vgg.gradient_family(0) == kp.CONV_GRAD_FIRST and not vgg.pooled_grad
    # the 28 x 28 x 12 and 14 x 14 x 24 layers on 12 slices: conv_grad_warp, 64 partials a chunk
    for index in (1, 3):
        assert vgg.gradient_family(index) == kp.CONV_GRAD
        assert vgg.grad_slots(index, 10000)[1] == 64
    assert {v.suffix for v in vgg.tiled[1].grad.values()} == {"w4_b2", "w2_b4", "w4_b4"}
    products = kp.plan_kernels(Architecture.from_lines(*VGG_SIZED),
                               DeviceOptions(first_grad=False), HOPPER)
    assert products.split_gradients == {0, 4, 6, 7}
    every_vgg = kp.plan_kernels(Architecture.from_lines(*VGG_SIZED),
                                DeviceOptions(tensor_cores=True), HOPPER)
    assert every_vgg.split_gradients == {1, 3, 4, 6, 7}
    float32 = kp.plan_kernels(Architecture.from_lines(*VGG_SIZED),
                              DeviceOptions(tensor_cores=False), HOPPER)
    assert {v.stages for v in float32.tiled[3].grad.values()} == {2}
    strided_float32 = kp.plan_kernels(Architecture.from_lines(*STRIDED_3X3),
                                      DeviceOptions(tensor_cores=False), HOPPER)
    assert {v.stages for v in strided_float32.tiled[1].grad.values()} == {2}
    assert 1 not in strided.tiled or not strided.tiled[1].fwd
    every = kp.plan_kernels(_lenet(), DeviceOptions(tensor_cores=True), HOPPER)
    assert every.split_gradients == every.split_forward == every.split_delta == {2, 4, 5}
    assert not any(v.float32 for v in every.tiled.values()) and every.conv_pool == {3}
    assert every.tiled[2].patch and not every.tiled[2].patch_delta      # 50 slices: no delta
    assert every.gradient_family(0) == kp.CONV_GRAD_POOLED
    none = kp.plan_kernels(_lenet(), DeviceOptions(tensor_cores=False), HOPPER)
    assert not (none.split_gradients or none.split_forward or none.split_delta)
    for plan in (lenet, cifar, every):
        assert "gemm_async.cu" in plan.kernel_files()


def test_a_wide_first_window_takes_the_tensor_cores_for_its_activation():
    """A first conv_small layer's activation takes the tensor cores where its window holds at
    least 64 inputs (7 x 7 x 3, 5 x 5 x 3) and no pooling is computed with it; a narrower window
    (5 x 5 x 2, 3 x 3 x 1) keeps the float32 family and conv_small's direct kernel, and so does a
    layer of 16 slices or fewer. The same with one TF32 product."""
    def plan(lines, rows, bands, precision="FLOAT32"):
        arch = Architecture.from_lines(lines + ["FULLY CONNECTED LAYER 64"], rows, rows, bands, 10)
        return kp.plan_kernels(arch, DeviceOptions(), HOPPER, precision)
    for window, bands in (("3 3 0 0 2 2", 3), ("2 2 2 2 1 1", 3)):
        for precision in ("FLOAT32", "TF32"):
            wide = plan([f"CONVOLUTIONAL LAYER 24 {window}"], 32, bands, precision)
            assert 0 in wide.conv_small and 0 in wide.split_forward
            assert wide.forward_family(0) == kp.GEMM_NN
    for window, bands, slices in (("2 2 1 1 2 2", 2, 20), ("1 1 1 1 1 1", 1, 32),
                                  ("3 3 0 0 2 2", 3, 16)):
        narrow = plan([f"CONVOLUTIONAL LAYER {slices} {window}"], 30, bands)
        assert 0 in narrow.conv_small and 0 not in narrow.split_forward
        assert narrow.forward_family(0) == kp.CONV_SMALL
    # computed with its pooling: the fused kernel, whatever the window
    pooled = plan(["CONVOLUTIONAL LAYER 24 3 3 0 0 1 1", "POOLED MAX LAYER 2 2 2 2"], 32, 3)
    assert pooled.fused_pool and 0 not in pooled.split_forward
    assert pooled.forward_family(0) == kp.CONV_SMALL_POOL


def test_deltas_in_runs_of_two_take_the_tensor_cores_where_no_tiled_variant_serves():
    """A delta from a layer whose depth is 2 mod 4 (runs of two floats, copied 8 bytes at a time)
    takes the tensor cores where that layer has no tiled delta variants: 50 slices into 10 and a
    locally connected layer's 22 into 50; LeNet's 50, whose tiled variants stay ahead, and odd
    depths (no runs) do not."""
    even = kp.plan_kernels(Architecture.from_lines(
        ["CONVOLUTIONAL LAYER 10 2 2 2 2 1 1", "POOLED MAX LAYER 2 2 2 2",
         "CONVOLUTIONAL LAYER 50 2 2 2 2 1 1", "LOCAL LAYER 22 1 1 0 0 1 1",
         "FULLY CONNECTED LAYER 30"], 32, 32, 3, 10), DeviceOptions(), HOPPER)
    assert even.split_delta == {2, 3} and not even.tiled[2].bwd
    assert 2 not in kp.plan_kernels(_lenet(), DeviceOptions(), HOPPER).split_delta
    odd = kp.plan_kernels(Architecture.from_lines(
        ["CONVOLUTIONAL LAYER 37 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 37 1 1 1 1 1 1",
         "FULLY CONNECTED LAYER 40"], 16, 16, 1, 10), DeviceOptions(), HOPPER)
    assert not odd.split_delta
    # the launches of those runs of two take each runs-of-four tile's twin that copies them
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 10 2 2 2 2 1 1",
                                    "CONVOLUTIONAL LAYER 50 1 1 1 1 1 1",
                                    "CONVOLUTIONAL LAYER 24 1 1 1 1 1 1",
                                    "FULLY CONNECTED LAYER 30"], 12, 12, 3, 10)
    first, conv50, conv24, fc = arch.layers[:4]
    assert not pairs_only(first, forward=True)                       # on 3 bands: no runs
    assert pairs_only(conv50, forward=True) and pairs_only(conv50, forward=False)
    assert pairs_only(conv24, forward=True) and not pairs_only(conv24, forward=False)
    assert not (pairs_only(fc, forward=True) or pairs_only(fc, forward=False))
    for n in (10, 20, 64):
        quads = tuning.nn_split_candidates(5000, n)
        pairs = tuning.nn_split_candidates(5000, n, pairs=True)
        assert pairs == [tuning.PAIRS.get(t, t) for t in quads] != quads
        assert all(t.startswith("tcp") for t in pairs if t not in quads)

def test_a_first_layer_with_average_pooling_is_fused():
    """A conv_small first layer with average pooling that tiles it: computed with its pooling in
    one launch in every evaluation, its gradient from the pooled deltas (conv_grad_avg); without
    that gradient (pooled_grad=False) a gradient computes the two layers on their own; windows
    that do not tile the layer (3 x 3 of stride 2) keep the forward fusion alone."""
    lines = ["CONVOLUTIONAL LAYER 32 1 1 1 1 1 1", "POOLED AVERAGE LAYER 2 2 2 2",
             "CONVOLUTIONAL LAYER 64 1 1 1 1 1 1", "FULLY CONNECTED LAYER 64"]
    plan = kp.plan_kernels(Architecture.from_lines(lines, 28, 28, 1, 10), DeviceOptions(), HOPPER)
    assert plan.fused_pool and plan.fused_pool_gradient and plan.pooled_grad
    assert plan.forward_family(0, want_delta=True) == kp.CONV_SMALL_POOL
    assert plan.gradient_family(0) == plan.delta_family(1) == kp.CONV_GRAD_POOLED
    assert 0 not in plan.split_gradients and not plan.first_grad
    layered = kp.plan_kernels(Architecture.from_lines(lines, 28, 28, 1, 10),
                              DeviceOptions(pooled_grad=False), HOPPER)
    assert layered.fused_pool and not layered.fused_pool_gradient
    assert layered.forward_family(0, want_delta=True) == kp.CONV_SMALL
    assert layered.gradient_family(0) == kp.CONV_GRAD_FIRST
    odd = kp.plan_kernels(Architecture.from_lines(
        ["CONVOLUTIONAL LAYER 8 1 1 1 1 1 1", "POOLED AVERAGE LAYER 3 3 3 3",
         "FULLY CONNECTED LAYER 5"], 10, 10, 1, 3), DeviceOptions(), HOPPER)
    assert odd.fused_pool and not odd.fused_pool_gradient and not odd.pooled_grad


VGG_SIZED = (["CONVOLUTIONAL LAYER 12 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 12 1 1 1 1 1 1",
              "POOLED MAX LAYER 2 2 2 2", "CONVOLUTIONAL LAYER 24 1 1 1 1 1 1",
              "CONVOLUTIONAL LAYER 24 1 1 1 1 1 1", "POOLED MAX LAYER 2 2 2 2",
              "FULLY CONNECTED LAYER 48"], 28, 28, 1, 10)


def test_small_conv_layers_after_the_first_are_tuned_sites():
    """conv_small layers after the first (stacked 3 x 3 layers of 12 and 24 slices): their
    activation is a tuned site whose candidates are the direct kernel (first), the gather tiles
    and tiled variants, with the pooling after them in the epilogue; those of 24 slices (their
    inputs come in runs of four, from 24 slices) take the tensor cores by the rule instead (from
    12, the tiled variants stay); the first layer has
    no tiled activation (10 weight rows); no conv_small layer's delta is on the tensor cores."""
    plan = kp.plan_kernels(Architecture.from_lines(*VGG_SIZED), DeviceOptions(), HOPPER)
    assert set(plan.conv_small) == {0, 1, 3, 4}
    assert 0 not in plan.tiled or not plan.tiled[0].fwd
    assert plan.tiled[1].fwd and plan.conv_pool == {2}
    assert plan.split_forward == {4, 6} and not plan.split_delta and plan.tiled[3].fwd
    # a thread across all 12 slices of the 28 x 28 x 12 layer, 4 positions (none wasted on
    # slices 12-15 as the 8-slice tiles' are), and the delta into its rows of 28 columns tiled
    assert {(v.tm, v.tn) for v in plan.tiled[1].fwd.values()} == {(8, 8), (4, 12)}
    assert plan.tiled[1].bwd
    assert [plan.forward_family(i, want_delta=True) for i in range(5)] == [
        kp.CONV_SMALL, kp.CONV_SMALL, kp.WITH_PRIOR, kp.CONV_SMALL, kp.GEMM_NN]
    assert {"conv_small.cu", "gemm.cu", "gemm_async.cu"} <= set(plan.kernel_files())
    off = kp.plan_kernels(Architecture.from_lines(*VGG_SIZED), DeviceOptions(tensor_cores=False),
                          HOPPER)
    assert not off.split_forward and off.tiled[3].fwd and off.tiled[4].fwd
    assert off.forward_family(4, want_delta=True) == kp.CONV_SMALL


def test_tf32_precision_takes_the_tensor_cores_wider():
    """CUDA PRECISION = TF32: one TF32 product wherever the split rule puts the tensor cores, and
    further: every weight gradient (LeNet's second CONV layer's too) and the activations and
    deltas of over 16 columns, except where tiled variants serve a window of 16 taps or more
    without runs of four (LeNet's 5 x 5 second layer keeps its tiled delta, from 50 slices, but
    its activation, from 20, takes the tensor cores; a 3 x 3 layer with tiled variants gives them
    up; its 3 x 3 window has no patch variants). FLOAT32 plans are never tf32."""
    lenet = kp.plan_kernels(_lenet(), DeviceOptions(), HOPPER, "TF32")
    assert lenet.tf32 and not kp.plan_kernels(_lenet(), DeviceOptions(), HOPPER).tf32
    assert lenet.split_gradients == {2, 4, 5}
    assert lenet.split_forward == {2, 4} and lenet.split_delta == {4}
    assert not lenet.tiled[2].fwd and lenet.tiled[2].bwd and not lenet.tiled[2].grad
    assert lenet.conv_pool == {3} and lenet.gradient_family(0) == kp.CONV_GRAD_POOLED
    strided = Architecture.from_lines(*STRIDED_3X3)
    tf32 = kp.plan_kernels(strided, DeviceOptions(), HOPPER, "TF32")
    assert tf32.split_forward == {0, 1, 2} and tf32.split_delta == {1, 2} and not tf32.tiled
    assert tf32.split_gradients == {0, 1, 2, 3}
    off = kp.plan_kernels(_lenet(), DeviceOptions(tensor_cores=False), HOPPER, "TF32")
    assert not (off.split_gradients or off.split_forward or off.split_delta)


def test_the_switches_change_the_steps():
    arch = _lenet()
    plain = kp.plan_kernels(arch, DeviceOptions(fuse=False, tiled=False, pool_tiles=False,
                                                tensor_cores=False), HOPPER)
    assert _families(plain) == [
        (kp.CONV_SMALL, None, kp.GEMM_TN),
        (kp.POOL_FORWARD, kp.POOL_BACKWARD, None),
        (kp.GEMM_NN, kp.GEMM_NN, kp.GEMM_TN),
        (kp.POOL_FORWARD, kp.POOL_BACKWARD, None),
        (kp.GEMM_NN, kp.GEMM_NN, kp.GEMM_TN),
        (kp.GEMM_NN, kp.GEMM_NN, kp.GEMM_TN)]
    assert not kp.plan_kernels(arch, DeviceOptions(pool_epilogue=False), HOPPER).conv_pool
    assert not kp.plan_kernels(arch, DeviceOptions(pooled_grad=False), HOPPER).pooled_grad
    # with only the shared memory every block has, fewer tiled variants fit
    small = kp.plan_kernels(arch, DeviceOptions(), kp.SMEM_BYTES)
    big = kp.plan_kernels(arch, DeviceOptions(), HOPPER)
    assert set(small.tiled[2].fwd) <= set(big.tiled[2].fwd)


@pytest.mark.parametrize("seed", range(10))
def test_index_tables_counted_from_shapes(seed):
    """The descriptor and table sizes memory.py counts without building them are those of the
    tables the device gets."""
    arch = _random_arch(seed)
    plan = ModelPlan(arch)
    desc = sum(g.desc.size for lp in plan.layers for g in (lp.fwd, lp.bwd) if g is not None)
    assert kp.index_ints(arch) == (max(desc, 1), plan.tables.size)


def test_index_tables_of_lenet():
    plan = ModelPlan(_lenet())
    desc = sum(g.desc.size for lp in plan.layers for g in (lp.fwd, lp.bwd) if g is not None)
    assert kp.index_ints(_lenet()) == (desc, plan.tables.size)


def test_batch_plan_follows_the_limits():
    arch = _lenet()
    plan = kp.plan_kernels(arch, DeviceOptions(), HOPPER)
    one = plan.batch_plan(1000, 1000, DeviceParams())
    assert one.batches == [(0, 1000)] and one.n_batches == 1 and one.batch_cases == 1000
    cut = plan.batch_plan(1000, 512, DeviceParams(max_hid_grad=100, max_mem_grad=1))
    assert cut.batches == [(0, 512), (512, 1000)]
    fc = cut.splits[4]
    assert fc.slices_per_launch <= 100 and fc.launches == -(-500 // fc.slices_per_launch)
    assert 4 * fc.scratch_floats <= 1 << 20
    assert cut.total_bytes < one.total_bytes
    assert [name for name, _ in cut.buffers][-3:] == [
        "delta (two buffers)", "gradient partial-sum scratch",
        "convolution gradient chunk totals (float64)"]
    assert np.all([size > 0 for _, size in cut.buffers])
