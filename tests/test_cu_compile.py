"""Every CUDA kernel file builds with nvcc (no GPU needed; skipped where nvcc is absent)."""

import glob
import os
import re
import shutil
import subprocess

import pytest

from convnet.device import kernel_args, launches, runtime, tuning

KERNELS = sorted(glob.glob(os.path.join(runtime.KERNEL_DIR, "*.cu")))
NVCC = shutil.which("nvcc")


def test_kernel_list_matches_the_folder():
    assert sorted(os.path.basename(p) for p in KERNELS) == sorted(runtime.KERNEL_FILES)


def test_kernel_constants_match_the_host():
    """A constant both sides use (#define NAME in a kernel file, NAME in launches.py) has one
    value: the launches size blocks and shared memory by what the kernels assume."""
    shared = 0
    for path in KERNELS:
        with open(path) as f:
            for name, value in re.findall(r"^#define (\w+) (\d+)\s*$", f.read(), re.M):
                if hasattr(launches, name):
                    assert getattr(launches, name) == int(value), (os.path.basename(path), name)
                    shared += 1
    assert shared >= 4          # CONV_SMALL_THREADS and conv_grad_pooled's three


# the kernel files nvcc builds in a second or so (the fast subset); the others are slow
QUICK_KERNELS = ("output.cu", "pool.cu", "weights.cu", "minibatch.cu")


@pytest.mark.skipif(NVCC is None, reason="nvcc not found")
@pytest.mark.parametrize("path", [
    pytest.param(p, marks=() if os.path.basename(p) in QUICK_KERNELS else pytest.mark.slow)
    for p in KERNELS], ids=[os.path.basename(p) for p in KERNELS])
def test_kernel_file_compiles(path, tmp_path):
    out = tmp_path / (os.path.basename(path) + ".ptx")
    cmd = [NVCC, "-arch=sm_90", "-O3", "-ptx", "-Werror", "all-warnings", "-I", runtime.KERNEL_DIR,
           path, "-o", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    ptx = out.read_text()
    # every kernel the backend launches from this file is there
    mod = os.path.basename(path)
    products = [f"gemm_{kind}_{t}" for kind, tiles in
                (("nn", [*tuning.NN_TILES, *tuning.NN_TENSOR]),
                 ("tn", [*tuning.tn_tiles(), *tuning.TN_TENSOR])) for t in tiles]
    by_file = {}
    for p in products:
        by_file.setdefault(tuning.tile_source(p.split("_", 2)[2]), []).append(p)
    wanted = {**by_file,
              "conv_small.cu": [f"conv_small_{n}" for n in kernel_args.CONV_SMALL_WIDTHS]
              + ["conv_grad_pooled"],
              "conv_tiled.cu": ["conv_fwd_c2_m8_n8_b4", "conv_bwd_c3"],
              "conv_patch.cu": ["conv_patch_weights", "conv_patch_r8_c2_w32x56_n56"],
              "pool.cu": ["pool_forward", "pool_backward", "pool_backward_tiles"],
              "output.cu": ["softmax_ll", "ll_sum"],
              "weights.cu": ["weights_scatter", "grad_flatten", "grad_finish", "line_point",
                             "vec_step", "vec_direction", "vec_neg",
                             "vec_sums", "vec_finish"],
              "minibatch.cu": ["minibatch_gather", "minibatch_gather_shifted", "minibatch_update",
                               "minibatch_advance"]}[mod]
    assert wanted, mod
    for name in wanted:
        assert f".entry {name}(" in ptx, f"{name} missing from {mod}"


@pytest.mark.slow
@pytest.mark.skipif(NVCC is None, reason="nvcc not found")
def test_kernel_source_as_loaded_compiles(tmp_path):
    """The backend inlines the headers into each file; that text must build on its own."""
    for name in runtime.KERNEL_FILES:
        src = tmp_path / name
        src.write_text(runtime.kernel_source(name))
        res = subprocess.run([NVCC, "-arch=sm_90", "-ptx", str(src), "-o", str(tmp_path / "x.ptx")],
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr


class HOPPER:
    """What ConvTiled asks of the runtime before it builds anything."""
    shared_optin = 227 * 1024


@pytest.mark.skipif(NVCC is None, reason="nvcc not found")
@pytest.mark.parametrize("lines,rows,cols,bands", [
    (["CONVOLUTIONAL LAYER 20 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
      "CONVOLUTIONAL LAYER 50 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2"], 28, 28, 1),
    (["CONVOLUTIONAL LAYER 37 1 2 1 1 2 1", "CONVOLUTIONAL LAYER 41 2 1 1 0 2 1"], 12, 11, 3),
    (["CONVOLUTIONAL LAYER 8 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 37 2 1 2 1 1 1"], 9, 7, 2),
])
@pytest.mark.slow
def test_specialized_kernels_compile(lines, rows, cols, bands, tmp_path):
    """conv_tiled.cu as the runtime builds it for real layer shapes (on a device that lets a block
    opt in to 227 KB of shared memory, so every variant): without warnings, no register spills,
    and every variant conv_tiled.py would launch is there."""
    from convnet.architecture import Architecture
    from convnet.device.conv_tiled import SOURCE
    from convnet.device.conv_tiled_launch import ConvTiled
    from convnet.device.kernel_plan import tiled_variants
    from convnet.device.layout import pad32
    arch = Architecture.from_lines(lines, rows, cols, bands, 3)
    built = 0
    for layer in arch.layers:
        if not layer.kind.shares_weights:
            continue
        nxt = arch.layers[layer.index + 1] if layer.index + 1 < len(arch.layers) else None
        pool = (nxt.spec.width_v, nxt.spec.width_h) if nxt and nxt.kind.keeps_winners else None
        ct = ConvTiled(HOPPER, tiled_variants(layer, pad32(layer.depth), HOPPER.shared_optin, pool))
        if not ct.fwd and not ct.bwd:
            continue
        src = tmp_path / f"conv_tiled_{layer.index}.cu"
        src.write_text(runtime.specialized_source(SOURCE, [line for _, line, _ in ct.kernels()]))
        out = tmp_path / f"conv_tiled_{layer.index}.cubin"
        defines = [f"-D{k}={v}" for k, v in ct.shape.defines().items()]
        res = subprocess.run([NVCC, "-arch=sm_90", "-O3", "-cubin", "-Werror", "all-warnings",
                              "-Xptxas", "-v", *defines, str(src), "-o", str(out)],
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        for name, _, _ in ct.kernels():
            assert name in res.stderr, name
        if ct.shape.tag.startswith("12x12x20_5x5"):        # LeNet's second layer: no spills
            spills = [ln for ln in res.stderr.splitlines() if "spill stores" in ln]
            assert len(spills) == len(ct.kernels()) and ct.bwd and ct.grad and ct.pool
            assert all(" 0 bytes spill stores" in ln for ln in spills), spills
        built += 1
    assert built


@pytest.mark.slow
@pytest.mark.skipif(NVCC is None, reason="nvcc not found")
def test_fixed_first_layer_kernels_compile(tmp_path):
    """conv_small.cu as the runtime builds it for LeNet's first layer and its pooling
    (FirstLayerPool's conv_small_pool_fixed variants, with the winners and without them): without
    warnings, every variant there, and no register spills."""
    from convnet.architecture import Architecture
    from convnet.device.first_layer import FirstLayerPool
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 20 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
                                    "FULLY CONNECTED LAYER 5"], 28, 28, 1, 10)
    first = FirstLayerPool(HOPPER, arch.layers[0], arch.layers[1], 20)
    kernels = first.kernels()
    assert [p.family for _, _, p in kernels] == ["conv_small_pool_fixed", "conv_small_pool_values"] * 3
    src = tmp_path / "conv_small_fixed.cu"
    src.write_text(runtime.specialized_source("conv_small.cu", [line for _, line, _ in kernels]))
    res = subprocess.run([NVCC, "-arch=sm_90", "-O3", "-cubin", "-Werror", "all-warnings",
                          "-Xptxas", "-v", str(src), "-o", str(tmp_path / "x.cubin")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    for name, _, _ in kernels:
        assert name in res.stderr, name
    # the eager kernels are left out of a specialized build
    assert "conv_small_pool_20'" not in res.stderr and "conv_small_8'" not in res.stderr
    spills = [ln for ln in res.stderr.splitlines() if "spill stores" in ln]
    assert all(" 0 bytes spill stores" in ln for ln in spills), spills
