"""conv_patch.cu: a convolutional layer's activation on the tensor cores with its windows formed
from a patch of prior rows in shared memory. Which variants fit a shape and which layers the
plan gives them (no GPU); every variant forced on the emulated runtime against the float64
model; and on a GPU the same bits as the gather products of its family (split TF32 and one
TF32 product), MAX BATCH all and 256."""

import dataclasses
import shutil
import subprocess

import numpy as np
import pytest

from convnet.architecture import Architecture
from convnet.device import conv_patch, device_available, tuning
from convnet.device import backend as dbe
from convnet.device.conv_patch import Geometry
from convnet.device.conv_tiled import ConvShape
from convnet.device.kernel_plan import plan_kernels, static_bytes
from convnet.device.options import DeviceOptions
from convnet.params import DeviceParams

from test_device_emulated import TILED_ARCHS, _problem, _rel, fake_runtime  # noqa: F401

EVERY = DeviceOptions(tensor_cores=True)
_OK, _WHY = device_available()
OPTIN = 227 * 1024
LENET = ConvShape(12, 12, 20, 8, 8, 50, 5, 5, 0, 0, 1, 1, 64)
CIFAR = ConvShape(16, 16, 24, 16, 16, 48, 5, 5, 2, 2, 1, 1, 64)


def test_variants_take_whole_cases_or_bands_of_rows():
    """LeNet's 8 x 8 layer takes two cases (128 positions) or one a block, cifar-conv's 16 x 16
    layer bands of 8 or 4 rows; every block's columns are the layer's slices padded to 8, and
    the shared memory is the patch, three stages of fragments and the window offsets."""
    lenet = conv_patch.patch_variants(Geometry.forward(LENET), OPTIN)
    assert [v.suffix for v in lenet] == ["r8_c2_w32x56_n56", "r8_c1_w32x56_n56"]
    geo = Geometry.forward(LENET)
    assert lenet[0].threads(geo) == 128 and lenet[0].grid(geo, 10000) == (5000, 1, 1)
    assert lenet[0].smem(geo) == 4 * (2 * 12 * 12 * 20 + 3 * 2 * 7 * 32 * 4 + 16 * 32)
    geo = Geometry.forward(CIFAR)
    cifar = conv_patch.patch_variants(geo, OPTIN)
    assert [v.suffix for v in cifar] == ["r8_c1_w32x48_n48", "r4_c1_w32x48_n48"]
    # 24 slices: 28 floats a position (an odd number of 16-byte units), 12 rows x 20 columns
    assert cifar[0].smem(geo) == 4 * (12 * 20 * 28 + 3 * 2 * 6 * 32 * 4 + 16 * 38)
    assert cifar[1].grid(geo, 5000) == (20000, 1, 1)
    # wider layers: blocks of 64 columns in two warps of 32
    wide = Geometry.forward(dataclasses.replace(LENET, D=100, LDW=128))
    assert {(v.wn, v.bn) for v in conv_patch.patch_variants(wide, OPTIN)} == {(32, 64)}
    assert wide.fragment_columns == 128 and conv_patch.patch_variants(wide, 4096) == []
    # a window of under 16 taps: none
    assert conv_patch.patch_variants(Geometry.forward(dataclasses.replace(
        CIFAR, FV=3, FH=5, PV=1)), OPTIN) == []


def test_variants_with_the_pooling_hold_whole_windows():
    """With max pooling of 2 x 2 windows after the activation, a band's rows are a multiple of
    2 (20 columns: 6 and 2 rows instead of 6 and 3), and the shared memory holds at least the
    block's activations staged for the pooling (rows of BN + 4 floats; LeNet's fit in the patch
    and the stages)."""
    geo = Geometry.forward(dataclasses.replace(CIFAR, PH=20, PW=20, H=20, W=20))
    assert [v.rows for v in conv_patch.patch_variants(geo, OPTIN)] == [6, 3]
    pooled = conv_patch.patch_variants(geo, OPTIN, (2, 2))
    assert [v.rows for v in pooled] == [6, 2]
    v = pooled[0]
    assert v.smem(geo, True) == max(v.smem(geo), 4 * 120 * (48 + 4))
    lenet = Geometry.forward(LENET)
    v = conv_patch.patch_variants(lenet, OPTIN, (2, 2))[0]
    assert v.smem(lenet, True) == v.smem(lenet) > 4 * 128 * 60     # the tile fits in the rest
    assert conv_patch.pools_in_epilogue(lenet, (2, 2))
    assert not conv_patch.pools_in_epilogue(lenet, (3, 3)) and not conv_patch.pools_in_epilogue(
        Geometry.forward(dataclasses.replace(LENET, D=64)), (2, 2))   # two column blocks
    assert not conv_patch.pools_in_epilogue(Geometry.forward(dataclasses.replace(
        LENET, PH=13, PW=13, H=9, W=9)), (2, 2))                        # 9 x 9: not tiled
    assert conv_patch.pools_in_epilogue(Geometry.forward(dataclasses.replace(
        LENET, PH=16, PW=16, H=12, W=12)), (2, 2))


def test_the_delta_takes_the_window_turned_around():
    """The delta into cifar-conv's 16 x 16 x 24 layer: this layer's deltas (48 slices) as the
    input map, zero rows and columns of 5 - 1 - 2 around it, 24 columns, no bias; only for
    strides of 1 and slices a multiple of 16 (LeNet's 50: none)."""
    geo = Geometry.delta(CIFAR)
    assert (geo.ih, geo.ic, geo.oh, geo.on, geo.qv, geo.bias) == (16, 48, 16, 24, 2, False)
    assert geo.stages == 25 * 48 // 16 and geo.column_floats == 52
    assert [v.suffix for v in conv_patch.patch_variants(geo, OPTIN)] == [
        "r8_c1_w32x24_n24", "r4_c1_w32x24_n24"]
    assert conv_patch.has_delta_variants(CIFAR, True)
    assert not conv_patch.has_delta_variants(CIFAR, False)
    assert not conv_patch.has_delta_variants(LENET, True)
    assert not conv_patch.has_delta_variants(dataclasses.replace(CIFAR, SV=2), True)


def test_the_plan_puts_convolutional_activations_on_the_patch_variants():
    """By the rule, LeNet's second layer (5 x 5 on 20 slices, 50 deep) takes the tensor cores
    for its activation with the patch variants as candidates (no float32 tiled ones), its max
    pooling in their epilogue (a launch of its own without pool_epilogue); its first layer (20
    slices deep, one band) and every layer with the tensor cores off take none."""
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 20 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
                                    "CONVOLUTIONAL LAYER 50 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
                                    "FULLY CONNECTED LAYER 30"], 28, 28, 1, 10)
    plan = plan_kernels(arch, shared_optin=OPTIN)
    assert 2 in plan.split_forward and set(plan.tiled[2].patch) == {
        "patch_r8_c2_w32x56_n56", "patch_r8_c1_w32x56_n56"}
    assert not plan.tiled[2].fwd and 3 in plan.conv_pool and plan.pools_in_epilogue(2)
    apart = plan_kernels(arch, DeviceOptions(pool_epilogue=False), shared_optin=OPTIN)
    assert apart.tiled[2].patch and 3 not in apart.conv_pool
    # the weights' fragments are device bytes of the plan: 32 stages x 2 x 7 column fragments
    fragments = 32 * 2 * 7 * 32 * 16
    assert plan.patch_bytes() == Geometry.forward(plan.tiled[2].shape).fragment_bytes == fragments
    assert plan.batch_plan(100, 100, DeviceParams()).static_bytes == static_bytes(arch) + fragments
    assert all(not v.patch for i, v in plan.tiled.items() if i != 2)
    off = plan_kernels(arch, DeviceOptions(tensor_cores=False), shared_optin=OPTIN)
    assert all(not v.patch for v in off.tiled.values())


def _force_patch(monkeypatch, tile):
    """The patch variant `tile` the only candidate where it is one, else the first gather tile."""
    monkeypatch.setattr(tuning, "patch_candidates",
                        lambda gather, patch, t=tile: [t] if t in patch else list(gather)[:1])


# LeNet's shapes; a padded 5 x 5 layer on 6 slices (copied 4 bytes at a time) whose delta goes
# into a tanh layer; a delta into a pooling layer; a strided layer of 70 slices (two blocks of 64)
EMULATED_SPECS = [
    TILED_ARCHS[0],
    (["CONVOLUTIONAL LAYER 6 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 48 2 2 2 2 1 1",
      "FULLY CONNECTED LAYER 5"], 9, 8, 2, 3),
    (["CONVOLUTIONAL LAYER 20 1 1 1 1 1 1", "POOLED MAX LAYER 2 2 2 2",
      "CONVOLUTIONAL LAYER 48 2 2 2 2 1 1", "FULLY CONNECTED LAYER 4"], 10, 10, 1, 3),
    (["CONVOLUTIONAL LAYER 6 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 70 2 2 0 1 1 2",
      "FULLY CONNECTED LAYER 3"], 9, 11, 2, 3),
    # the max pooling after the activation in the patch variants' epilogue (bands of 2 rows)
    (["CONVOLUTIONAL LAYER 16 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 20 2 2 2 2 1 1",
      "POOLED MAX LAYER 2 2 2 2", "FULLY CONNECTED LAYER 5"], 8, 34, 2, 3),
]


def _names(be):
    """Every patch variant's candidate name, and every function of theirs, of a backend."""
    tiles = sorted({t for p in be.conv_patch.values() for d in (False, True) for t in p.variants(d)})
    functions = {p.function(t, d) for p in be.conv_patch.values() for d in (False, True)
                 for t in p.variants(d)}
    return tiles, functions


@pytest.mark.parametrize("spec", EMULATED_SPECS, ids=range(len(EMULATED_SPECS)))
def test_emulated_patch_variants(fake_runtime, monkeypatch, spec):  # noqa: F811
    """Every patch variant of every convolutional layer, forced as the only candidate of its
    activation and delta on the emulated runtime: the float64 model's criterion, gradient and
    outputs; the weights split into fragments before each product."""
    arch, x, c, w, crit_ref, grad_ref, p_ref = _problem(*spec, n=70, seed=4)
    be = dbe.DeviceBackend(arch, options=EVERY)
    variants, functions = _names(be)
    assert variants and functions <= set(fake_runtime.specialized)
    assert any(p.delta_variants for p in be.conv_patch.values()) == (spec in EMULATED_SPECS[1:3])
    for tile in variants:
        _force_patch(monkeypatch, tile)
        fake_runtime.launches.clear()
        ev = dbe.DeviceBackend(arch, options=EVERY).evaluator(x, c, 0.01)
        crit, grad = ev.gradient(w)
        assert abs(crit - crit_ref) <= 1e-6 * crit_ref and _rel(grad, grad_ref) <= 1e-5
        assert np.abs(ev.outputs(w) - p_ref).max() < 1e-6
        names = list(fake_runtime.launches)
        weights = [i for i, n in enumerate(names) if "_weights_" in n]
        products = [i for i, n in enumerate(names) if n.startswith("conv_patch") and
                    "_weights_" not in n]
        assert products and weights and weights[0] < products[0], tile
        for delta in (False, True):
            kind = "conv_patch_delta_" if delta else "conv_patch_"
            if any(tile in p.variants(delta) for p in be.conv_patch.values()):
                assert any(n.startswith(kind) and "_weights_" not in n for n in names), tile
        pooled = any(p.pool for p in be.conv_patch.values())
        assert pooled == (spec is EMULATED_SPECS[-1])
        assert any(n.startswith("conv_patch_pool_") for n in names) == pooled
        assert not (pooled and "pool_forward" in names)      # no launch of its own


# padded (cifar-conv's shape: its pooling over bands of rows), strided, odd prior depths and a
# layer wider than a block
PATCH_SPECS = [
    (["CONVOLUTIONAL LAYER 20 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
      "CONVOLUTIONAL LAYER 50 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
      "FULLY CONNECTED LAYER 30"], 28, 28, 1, 10),
    (["CONVOLUTIONAL LAYER 24 2 2 2 2 1 1", "POOLED MAX LAYER 2 2 2 2",
      "CONVOLUTIONAL LAYER 48 2 2 2 2 1 1", "POOLED MAX LAYER 2 2 2 2",
      "FULLY CONNECTED LAYER 20"], 32, 32, 3, 10),
    (["CONVOLUTIONAL LAYER 6 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 41 2 2 1 0 2 1",
      "CONVOLUTIONAL LAYER 70 2 2 0 1 1 2", "FULLY CONNECTED LAYER 9"], 15, 13, 3, 3),
    (["CONVOLUTIONAL LAYER 32 1 1 1 1 1 1", "POOLED AVERAGE LAYER 2 2 2 2",
      "CONVOLUTIONAL LAYER 64 2 2 2 2 1 1", "FULLY CONNECTED LAYER 10"], 14, 14, 1, 10),
]


@pytest.mark.cuda
@pytest.mark.skipif(not _OK, reason=f"no CUDA device: {_WHY}")
@pytest.mark.parametrize("spec", PATCH_SPECS, ids=["lenet", "padded", "strided", "wide"])
@pytest.mark.parametrize("precision", ["FLOAT32", "TF32"])
def test_patch_variants_give_the_gather_products_bits(spec, precision, monkeypatch):
    """Every patch variant forced at every activation and delta that has some gives the bits of
    the gather products of its family (split TF32; one TF32 product), MAX BATCH all and 256."""
    from test_device_backend import _backend, _same_bits_problem, evaluations
    arch, x, c, w, crit_ref, grad_ref = _same_bits_problem(*spec)
    params = DeviceParams(precision=precision)
    variants, _ = _names(_backend(arch, params, EVERY))
    assert variants
    runs = {}
    for tile in [None] + variants:
        _force_patch(monkeypatch, tile)
        for p in (params, dataclasses.replace(params, max_batch=256)):
            runs[tile, p.max_batch] = evaluations(arch, x, c, w, p, EVERY)
    first = runs[None, None]
    for key, run in runs.items():
        assert run[0] == first[0] and np.array_equal(run[1], first[1]), key
        assert run[2] == first[2] and np.array_equal(run[3], first[3]), key
        for a, b in zip(run[4], first[4]):
            assert np.array_equal(a, b), key
    if precision == "FLOAT32":
        assert abs(first[0] - crit_ref) <= 1e-6 * crit_ref and _rel(first[1], grad_ref) <= 1e-5


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
@pytest.mark.parametrize("shape", [LENET, CIFAR, dataclasses.replace(CIFAR, D=64, PD=32)],
                         ids=["lenet", "cifar", "wide"])
def test_patch_kernels_compile(shape, tmp_path):
    """conv_patch.cu as the runtime builds it for real layer shapes, the split TF32 and the one
    TF32 product variants of the activation (also with 2 x 2 max pooling) and the delta: without
    warnings, every function there, LeNet's without register spills."""
    from convnet.device import runtime
    from convnet.device.conv_patch import ConvPatch, has_delta_variants
    names = []
    for passes in (3, 1):
        delta = conv_patch.patch_variants(Geometry.delta(shape), OPTIN) \
            if has_delta_variants(shape, True) else []
        patch = ConvPatch(None, shape, {v.suffix: v for v in conv_patch.patch_variants(
            Geometry.forward(shape), OPTIN, (2, 2))}, {v.suffix: v for v in delta}, passes, (2, 2))
        kernels = patch.kernels()
        src = tmp_path / f"conv_patch_{passes}.cu"
        src.write_text(runtime.specialized_source(conv_patch.SOURCE, [ln for _, ln, _ in kernels]))
        defines = [f"-D{k}={v}" for k, v in shape.defines().items()]
        res = subprocess.run(["nvcc", "-arch=sm_90", "-O3", "-cubin", "-Werror", "all-warnings",
                              "-Xptxas", "-v", *defines, str(src), "-o", str(tmp_path / "x.cubin")],
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        spills = [ln for ln in res.stderr.splitlines() if "spill stores" in ln]
        assert len(spills) == len(kernels)
        if shape == LENET:      # (cifar-conv's activation spills 8 bytes at 128 registers)
            assert all(" 0 bytes spill" in ln for ln in spills), spills
        names += [name for name, _, _ in kernels]
        assert all(name in res.stderr for name, _, _ in kernels)
    assert any("delta" in n for n in names) == has_delta_variants(shape, True)
