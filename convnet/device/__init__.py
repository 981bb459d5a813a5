"""The CUDA compute path (PyCUDA kernels, float32 on the device).

Importing this package needs no PyCUDA: it is imported by :mod:`convnet.device.backend` only when
a :class:`~convnet.device.backend.DeviceBackend` is made or a device is asked about.

    from convnet.device import device_available, device_report
    ok, why = device_available()        # (True, "") or (False, the reason)
    lines = device_report()             # raises DeviceUnavailable (a ConvnetError) when none
"""


def device_available():
    """(True, "") when a CUDA device is usable, else (False, why not)."""
    from .backend import device_available as _available
    return _available()


def device_report():
    """Lines about the CUDA device; raises DeviceUnavailable (a ConvnetError) saying why if none."""
    from .backend import device_report as _report
    return _report()


__all__ = ["device_available", "device_report"]
