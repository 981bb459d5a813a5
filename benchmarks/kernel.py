"""Kernel variants where they live: every variant of one kernel family validated against the
family's numpy reference (convnet/device/kernels/*_reference.py), then timed.

    python benchmarks/kernel.py --list                  # the families
    python benchmarks/kernel.py gemm_nn                 # every shape, validated, then timed
    python benchmarks/kernel.py conv_fwd --shapes lenet --repeat 50
    python benchmarks/kernel.py gemm_tn --no-timing     # validation only

For each problem shape (a small net and random cases) the device backend runs a gradient and a
criterion evaluation once with the first candidate of every launch site, to find the family's
variants (the tuner's candidates at the family's sites); then, for each variant, once more with
that variant wherever it is a candidate. Every launch of the variant is checked: the device
memory is copied to the host before it, the reference runs on that copy, and each output buffer
(the kernel's parameters named as outputs) must agree with the device's: float32 values to 1e-5
of the output's norm (the tests' tolerance), integers (max-pooling winners) exactly. Then the
launch is repeated --repeat times between CUDA events, and the table shows the median.

The same validation runs on the emulated runtime of the tests (tests/test_kernel_bench.py, with
timing off), so a variant list or a reference that does not fit its launches fails there.
"""

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from convnet.architecture import Architecture  # noqa: E402
from convnet.device import first_layer, kernel_args, launches, tuning  # noqa: E402

FIRST_LAYER_VARIANTS = ("generic", *first_layer.FirstLayerPool.FIXED)
# Each family: the tuner's candidates it owns at a launch site, the prefixes of its functions,
# and the device options and CUDA PRECISION under which the plan gives it launch sites (if not
# the defaults).
_TILED = "tiled_"
_PATCH = "patch_"
FAMILIES = {
    "gemm_nn": dict(sites=("forward", "delta", "forward values", "forward pooled",
                            "forward values pooled"),
                    owns=lambda tile: tile in tuning.NN_TILES, functions=("gemm_nn_",),
                    options=dict(tensor_cores=False)),
    "gemm_nn_split": dict(sites=("forward", "delta", "forward values", "forward pooled",
                                  "forward values pooled"),
                          owns=lambda tile: tile in tuning.NN_SPLIT, functions=("gemm_nn_tc",),
                          options=dict(tensor_cores=True)),
    "gemm_nn_tf32": dict(sites=("forward", "delta", "forward values", "forward pooled",
                                 "forward values pooled"),
                         owns=lambda tile: tile in tuning.NN_TF32, functions=("gemm_nn_tf",),
                         options=dict(tensor_cores=True), precision="TF32"),
    "conv_fwd": dict(sites=("forward", "forward values", "forward pooled",
                            "forward values pooled"),
                     owns=lambda tile: tile.startswith(_TILED),
                     functions=("conv_fwd_",), options=dict(tensor_cores=False)),
    "conv_bwd": dict(sites=("delta",), owns=lambda tile: tile.startswith(_TILED),
                     functions=("conv_bwd_",), options=dict(tensor_cores=False)),
    "gemm_tn": dict(sites=("gradient",), owns=lambda tile: tile in tuning.TN_TILES
                    or tile in tuning.TN_COLS, functions=("gemm_tn_",),
                    options=dict(tensor_cores=False)),
    "gemm_tn_split": dict(sites=("gradient",), owns=lambda tile: tile in tuning.TN_SPLIT,
                          functions=("gemm_tn_tc",), options=dict(tensor_cores=True)),
    "gemm_tn_tf32": dict(sites=("gradient",), owns=lambda tile: tile in tuning.TN_TF32,
                         functions=("gemm_tn_tf",), options=dict(tensor_cores=True),
                         precision="TF32"),
    "conv_grad": dict(sites=("gradient",), owns=lambda tile: tile.startswith(_TILED),
                      functions=("conv_grad_",), options=dict(tensor_cores=False)),
    "conv_patch": dict(sites=("forward", "forward values", "delta"),
                       owns=lambda tile: tile.startswith(_PATCH), functions=("conv_patch",),
                       options=dict(tensor_cores=True)),
    "conv_patch_tf32": dict(sites=("forward", "forward values", "delta"),
                            owns=lambda tile: tile.startswith(_PATCH), functions=("conv_patch",),
                            options=dict(tensor_cores=True), precision="TF32"),
    "conv_small_pool": dict(sites=("forward pooled", "forward pooled values"),
                            owns=lambda tile: tile.split("_v")[0] in FIRST_LAYER_VARIANTS,
                            functions=("conv_small_pool_",)),
    "conv_small_avg": dict(sites=("forward pooled",),
                           owns=lambda tile: tile in FIRST_LAYER_VARIANTS,
                           functions=("conv_small_avg_",)),
    "conv_grad_avg": dict(sites=("gradient",),
                          owns=lambda tile: tile[0] == "g" and tile[1:].isdigit(),
                          functions=("conv_grad_avg_",)),
    "conv_grad_first": dict(sites=("gradient",),
                            owns=lambda tile: tile[0] == "g" and tile[1:].isdigit(),
                            functions=("conv_grad_first_",), options=dict(first_grad=True)),
}

# (layer lines, rows, cols, bands, classes, cases); "small" also runs on the emulation
SHAPES = {
    "small": (["CONVOLUTIONAL LAYER 8 1 1 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
               "CONVOLUTIONAL LAYER 36 1 1 1 1 1 1", "POOLED MAX LAYER 2 2 2 2",
               "FULLY CONNECTED LAYER 24"], 10, 10, 1, 5, 96),
    "strided": (["CONVOLUTIONAL LAYER 16 1 1 0 0 1 1", "CONVOLUTIONAL LAYER 30 1 2 1 1 2 3",
                 "FULLY CONNECTED LAYER 20"], 13, 16, 1, 3, 300),
    "lenet": (["CONVOLUTIONAL LAYER 20 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
               "CONVOLUTIONAL LAYER 50 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
               "FULLY CONNECTED LAYER 500"], 28, 28, 1, 10, 256),
    # the suite's CIFAR-sized net: its second CONV layer's case and deltas fit conv_grad's shared
    # memory once, not twice (one-stage variants)
    "cifar": (["CONVOLUTIONAL LAYER 24 2 2 2 2 1 1", "POOLED MAX LAYER 2 2 2 2",
               "CONVOLUTIONAL LAYER 48 2 2 2 2 1 1", "POOLED MAX LAYER 2 2 2 2",
               "FULLY CONNECTED LAYER 96"], 32, 32, 3, 10, 256),
    # stacked 3 x 3 layers of 12 slices on 28 x 28 (the suite's vgg-mnist): the tiles of one
    # thread across every slice, the delta into prior rows of 28 columns
    "vgg": (["CONVOLUTIONAL LAYER 12 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 12 1 1 1 1 1 1",
             "POOLED MAX LAYER 2 2 2 2", "FULLY CONNECTED LAYER 24"], 28, 28, 1, 10, 256),
    # a first layer with average pooling: a small one (also emulated) and the suite's avgpool-deep
    "avgsmall": (["CONVOLUTIONAL LAYER 12 1 1 1 1 1 1", "POOLED AVERAGE LAYER 2 2 2 2",
                  "FULLY CONNECTED LAYER 6"], 10, 12, 1, 4, 96),
    "avgpool": (["CONVOLUTIONAL LAYER 32 1 1 1 1 1 1", "POOLED AVERAGE LAYER 2 2 2 2",
                 "CONVOLUTIONAL LAYER 64 1 1 1 1 1 1", "FULLY CONNECTED LAYER 64"], 28, 28, 1, 10,
                256),
    # a first layer whose gradient comes from its own deltas (also emulated)
    "firstsmall": (["CONVOLUTIONAL LAYER 12 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 8 1 1 1 1 1 1",
                    "FULLY CONNECTED LAYER 6"], 10, 12, 1, 3, 96),
    # gathered depths of 2 mod 4 (18 and 34 slices: runs of two, the pair variants; also emulated)
    "even": (["CONVOLUTIONAL LAYER 18 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 34 1 1 1 1 1 1",
              "FULLY CONNECTED LAYER 20"], 10, 10, 1, 4, 96),
    # conv_patch.cu's activation and delta (48 slices: whole stages a tap) through padding, on
    # a first layer of 8 slices (also emulated)
    "patch": (["CONVOLUTIONAL LAYER 8 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 48 2 2 2 2 1 1",
               "FULLY CONNECTED LAYER 10"], 9, 9, 1, 4, 96),
    # two wide fully connected layers (the suite's wide-fc)
    "wide": (["FULLY CONNECTED LAYER 1024", "FULLY CONNECTED LAYER 256"], 28, 28, 1, 10, 256),
}

# Kernel parameters that a kernel writes, and their element type (a buffer that is only read
# compares equal on both sides).
OUTPUTS = {"out": np.float32, "part": np.float32, "pout": np.float32, "ids": np.int32,
           "pids": np.int32, "frag": np.float32}
TOLERANCE = 1e-5


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("family", nargs="?", help="the kernel family (see --list)")
    ap.add_argument("--list", action="store_true", help="name the families and exit")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="problem shapes: "
                    + ", ".join(SHAPES))
    ap.add_argument("--repeat", type=int, default=20, help="timed launches per variant")
    ap.add_argument("--no-timing", action="store_true", help="validate only")
    return ap.parse_args(argv)


# ------------------------------------------------------------------ the device memory, mirrored
class Mirror:
    """Every device allocation made while it watches, and a host copy of them all (HostMemory)
    on which the references run; device pointers map to host pointers at the same offset."""

    def __init__(self, rt):
        from convnet.device.kernels.host_memory import HostMemory
        self.rt = rt
        self.host = HostMemory()
        self.buffers = []           # (device address, bytes, host allocation)
        self.specialized = {}
        self._alloc = rt.alloc
        self._specialize = rt.specialize

    def __enter__(self):
        self.rt.alloc = self.alloc
        self.rt.specialize = self.specialize
        return self

    def __exit__(self, *exc):
        self.rt.alloc = self._alloc
        self.rt.specialize = self._specialize

    def alloc(self, nbytes):
        buf = self._alloc(nbytes)
        self.buffers.append((int(buf), max(int(nbytes), 16), self.host.alloc(max(int(nbytes), 16))))
        return buf

    def specialize(self, name, defines, kernels):
        from convnet.device.kernels.reference import specializations
        self.specialized.update(specializations(defines, kernels))
        return self._specialize(name, defines, kernels)

    def find(self, address):
        for base, nbytes, host in self.buffers:
            if base <= address < base + nbytes:
                return base, nbytes, host
        return None

    def to_host(self, address):
        found = self.find(address)
        return address if found is None else int(found[2]) + address - found[0]

    def pull(self):
        """Copy every device allocation into its host mirror."""
        self.rt.stream.synchronize()
        for base, nbytes, host in self.buffers:
            self.rt.cuda.memcpy_dtoh(self.host.view(host, np.uint8, nbytes), base)

    def device_bytes(self, address):
        """The device's bytes from address to the end of its allocation."""
        base, nbytes, _ = self.find(address)
        out = np.empty(base + nbytes - address, np.uint8)
        self.rt.stream.synchronize()
        self.rt.cuda.memcpy_dtoh(out, address)
        return out

    def host_bytes(self, address):
        base, nbytes, host = self.find(address)
        return self.host.view(int(host) + address - base, np.uint8, base + nbytes - address)


def _params_of(name):
    """The KernelParams of a kernel function."""
    for prefix, params in (("gemm_nn_", kernel_args.GEMM_NN), ("gemm_tn_", kernel_args.GEMM_TN),
                           ("conv_fwd_pool_", kernel_args.CONV_FWD_POOL),
                           ("conv_fwd_", kernel_args.CONV_FWD), ("conv_bwd_", kernel_args.CONV_BWD),
                           ("conv_grad_avg_", kernel_args.CONV_GRAD_AVG),
                           ("conv_grad_first_", kernel_args.CONV_GRAD_FIRST),
                           ("conv_small_avg_", kernel_args.CONV_SMALL_AVG),
                           ("conv_grad_", kernel_args.CONV_GRAD),
                           ("conv_small_pool_", kernel_args.CONV_SMALL_POOL),
                           ("conv_patch_delta_weights_", kernel_args.CONV_PATCH_DELTA_WEIGHTS),
                           ("conv_patch_weights_", kernel_args.CONV_PATCH_WEIGHTS),
                           ("conv_patch_delta_", kernel_args.CONV_PATCH_DELTA),
                           ("conv_patch_", kernel_args.CONV_PATCH)):
        if name.startswith(prefix):
            return params
    raise KeyError(name)


# ------------------------------------------------------------------ checking and timing launches
class Checker:
    """Wraps rt.launch: each launch of the family made while `active` is set is checked against
    the reference on the mirror, and timed."""

    def __init__(self, rt, mirror, family, repeat, timing):
        from convnet.device.kernels.reference import ReferenceKernels
        self.rt, self.mirror, self.family = rt, mirror, family
        self.reference = ReferenceKernels(mirror.host)
        self.repeat, self.timing = repeat, timing
        self.active = False
        self.results = []           # (function, worst relative error, median ms or None)
        self._launch = rt.launch

    def __enter__(self):
        self.rt.launch = self.launch
        return self

    def __exit__(self, *exc):
        self.rt.launch = self._launch

    def launch(self, name, grid, block, *args, shared=0):
        if not (self.active and name.startswith(FAMILIES[self.family]["functions"])):
            return self._launch(name, grid, block, *args, shared=shared)
        self.mirror.pull()
        self._launch(name, grid, block, *args, shared=shared)
        host_args = [self.mirror.to_host(int(a)) if isinstance(a, np.uintp) else a for a in args]
        self.reference.launch(name, grid, block, host_args, shared, self.mirror.specialized)
        error = self._compare(name, args)
        ms = self._time(name, grid, block, args, shared) if self.timing else None
        self.results.append((name, error, ms))

    def _compare(self, name, args):
        """The worst relative error over the launch's outputs (AssertionError past TOLERANCE)."""
        worst = 0.0
        for param, value in zip(_params_of(name).names, args):
            dtype = OUTPUTS.get(param)
            if dtype is None or not int(value):
                continue
            device = self.mirror.device_bytes(int(value))
            count = device.size // np.dtype(dtype).itemsize * np.dtype(dtype).itemsize
            device = device[:count].view(dtype)
            host = self.mirror.host_bytes(int(value))[:count].view(dtype)
            if dtype is np.int32:
                assert np.array_equal(device, host), f"{name}: {param} differs from the reference"
                continue
            finite = np.isfinite(host)
            assert np.array_equal(finite, np.isfinite(device)), f"{name}: {param} not written"
            scale = max(float(np.linalg.norm(host[finite].astype(np.float64))), 1e-30)
            error = float(np.linalg.norm((device[finite] - host[finite]).astype(np.float64))) / scale
            assert error <= TOLERANCE, f"{name}: {param} off the reference by {error:.2e}"
            worst = max(worst, error)
        return worst

    def _time(self, name, grid, block, args, shared):
        cuda, stream = self.rt.cuda, self.rt.stream
        times = []
        for _ in range(self.repeat):
            start, stop = cuda.Event(), cuda.Event()
            start.record(stream)
            self._launch(name, grid, block, *args, shared=shared)
            stop.record(stream)
            stop.synchronize()
            times.append(stop.time_since(start))
        return statistics.median(times)


class ForcedTuner(tuning.Tuner):
    """A tuner that takes `variant` wherever it is a candidate (else the first candidate),
    telling the checker when the variant's launches run; with variant None it records every
    site's candidates."""

    def __init__(self, rt, variant=None, checker=None):
        super().__init__(rt, False)
        self.variant, self.checker = variant, checker
        self.candidates = {}        # site -> candidates

    def run(self, site, candidates, work, launch):
        self.candidates[site] = list(candidates)
        tile = self.variant if self.variant in candidates else candidates[0]
        if self.checker is not None:
            self.checker.active = tile == self.variant
        try:
            launch(tile)
        finally:
            if self.checker is not None:
                self.checker.active = False
        return tile


# ------------------------------------------------------------------ the problems
def problem(shape, seed=0):
    lines, rows, cols, bands, n_classes, n_cases = SHAPES[shape]
    arch = Architecture.from_lines(lines, rows, cols, bands, n_classes)
    rng = np.random.default_rng(seed)
    return (arch, rng.uniform(-1, 1, (n_cases, bands, rows, cols)),
            rng.integers(0, n_classes, n_cases), rng.normal(0, 0.3, arch.n_weights))


def _evaluate(ev, tuner, weights):
    ev.tuner = tuner
    ev.gradient(weights)
    ev.criterion(weights)


def variants_of(family, candidates):
    """The family's variants among the candidates seen at each launch site, in order."""
    spec = FAMILIES[family]
    found = []
    for site, tiles in candidates.items():
        if site[0] in spec["sites"]:
            found += [t for t in tiles if spec["owns"](t) and t not in found]
    return found


def run_shape(family, shape, repeat, timing):
    """[(shape, variant, launches checked, worst error, median ms)] of one problem shape."""
    from convnet.device.backend import DeviceBackend
    from convnet.device.options import DeviceOptions
    from convnet.device.runtime import Runtime
    from convnet.params import DeviceParams
    arch, inputs, classes, weights = problem(shape)
    rt = Runtime.get(0)
    options = DeviceOptions(timing=False, graphs=False, split_upload=False, tune=False,
                            **FAMILIES[family].get("options", {}))
    rows = []
    with Mirror(rt) as mirror:
        params = DeviceParams(precision=FAMILIES[family].get("precision", "FLOAT32"))
        ev = DeviceBackend(arch, params, options).evaluator(inputs, classes, 0.01)
        seen = ForcedTuner(rt)
        _evaluate(ev, seen, weights)
        for variant in variants_of(family, seen.candidates):
            with Checker(rt, mirror, family, repeat, timing) as checker:
                _evaluate(ev, ForcedTuner(rt, variant, checker), weights)
            if checker.results:
                errors = [e for _, e, _ in checker.results]
                times = [ms for *_, ms in checker.results if ms is not None]
                rows.append((shape, variant, len(errors), max(errors),
                             statistics.median(times) if times else None))
    return rows


def main(argv=None):
    args = parse_args(argv)
    if args.list or not args.family:
        for name, spec in FAMILIES.items():
            print(f"{name:16s} functions {', '.join(spec['functions'])}* at the "
                  f"{', '.join(spec['sites'])} sites")
        return []
    if args.family not in FAMILIES:
        raise SystemExit(f"unknown family {args.family!r}: see --list")
    rows = []
    for shape in filter(None, args.shapes.split(",")):
        rows += run_shape(args.family, shape, args.repeat, not args.no_timing)
    print(f"{'Shape':10s}{'Variant':34s}{'Launches':>9s}{'Max rel err':>13s}{'Median ms':>11s}")
    for shape, variant, count, error, ms in rows:
        timed = f"{ms:11.4f}" if ms is not None else f"{'-':>11s}"
        print(f"{shape:10s}{variant:34s}{count:9d}{error:13.2e}{timed}")
    return rows


if __name__ == "__main__":
    main()
