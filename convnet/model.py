"""A model: an architecture, its weights in the book's host order, and a backend that computes.

    model = Model(arch)                       # host (CPU) backend, every core
    model = Model(arch, device="cuda")        # device backend (needs PyCUDA and a GPU)
    model.weights = w                         # 1-D float64, host order; copied into place
    model.criterion(inputs, classes, wpen)    # float
    model.gradient(inputs, classes, wpen)     # (float, d criterion / d weights)
    model.activations(inputs)                 # [(n, n_neurons)] per hidden layer
    model.predict(inputs)                     # (n, n_classes) SoftMax probabilities

A new model's weights are all zero: every hidden activation is then 0 and every class gets the same
probability. Training (simulated annealing, then conjugate gradients) sets real starting weights.
"""

import numpy as np

from .errors import ConvnetError
from .evaluator import check_classes, check_inputs, check_weights

DEVICES = ("cpu", "cuda")


class Model:
    """See the module docstring. ``threads`` applies to the host backend (None: every core);
    ``params`` (a convnet.params.DeviceParams: MAX BATCH and the like) to the device backend."""

    def __init__(self, arch, device="cpu", threads=None, params=None):
        self.arch = arch
        if not isinstance(device, str) or device.lower() not in DEVICES:
            raise ConvnetError(f"unknown device {device!r}: use one of {', '.join(DEVICES)}")
        self.device = device.lower()
        self._own_weights = np.zeros(arch.n_weights)
        self._weights = self._own_weights
        if self.device == "cpu":
            from .host.backend import HostBackend      # Numba: loaded by host models only
            self.backend = HostBackend(arch, threads=threads)
        else:
            self.backend = _device_backend(arch, params)

    # -- weights
    @property
    def weights(self):
        """All weights, 1-D float64 in the book's host order (layer by layer, output last)."""
        return self._weights

    @weights.setter
    def weights(self, value):
        self._own_weights[:] = check_weights(self.arch, value)
        self._weights = self._own_weights

    def keep_weights(self, value):
        """Hold ``value`` itself as the weights, without a copy, until the next assignment to
        ``weights`` (which copies into the model's own array again): for a trainer whose
        optimizer hands over an array each iteration that stays as it is while it is held (the
        device's, DeviceVectors.host_arrays_kept)."""
        self._weights = check_weights(self.arch, value)

    @property
    def n_weights(self):
        return self.arch.n_weights

    # -- threads (host backend)
    @property
    def threads(self):
        return getattr(self.backend, "threads", None)

    @threads.setter
    def threads(self, value):
        if not hasattr(self.backend, "threads"):
            raise ConvnetError("the number of threads applies to the host (cpu) backend only")
        self.backend.threads = value

    # -- computations
    def evaluator(self, inputs, classes, wpen=0.0):
        """The backend's evaluator for a data set (data bound once; call with weights)."""
        x = check_inputs(self.arch, inputs)
        c = check_classes(self.arch, classes, x.shape[0])
        return self.backend.evaluator(x, c, wpen)

    def criterion(self, inputs, classes, wpen=0.0):
        """Mean negative log likelihood per case and class (Equation 1-13) plus the penalty."""
        return self.evaluator(inputs, classes, wpen).criterion(self._weights)

    def gradient(self, inputs, classes, wpen=0.0):
        """(criterion, d criterion / d weights) at the current weights."""
        return self.evaluator(inputs, classes, wpen).gradient(self._weights)

    def activations(self, inputs):
        """Hidden-layer activations: a list of (n_cases, n_neurons) arrays in (depth, height,
        width) order."""
        x = check_inputs(self.arch, inputs)
        return self.backend.activations(self._weights, x)

    def predict(self, inputs):
        """SoftMax class probabilities, (n_cases, n_classes); each row sums to 1."""
        x = check_inputs(self.arch, inputs)
        dummy = np.zeros(x.shape[0], dtype=np.int64)
        return self.backend.evaluator(x, dummy, 0.0).outputs(self._weights)

    def __repr__(self):
        return f"Model({self.arch!r}, device={self.device!r})"


def _device_backend(arch, params):
    """The CUDA backend, imported only when asked for."""
    try:
        from .device import backend as device
    except Exception as e:          # ImportError, or a PyCUDA / driver failure at import
        raise ConvnetError(f"CUDA requested but not usable: {_reason(e)}") from None
    unavailable = getattr(device, "DeviceUnavailable", ())
    try:
        from .device.multi import device_backend
        from .device.options import device_params
        return device_backend(arch, device_params(params))  # CUDA DEVICES: one GPU or several
    except unavailable as e:        # no PyCUDA, no driver, no GPU, a kernel that did not build
        raise ConvnetError(f"CUDA requested but not usable: {_reason(e, False)}") from None
    except ConvnetError:            # a user error in the device parameters
        raise
    except Exception as e:
        raise ConvnetError(f"CUDA requested but not usable: {_reason(e)}") from None


def _reason(e, with_type=True):
    text = str(e).strip().splitlines()
    if not with_type:
        return text[0] if text else type(e).__name__
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
