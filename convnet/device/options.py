"""How a DeviceBackend runs, apart from the parameters of a control file: the switches that
benchmarks and tests turn (every default is what a run does), and the device it runs on.

    DeviceBackend(arch, DeviceParams(max_batch=512), DeviceOptions(tiled=False))
"""

from dataclasses import dataclass
from typing import Optional

from ..params import DeviceParams, Params


@dataclass(frozen=True)
class DeviceOptions:
    """timing: time launches with CUDA events (CUDA.LOG section 4).
    poison: fill new work buffers with NaN, so that an output a kernel fails to write shows.
    tune: time the candidates of each launch site once per evaluator and keep the fastest
    (False: the first candidate).
    graphs: replay an evaluation's launches as a CUDA graph after its first run.
    split_upload: send host weights in two parts, the second behind the first layers' work.
    The kernel choices (kernel_plan.py): fuse (a conv_small first layer computed with the
    pooling after it), tiled (conv_tiled.cu's kernels as candidates), pool_tiles
    (pool_backward_tiles where pooling windows tile their prior layer), pooled_grad (the first
    layer's weight gradient from the pooled deltas), pool_epilogue (pooling in the epilogue of
    a tiled forward variant), tensor_cores (weight gradients on the tensor cores in split TF32:
    None where kernel_plan's rule says so, True wherever the gather product could take them,
    False nowhere), first_grad (a conv_small first layer's weight gradient from its own deltas
    a position a thread, conv_grad_first: None where first_layer_plan's rule says so, True
    wherever it fits, False never).
    device: the CUDA device's index."""

    timing: bool = True
    poison: bool = False
    tune: bool = True
    graphs: bool = True
    split_upload: bool = True
    fuse: bool = True
    tiled: bool = True
    pool_tiles: bool = True
    pooled_grad: bool = True
    pool_epilogue: bool = True
    tensor_cores: Optional[bool] = None
    first_grad: Optional[bool] = None
    device: int = 0


def device_params(params):
    """The DeviceParams in ``params``: a DeviceParams, a whole Params (its device group), or
    None (the defaults)."""
    if params is None:
        return DeviceParams()
    if isinstance(params, Params):
        return params.device
    if not isinstance(params, DeviceParams):
        raise TypeError(f"device parameters must be a DeviceParams, not {type(params).__name__}")
    return params
