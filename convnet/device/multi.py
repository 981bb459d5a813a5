"""Several CUDA devices in one run: every full-batch evaluation split across GPUs.

    backend = device_backend(arch, params)          # params: a DeviceParams; its cuda_devices
                                                    # '0,1' | 'ALL' (default: GPU 0)
    ev = backend.evaluator(inputs, classes, wpen)   # each GPU receives its shard of the cases
    ev.criterion(w); ev.gradient(w); ev.outputs(w)  # the contract of DeviceEvaluator

Each GPU holds a contiguous shard of the training cases and its own copy of the weights, in a
single-GPU DeviceBackend of its own (its own context, stream, kernels, MAX BATCH, launch splits
and timer). The criterion and the gradient are sums over cases (Equation 1-13), so each shard
computes its own part and the parts are added on the host in float64, always in device order:
the same device list gives the same bits on every evaluation, and any number of devices agrees
with one device to within the float32 rounding of the partial sums (about 1e-7 relative).
Shard boundaries fall on multiples of CHUNK cases where the data allow it, so that every case
lands in the same gradient partial-sum chunk as on one device.

The shards are computed at the same time. The calling thread stages the weights once in a
page-locked buffer every device copies from, queues every device's evaluation (CUDA graphs,
asynchronous), and only then waits for each in turn and adds its part. Each device divides its
part by the whole case count and the first adds the weight penalty (as one device does, from the
weights it holds), so the host's share of the work is one float64 addition per device. (Evaluators are made, and outputs computed, on one worker thread per device.)
"""

import dataclasses
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np

from ..errors import ConvnetError
from ..evaluator import Evaluator, check_weights
from ..params import ALL_DEVICES as ALL, parse_devices
from .hostcopy import copied, copy_into
from .options import DeviceOptions, device_params
from .plan import CHUNK


# ------------------------------------------------------------------ which devices
def device_count():
    """How many CUDA devices this process sees (ConvnetError when CUDA is not usable)."""
    from ..devices import cuda_status
    usable, reason = cuda_status()
    if not usable:
        raise ConvnetError(f"CUDA requested but not usable: {reason}")
    import pycuda.driver as cuda
    return cuda.Device.count()


def resolve_devices(spec, count=None):
    """The device indices a CUDA DEVICES value names: None (not given) -> [0]; 'ALL' -> every
    device; '0,1' -> [0, 1], each checked against the devices present (``count`` of them, else
    as CUDA counts them)."""
    if spec is None:
        return [0]
    spec = parse_devices(spec)
    count = device_count() if count is None else count
    if spec == ALL:
        return list(range(count))
    indices = [int(p) for p in spec.split(",")]
    for i in indices:
        if i >= count:
            raise ConvnetError(f"CUDA DEVICES = {spec}: there is no CUDA device {i} (this "
                               f"machine has {count}, numbered from 0)")
    return indices


def devices_phrase(params):
    """How CONVNET.LOG names where a CUDA run computes: 'CUDA device' (the default device),
    'CUDA device 1', 'CUDA devices 0, 1' (params: a DeviceParams)."""
    from ..devices import device_label
    spec = device_params(params).cuda_devices
    if spec is None:
        return "CUDA device"
    indices = resolve_devices(spec)
    if len(indices) == 1:
        return f"CUDA device {device_label(indices[0])}"
    return (f"CUDA devices {', '.join(device_label(i) for i in indices)} (the cases split "
            f"between them)")


def device_backend(arch, params=None, options=DeviceOptions()):
    """The backend for CUDA DEVICES in params (a DeviceParams): one DeviceBackend, or a
    MultiDeviceBackend (options.device is then ignored)."""
    from .backend import DeviceBackend
    params = device_params(params)
    indices = resolve_devices(params.cuda_devices)
    if len(indices) == 1:
        return DeviceBackend(arch, params, dataclasses.replace(options, device=indices[0]))
    return MultiDeviceBackend(arch, params, indices, options=options)


def shard_bounds(n_cases, n_devices):
    """(start, stop) of each device's shard: contiguous, within two chunks of equal, boundaries on
    multiples of CHUNK when every shard still gets cases; never an empty shard (fewer shards
    than devices when there are fewer cases than devices)."""
    k = max(1, min(n_devices, n_cases))
    cuts = [round(i * n_cases / k) for i in range(k + 1)]
    aligned = [0] + [round(c / CHUNK) * CHUNK for c in cuts[1:-1]] + [n_cases]
    if all(a < b for a, b in zip(aligned, aligned[1:])):
        cuts = aligned
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


# ------------------------------------------------------------------ the backend
class MultiDeviceBackend:
    """One single-GPU DeviceBackend per device; evaluators that split the cases across them."""

    def __init__(self, arch, params, indices, make=None, options=DeviceOptions()):
        if len(indices) < 1:
            raise ConvnetError("CUDA DEVICES names no device")
        params = device_params(params)
        if make is None:
            from .backend import DeviceBackend

            def make(device):
                return DeviceBackend(arch, params, dataclasses.replace(options, device=device))
        self.arch = arch
        self.params = params
        self.indices = list(indices)
        self.backends = [make(i) for i in self.indices]
        self.n_weights = arch.n_weights
        first = self.backends[0]        # the settings every device shares, for CUDA.LOG
        self.max_batch, self.max_hid_grad = first.max_batch, first.max_hid_grad
        self.max_mem_grad = first.max_mem_grad
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(self.backends) - 1),
                                        thread_name_prefix="convnet-device")
        self.shards = []            # (device, start, stop) of the last evaluator, for CUDA.LOG
        self.minibatch_device = None    # the device of a mini-batch descent (CUDA.LOG)
        # the weights of an evaluation: one host copy, which every device sends itself
        self.staging = first.rt.pinned_for_all(self.n_weights, np.float64)
        for b in self.backends:
            b.share_staging(self.staging)

    def evaluator(self, inputs, classes, wpen=0.0):
        return MultiDeviceEvaluator(self, inputs, classes, wpen)

    def activations(self, weights, inputs):
        """A few cases' activations for pictures: the first device computes them."""
        return self.backends[0].activations(weights, inputs)

    def poolmax_winners(self, weights, inputs):
        return self.backends[0].poolmax_winners(weights, inputs)

    def timings(self):
        """Every device's timing rows, the device named in the label."""
        rows = []
        for i, b in zip(self.indices, self.backends):
            rows += [(f"GPU {i} {label}", act, n, s) for label, act, n, s in b.timings()]
        return rows

    @property
    def weight_uploads(self):
        """Weight copies so far, one count per device (CUDA.LOG)."""
        return [b.weight_uploads for b in self.backends]

    def reset_timings(self):
        for b in self.backends:
            b.reset_timings()

    def run_each(self, calls):
        """Run calls[k]() for every k, at the same time; results in order. The first runs on this
        thread. Every call has finished when this returns or raises (the first error raised)."""
        futures = [self._pool.submit(c) for c in calls[1:]]
        try:
            first = calls[0]()
        finally:
            wait(futures)
        return [first] + [f.result() for f in futures]

    def close(self):
        self._pool.shutdown(wait=True)


class MultiDeviceEvaluator(Evaluator):
    """A data set split across devices: the full-batch criterion, gradient and outputs."""

    def __init__(self, multi, inputs, classes, wpen=0.0):
        self.multi = multi
        x = self.inputs = self.bind(multi.arch, inputs, classes, wpen)
        self.whole = None           # every case on the first device, for mini-batch descent
        self.bounds = shard_bounds(self.n_cases, len(multi.backends))
        backends = multi.backends[:len(self.bounds)]
        cls = self.classes

        def bind(backend, a, b, part_wpen):
            return lambda: backend.evaluator(x[a:b], None if cls is None else cls[a:b], part_wpen)

        # the shards are uploaded at the same time; the first device's part adds the penalty
        self.parts = multi.run_each([bind(be, a, b, wpen if k == 0 else 0.0)
                                     for k, (be, (a, b)) in enumerate(zip(backends, self.bounds))])
        multi.shards = [(i, a, b) for i, (a, b) in zip(multi.indices, self.bounds)]
        for part in self.parts:     # each device's part divided by the whole case count
            part.mean_over(self.n_cases)

    def _weights(self, weights):
        return check_weights(self.multi.arch, weights)

    def subset(self, case_indices):
        """Not over several devices: the cases of a subset lie on different devices, and a
        fresh evaluator would shard them anew."""
        raise ConvnetError("an evaluator over several CUDA devices (CUDA DEVICES) cannot take a "
                           "subset of its cases; use one device")

    def _queue_all(self, weights, queue):
        """Stage the weights in the buffer every device sends from and queue(ev) an evaluation on
        every device: the first part of each (from the first weights staged), then the rest of the
        weights staged and the second part of each (see DeviceEvaluator._run_host_head), so that
        every device starts before the host has copied them all."""
        w = self._weights(weights)
        staging = self.multi.staging
        head = max(ev.head_weights() for ev in self.parts)
        copy_into(staging[:head], w[:head])
        rests = [queue(ev) for ev in self.parts]
        copy_into(staging[head:], w[head:])
        for rest in rests:
            rest()

    def criterion(self, weights):
        self.need_classes()
        self._queue_all(weights, lambda ev: ev.queue_criterion(None))
        total = 0.0
        for ev in self.parts:                                       # device order, always
            total += ev.finish_criterion()
        return total

    def gradient(self, weights):
        """Every device's part queued from this thread, then each waited for and added in device
        order: the parts come divided by the whole case count, the first with the penalty, so
        the host only adds them."""
        self.need_classes()
        self._queue_all(weights, lambda ev: ev.queue_gradient(None))
        crit, parts = 0.0, []
        for ev in self.parts:                                       # device order, always
            part_crit, part_grad = ev.finish_gradient()
            crit += part_crit
            parts.append(part_grad)
        if len(parts) == 1:
            return crit, copied(parts[0])
        grad = np.add(parts[0], parts[1])
        for part in parts[2:]:
            grad += part
        return crit, grad

    def outputs(self, weights):
        w = self._weights(weights)
        parts = self.multi.run_each([(lambda ev=ev: ev.outputs(w)) for ev in self.parts])
        return np.concatenate(parts, axis=0)

    def minibatches(self, rule, batch_size, rates, weights):
        """Mini-batch descent on the first device alone, over every case (sent there once, on
        first use): a step of a few hundred cases is too small to split, and a split step would
        wait for the host to add its parts. Validation and the final passes stay split."""
        if self.whole is None:
            self.whole = self.multi.backends[0].evaluator(self.inputs, self.classes, self.wpen)
            self.multi.minibatch_device = self.multi.indices[0]
        return self.whole.minibatches(rule, batch_size, rates, weights)
