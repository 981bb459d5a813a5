"""Every family's numpy reference together, and a kernel launch by its function name: what the
emulated runtime of the tests runs, and what benchmarks/kernel.py compares each variant with."""

import numpy as np

from .conv_patch_reference import ConvPatchReference
from .conv_small_reference import ConvSmallReference
from .conv_tiled_reference import ConvTiledReference
from .gemm_reference import GemmReference
from .host_memory import Alloc
from .minibatch_reference import MiniBatchReference
from .output_reference import OutputReference
from .weights_reference import WeightsReference


class ReferenceKernels(ConvPatchReference, GemmReference, ConvSmallReference, ConvTiledReference,
                       OutputReference, WeightsReference, MiniBatchReference):
    """The references of every kernel family, over one HostMemory."""

    def launch(self, name, grid, block, args, shared=0, specialized=None):
        """Run the reference of kernel function `name` as launched with this grid, block,
        arguments (ints and floats; pointers as ints into the HostMemory) and shared memory.
        specialized: {function name: (family, CT_* constants without the prefix, variant
        constants)} of the functions built from an instantiation line (Runtime.specialize)."""
        args = [_plain(a) for a in args]
        if specialized and name in specialized:
            family, constants, variant = specialized[name]
            getattr(self, family)(constants, variant, grid, block, shared, *args)
        elif name == "conv_grad_pooled":
            self.conv_grad_pooled(grid, block, shared, *args)
        elif name.startswith("conv_small_avg_"):
            self.conv_small_avg(int(name[15:]), grid, block, shared, *args)
        elif name.startswith("conv_small_pool_"):
            self.conv_small_pool(int(name[16:]), grid, block, shared, *args)
        elif name.startswith("conv_small_"):
            self.conv_small(int(name[11:]), grid, block, shared, *args)
        elif name.startswith("gemm_nn_"):
            self.gemm_nn(name[8:], grid, block, *args)
        elif name.startswith("gemm_tn_"):
            self.gemm_tn(name[8:], grid, block, *args, shared=shared)
        else:
            getattr(self, name)(grid, block, *args)


def specializations(defines, kernels):
    """{function name: (family, constants, variant constants)} of the functions a
    Runtime.specialize call builds: defines {CT_NAME: value} (the prefix dropped), and each
    instantiation line "FAMILY(name, constant, ...)" of kernels [(name, line, KernelParams)]."""
    constants = {key[3:]: int(value) for key, value in defines.items()}
    found = {}
    for name, line, params in kernels:
        args = [a.strip() for a in line[line.index("(") + 1:line.rindex(")")].split(",")]
        assert line.startswith(params.family.upper() + "(") and args[0] == name
        found[name] = (params.family, constants, tuple(int(a) for a in args[1:]))
    return found


def _plain(value):
    """A launch argument as the references take it: an allocation as its address, a numpy
    scalar as a Python number."""
    if isinstance(value, Alloc):
        return int(value)
    if isinstance(value, np.generic):
        return value.item()
    return value
