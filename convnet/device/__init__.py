"""The CUDA compute path (PyCUDA kernels, float32 on the device).

Importing this package needs no PyCUDA: it is imported by :mod:`convnet.device.runtime` only when
a :class:`~convnet.device.backend.DeviceBackend` is made or a device is asked about.

    from convnet.device import device_available, device_report
    ok, why = device_available()        # (True, "") or (False, the reason)
    lines = device_report()             # raises DeviceUnavailable (a ConvnetError) when none

The modules, by job:
    runtime.py      CUDA context, stream and kernel build, one per device
    kernel_args.py  every kernel's parameters by name (and PyCUDA's signature from them)
    tuning.py       tile shapes of the gather products and the timer that picks them
    options.py      DeviceOptions: the switches of tests and benchmarks, and the device
    kernel_plan.py  which kernel family computes each step, the variants, launch splits and
                    every device byte (numpy; no GPU needed)
    backend.py      DeviceBackend: parameters, kernels, index tables and weight upload
    workspace.py    per-batch device buffers, as the kernel plan counts them
    evaluator.py    DeviceEvaluator: the order of launches of a criterion / gradient / outputs
    launches.py     grid shapes and arguments of each kernel launch
    plan.py, layout.py  index tables and weight layouts (numpy; no GPU needed)
    kernels/        the CUDA sources, each family with its numpy reference beside it
"""


def device_available(device=0):
    """(True, "") when a CUDA device is usable, else (False, why not)."""
    from .runtime import device_available as _available
    return _available(device)


def device_report(device=0):
    """Lines about the CUDA device; raises DeviceUnavailable (a ConvnetError) saying why if none."""
    from .runtime import device_report as _report
    return _report(device)


__all__ = ["device_available", "device_report"]
