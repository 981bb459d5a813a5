"""The kernel cache: cubins by content, units of a kernel file, the files a net needs, and the
line CUDA.LOG prints (no GPU needed; the nvcc test is skipped where nvcc is absent)."""

import os
import re
import shutil
import threading

import pytest

from convnet.architecture import Architecture
from convnet.device import kernel_cache, runtime
from convnet.device.kernel_cache import CompileJob, KernelCache, split_units
from convnet.device.kernel_plan import plan_kernels


class CountingCompiler:
    """A compiler whose 'cubin' is a digest of what it was given; counts its calls."""

    def __init__(self):
        self.calls = []
        self.lock = threading.Lock()

    def __call__(self, text, options, arch):
        with self.lock:
            self.calls.append((text, options, arch))
        return f"{arch}|{' '.join(options)}|{len(text)}|{hash(text)}".encode()


def make_cache(tmp_path, compiler, version="nvcc 13.0"):
    return KernelCache(str(tmp_path / "kernels"), compiler, lambda: version, workers=4)


def jobs(*texts, options=("-O3",), arch="sm_90"):
    return [CompileJob(t, options, arch) for t in texts]


def test_a_second_build_reads_every_cubin_from_the_folder(tmp_path):
    compiler = CountingCompiler()
    first = make_cache(tmp_path, compiler)
    built = first.build(jobs("a", "b", "c"))
    assert len(compiler.calls) == 3
    assert (first.stats.compiled, first.stats.cached) == (3, 0)
    second = make_cache(tmp_path, compiler)         # a new process: only the folder is shared
    assert second.build(jobs("a", "b", "c")) == built
    assert len(compiler.calls) == 3
    assert (second.stats.compiled, second.stats.cached) == (0, 3)
    assert not [f for f in os.listdir(first.folder) if not f.endswith(".cubin")]


@pytest.mark.parametrize("change", ["text", "options", "arch", "compiler"])
def test_anything_that_decides_the_bits_is_a_new_key(tmp_path, change):
    compiler = CountingCompiler()
    make_cache(tmp_path, compiler).build(jobs("kernel"))
    job = {"text": jobs("kernel2"), "options": jobs("kernel", options=("-O3", "-DX=1")),
           "arch": jobs("kernel", arch="sm_80"), "compiler": jobs("kernel")}[change]
    cache = make_cache(tmp_path, compiler, "nvcc 13.1" if change == "compiler" else "nvcc 13.0")
    cache.build(job)
    assert len(compiler.calls) == 2 and cache.stats.compiled == 1
    assert len(os.listdir(cache.folder)) == 2


def test_only_the_missing_units_are_compiled(tmp_path):
    compiler = CountingCompiler()
    make_cache(tmp_path, compiler).build(jobs("a", "b"))
    cache = make_cache(tmp_path, compiler)
    out = cache.build(jobs("b", "c", "a", "d"))
    assert [c[0] for c in compiler.calls[2:]] in (["c", "d"], ["d", "c"])
    assert out == [compiler("b", ("-O3",), "sm_90"), compiler("c", ("-O3",), "sm_90"),
                   compiler("a", ("-O3",), "sm_90"), compiler("d", ("-O3",), "sm_90")]
    assert (cache.stats.compiled, cache.stats.cached) == (2, 2)


def test_a_forgotten_or_empty_file_is_compiled_again(tmp_path):
    compiler = CountingCompiler()
    cache = make_cache(tmp_path, compiler)
    job = jobs("a")[0]
    cache.build([job])
    cache.forget(job)
    cache.build([job])
    with open(cache.path(job), "wb"):
        pass                                          # an empty file is no cubin
    cache.build([job])
    assert len(compiler.calls) == 3


def test_a_failed_compilation_stores_nothing(tmp_path):
    def failing(text, options, arch):
        raise kernel_cache.KernelBuildError("nvcc failed: kernel.cu(3): error")
    cache = make_cache(tmp_path, failing)
    with pytest.raises(kernel_cache.KernelBuildError, match="kernel.cu"):
        cache.build(jobs("bad"))
    assert not os.path.exists(cache.folder) or not os.listdir(cache.folder)


def test_the_folder_follows_the_environment(tmp_path):
    assert kernel_cache.cache_folder({"CONVNET_CACHE_DIR": "/c", "XDG_CACHE_HOME": "/x"}) == \
        os.path.join("/c", "kernels")
    assert kernel_cache.cache_folder({"XDG_CACHE_HOME": "/x"}) == \
        os.path.join("/x", "convnet", "kernels")
    assert kernel_cache.cache_folder({}).endswith(os.path.join(".cache", "convnet", "kernels"))


def test_the_cuda_log_line_says_cache_or_build(tmp_path):
    compiler = CountingCompiler()
    cache = make_cache(tmp_path, compiler)
    cache.build(jobs("a", "b"))
    assert re.fullmatch(r"Kernels: 2 modules, 0 from the cache and 2 compiled with nvcc "
                        r"\(4 at a time\) in \d+\.\d\d s; cache .*kernels", cache.stats.line())
    again = make_cache(tmp_path, compiler)
    again.build(jobs("a", "b"))
    assert re.fullmatch(r"Kernels: 2 modules from the cache \(.*kernels\), \d+\.\d\d s",
                        again.stats.line())


# ------------------------------------------------------------------ units of a kernel file
def _instantiations(text):
    return kernel_cache.INSTANTIATION.findall(text)


@pytest.mark.parametrize("name", ["gemm.cu", "conv_small.cu"])
def test_a_file_of_instantiations_is_split_keeping_every_line_once(name):
    text = runtime.kernel_source(name)
    units = split_units(text)
    lines = _instantiations(text)
    assert len(units) == -(-len(lines) // kernel_cache.LINES_PER_UNIT) > 1
    kept = [line for unit in units for line in _instantiations(unit)]
    assert sorted(kept) == sorted(lines)
    for unit in units:
        # the rest of the text is the file's, line for line
        assert unit.count("\n") == text.count("\n")
        u, t = unit.splitlines(), text.splitlines()
        assert [a for a, b in zip(u, t) if a != b] == [""] * sum(a != b for a, b in zip(u, t))
        assert [b for a, b in zip(u, t) if a != b] == [ln for ln in lines if ln not in u]


def test_a_file_with_a_plain_kernel_stays_whole():
    for name in ("weights.cu", "pool.cu", "output.cu"):
        text = runtime.kernel_source(name)
        assert split_units(text) == [text]


def test_a_specialised_build_groups_its_appended_lines():
    base = runtime.specialized_source("conv_tiled.cu", ())
    lines = tuple(f"CONV_BWD(conv_bwd_{k}, 2, 1, 128, 2)" for k in range(6))
    units = split_units(base, lines, per_unit=4)
    assert [_instantiations(u[len(base):]) for u in units] == [list(lines[:4]), list(lines[4:])]
    assert all(u.startswith(base) for u in units)


def test_the_split_keeps_every_function_the_runtime_loads():
    names, files = runtime._function_files()
    for source, functions in files.items():
        units = split_units(runtime.kernel_source(source))
        for fname, _ in functions:
            if source.startswith("gemm"):
                holders = [u for u in units if re.search(rf"^\w+\({fname},", u, re.M)]
                assert len(holders) == 1, fname
            assert names[fname] == source


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
def test_nvcc_builds_a_unit_once(tmp_path):
    cache = KernelCache(str(tmp_path), workers=2)
    job = CompileJob(runtime.kernel_source("output.cu"), ("-O3",), "sm_90")
    cubin, = cache.build([job])
    assert cubin[:4] == b"\x7fELF"
    assert KernelCache(str(tmp_path)).build([job]) == [cubin]
    with open(cache.path(job), "rb") as f:
        assert f.read() == cubin


# ------------------------------------------------------------------ the files a net needs
def _arch(lines, rows, cols, classes):
    from convnet.control import parse_line
    specs = [parse_line(text, "t.ctl", 1).args["spec"] for text in lines]
    return Architecture(specs, rows, cols, 1, classes)


def test_a_fully_connected_net_needs_no_convolution_or_pooling_file():
    arch = _arch(["FULLY CONNECTED LAYER 8"], 6, 6, 3)
    assert plan_kernels(arch).kernel_files() == ("gemm.cu", "gemm_async.cu", "gemm_split.cu",
                                                  "output.cu", "weights.cu")


def test_the_tensor_cores_file_follows_the_precision():
    """Split TF32's variants for a FLOAT32 plan with tensor-core steps, the one-product twins
    for TF32, neither when no step takes the tensor cores; each file holds only its family."""
    from convnet.device.options import DeviceOptions
    arch = _arch(["FULLY CONNECTED LAYER 8"], 6, 6, 3)
    tf32 = plan_kernels(arch, precision="TF32").kernel_files()
    assert "gemm_tf32.cu" in tf32 and "gemm_split.cu" not in tf32
    off = plan_kernels(arch, DeviceOptions(tensor_cores=False)).kernel_files()
    assert not {"gemm_split.cu", "gemm_tf32.cu"} & set(off)
    for name, prefix in (("gemm_split.cu", "_tc"), ("gemm_tf32.cu", "_tf")):
        lines = [ln for ln in runtime.kernel_source(name).splitlines()
                 if ln.startswith("GEMM_") and "(" in ln]
        assert lines and all(prefix in ln.split(",")[0] for ln in lines), name


def test_a_convolutional_net_with_pooling_needs_their_files():
    arch = _arch(["CONVOLUTIONAL LAYER 6 1 1 1 1 1 1", "POOLED MAX LAYER 2 2 2 2",
                  "FULLY CONNECTED LAYER 4"], 12, 12, 6)
    files = plan_kernels(arch).kernel_files()
    assert {"conv_small.cu", "pool.cu", "output.cu", "weights.cu"} <= set(files)
    assert set(files) <= set(runtime.EAGER_FILES)


# ------------------------------------------------------------------ the runtime's use of it
class _LogicError(Exception):
    pass


class _DriverError(Exception):
    pass


class _Function:
    def __init__(self, name):
        self.name, self.signature, self.attributes = name, None, {}

    def prepare(self, signature):
        self.signature = signature

    def set_attribute(self, key, value):
        self.attributes[key] = value


class _Module:
    """A 'module' whose functions are the names in its cubin (the fake compiler's text)."""

    def __init__(self, cubin):
        self.text = cubin.decode()

    def get_function(self, name):
        if not re.search(rf"\b{name}\b", self.text):
            raise _LogicError(name)
        return _Function(name)


class _Cuda:
    LogicError, Error = _LogicError, _DriverError

    class function_attribute:
        MAX_DYNAMIC_SHARED_SIZE_BYTES = "max dynamic shared"

    def __init__(self):
        self.loads = 0
        self.refuse = set()

    def module_from_buffer(self, cubin):
        self.loads += 1
        if cubin in self.refuse:
            self.refuse.discard(cubin)
            raise _DriverError("device kernel image is invalid")
        return _Module(cubin)


def fake_runtime(tmp_path):
    """A Runtime without a GPU: its driver and compiler are fakes; the compiler's 'cubin' is the
    unit's text with the names of the functions its instantiation lines make."""
    import contextlib
    rt = runtime.Runtime.__new__(runtime.Runtime)
    rt.cuda, rt.arch = _Cuda(), "sm_90"
    compiler = CountingCompiler()

    def compile_names(text, options, arch):
        compiler(text, options, arch)
        names = re.findall(r"^[A-Z_]+\((\w+)", text, re.M)
        for macro, width in re.findall(r"^(CONV_SMALL(?:_POOL)?)\((\d+)\)", text, re.M):
            names.append(f"{macro.lower()}_{width}")
        names += re.findall(r'^extern "C" __global__ void(?: __launch_bounds__\([^)]*\))? (\w+)\(',
                            text, re.M)
        return " ".join(names).encode()
    rt.cache = KernelCache(str(tmp_path), compile_names, lambda: "nvcc 13.0", workers=4)
    rt.modules, rt.functions = {}, {}
    rt.function_files, rt.file_functions = runtime._function_files()
    rt.shared_needs = runtime._shared_needs()
    rt.active = contextlib.nullcontext
    return rt, compiler


def test_the_runtime_builds_the_files_asked_for_and_the_rest_on_first_use(tmp_path):
    rt, compiler = fake_runtime(tmp_path)
    rt.prepare(["gemm.cu", "output.cu"])
    gemm = [name for name, _ in rt.file_functions["gemm.cu"]]
    assert set(gemm) | {"softmax_ll", "ll_sum"} == set(rt.functions)
    assert len(compiler.calls) == len(split_units(runtime.kernel_source("gemm.cu"))) + 1
    rt.prepare(["gemm_async.cu"])
    needs = runtime._shared_needs()["gemm_async.cu"]
    assert needs and all(rt.functions[name].attributes == {"max dynamic shared": nbytes}
                         for name, nbytes in needs)
    compiler.calls.clear()
    assert rt.function("pool_forward").name == "pool_forward"        # pool.cu, built now
    assert "pool.cu" in rt.modules and len(compiler.calls) == 1
    rt.prepare(["gemm.cu", "pool.cu"])                                # nothing new
    assert len(compiler.calls) == 1
    with pytest.raises(KeyError):
        rt.function("no_such_kernel")


def test_a_specialisation_is_built_once_and_read_from_the_cache_after(tmp_path):
    from convnet.device.kernel_args import CONV_BWD
    kernels = [(f"conv_bwd_t{k}", f"CONV_BWD(conv_bwd_t{k}, 2, 1, 128, 2)", CONV_BWD)
               for k in range(6)]
    rt, compiler = fake_runtime(tmp_path)
    rt.prepare(specialized=[("conv_tiled.cu", {"CT_PH": 12}, kernels)])
    rt.specialize("conv_tiled.cu", {"CT_PH": 12}, kernels)
    assert len(compiler.calls) == 2                                   # 6 lines, 4 a unit
    assert all("-DCT_PH=12" in c[1] for c in compiler.calls)
    assert {f"conv_bwd_t{k}" for k in range(6)} <= set(rt.functions)
    again, compiler2 = fake_runtime(tmp_path)                         # a later process
    again.specialize("conv_tiled.cu", {"CT_PH": 12}, kernels)
    assert compiler2.calls == [] and again.cache.stats.cached == 2
    assert again.build_line().startswith("Kernels: 2 modules from the cache")


def test_a_cubin_the_driver_refuses_is_compiled_again(tmp_path):
    rt, compiler = fake_runtime(tmp_path)
    rt.prepare(["output.cu"])
    later, compiler2 = fake_runtime(tmp_path)
    job = later._jobs("output.cu")[0]
    later.cuda.refuse.add(later.cache.build([job])[0])
    later.prepare(["output.cu"])
    assert len(compiler2.calls) == 1 and "softmax_ll" in later.functions
