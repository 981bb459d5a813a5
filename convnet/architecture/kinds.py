"""The layer kinds: one entry per kind, holding everything that makes that kind what it is.

Each kind is a string (``"FC"``, ``"LOCAL"``, ``"CONV"``, ``"POOLAVG"``, ``"POOLMAX"``), so it
compares and serialises as its name, and an object that owns:

* its control-file keyword, the integers that follow it, and their range checks;
* its shape math (Equation 1-8) and its weight count and order (the book's host order, chapter 2);
* its wording in the architecture report and in the PRINT WEIGHTS listing;
* the capabilities the compute paths ask about (has weights, applies tanh, keeps max-pool winners);
* where its code lives on every compute path (:attr:`LayerKind.host`, :attr:`LayerKind.reference`,
  :attr:`LayerKind.device`) and in the ONNX export (:attr:`LayerKind.onnx`), as ``"module:name"``
  strings loaded on first use so that this module stays free of the compute side, and its CUDA
  sources and tests.

So the LOCAL layer is :class:`Local` below: its numbers and checks, shapes, weight order and
wording here; its host kernels in convnet/host/local_conv.py (shared with CONV, which differs only
in sharing its weights), its per-case reference loops in convnet/host/reference.py, its device
tables in convnet/device/plan.py with the gather products of kernels/gemm.cu; its tests are the
``LOCAL-...`` cases of tests/test_layer_*.py.

Code outside this module asks a layer's kind (``layer.kind.has_weights``, ``layer.kind.report(layer)``,
``layer.kind.host_layer(layer)``); it never tests which kind it is. Adding a kind means adding a
class here, its entry in :data:`KINDS`, and its own kernels and tests.

Weight order of each kind (the bias is always the last weight of a set):

* FC (and the output layer): per neuron, the prior activations in (depth, height, width) order;
* LOCAL: per neuron in (depth, height, width) order, [prior slice][filter row][filter col];
* CONV: per slice, [prior slice][filter row][filter col];
* pooling layers have no weights.
"""

import importlib

from ..errors import ConvnetError
from ..params import MAX_SIDE


def _load(target):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def field_size(prior, filt, pad, stride, what, spec, prior_name):
    """Equation 1-8: C = (W - F + 2P) / S + 1, integer division; refuse a filter wider than the
    padded prior."""
    span = prior - filt + 2 * pad
    if span < 0:
        raise ConvnetError(
            f"the {what} filter ({filt}) is larger than the {prior_name} ({prior}"
            + (f" plus padding {2 * pad}" if pad else "") + ")", spec.file, spec.line)
    return span // stride + 1


class LayerKind(str):
    """One layer kind. Subclasses fill in the class attributes and the shape/wording methods."""

    keyword = ""               # the control-file phrase, e.g. "LOCAL LAYER"
    summary = ""               # one line for the keyword reference
    arg_names = ()             # ((name, minimum, maximum), ...): the integers after the keyword
    has_weights = True         # False: the layer only rearranges its prior (pooling)
    applies_tanh = True        # activation = tanh(net input); False: no activation function
    keeps_winners = False      # max pooling: the winner of each window feeds the backward pass
    commutes_with_tanh = False  # pooling tanh values = tanh of pooled values (max is monotonic)
    shares_weights = False     # one weight set per slice, used at every position: a filter
    whole_prior = False        # each neuron sees the whole prior layer (no window, one position)
    host = ""                  # "module:class" of the fast host layer
    reference = ""             # "module:class" of the per-case reference routines
    device = ""                # "module:class" of the device plan of the layer
    device_kernels = ()        # its CUDA sources in convnet/device/kernels/
    onnx = ""                  # "module:class" of its ONNX nodes (convnet/export/onnx_layers.py)
    tests = ("tests/test_layer_kinds.py", "tests/test_layer_paths.py",
             "tests/test_layer_gradients.py")   # per-kind tests: ids name the kind

    def __new__(cls, name):
        return str.__new__(cls, name)

    def __reduce__(self):
        return (kind_named, (str(self),))

    # ------------------------------------------------------------------ spec
    def check(self, numbers, err):
        """The spec fields of the numbers after the keyword, range-checked (err(msg) -> error)."""
        raise NotImplementedError

    def control_numbers(self, spec):
        """The numbers after the keyword that re-create ``spec``."""
        raise NotImplementedError

    def filter_size(self, spec):
        """(rows, columns) of the window a neuron sees in the prior layer."""
        return 1, 1

    # ------------------------------------------------------------------ shapes and weights
    def shape(self, spec, prior_height, prior_width, prior_depth, prior_name):
        """(height, width, depth, weights per neuron including the bias, weights of the layer)."""
        raise NotImplementedError

    def weight_sets(self, layer):
        """PRINT WEIGHTS: (label, prior positions per prior slice) for every weight set, in the
        weight order."""
        return []

    # ------------------------------------------------------------------ wording
    def report(self, layer):
        """The architecture report's lines for this layer (book p.166-167)."""
        raise NotImplementedError

    def listing_heading(self, layer):
        """PRINT WEIGHTS: the one line describing a layer without weights, or None."""
        return None

    # ------------------------------------------------------------------ compute bindings
    def host_layer(self, layer):
        """The fast host implementation of ``layer``."""
        return _load(self.host)(layer)

    def reference_layer(self, layer):
        """The per-case reference routines bound to ``layer``."""
        return _load(self.reference)(layer)

    def device_plan(self, layer, layout, tables):
        """The device plan of ``layer``: its gather tables and launch shapes."""
        return _load(self.device)(layer, layout, tables)

    def onnx_layer(self, layer):
        """The ONNX nodes of ``layer`` (the export of a model)."""
        return _load(self.onnx)(layer)


def _neurons_line(layer, per):
    return (f"   {layer.n_neurons} neurons and {layer.n_prior_weights} prior weights per {per} "
            f"gives {layer.n_weights} weights")


# ---------------------------------------------------------------------------------- FC
class FullyConnected(LayerKind):
    keyword = "FULLY CONNECTED LAYER"
    summary = "a fully connected hidden layer"
    arg_names = (("Slices", 1, MAX_SIDE),)
    host = "convnet.host.fc:FCLayer"
    reference = "convnet.host.reference:FCReference"
    device = "convnet.device.plan:GatherLayerPlan"
    device_kernels = ("gemm.cu",)
    onnx = "convnet.export.onnx_layers:FullyConnectedNodes"
    whole_prior = True

    def check(self, numbers, err):
        (slices,) = numbers
        if slices < 1:
            raise err(f"a fully connected layer needs at least 1 slice, not {slices}")
        return {"slices": slices}

    def control_numbers(self, spec):
        return [spec.slices]

    def shape(self, spec, ph, pw, pd, prior_name):
        npw = ph * pw * pd + 1
        return 1, 1, spec.slices, npw, spec.slices * npw

    def weight_sets(self, layer):
        per = layer.prior_height * layer.prior_width
        return [(f"(Full) Slice (this neuron) {s + 1} of {layer.depth}", per)
                for s in range(layer.depth)]

    def report(self, layer):
        number = layer.index + 1
        if layer.is_output:
            return [f"Layer {number} (output) is fully connected, with {layer.depth} slices "
                    "(classes)", _neurons_line(layer, "neuron")]
        return [f"Layer {number} is fully connected, with {layer.depth} slices, "
                f"each {layer.height} high and {layer.width} wide",
                _neurons_line(layer, "neuron")]


# ---------------------------------------------------------------------------------- LOCAL, CONV
class _Windowed(LayerKind):
    """A layer whose neurons see a window of the prior layer (Equations 1-5 to 1-8)."""

    arg_names = (("Slices", 1, MAX_SIDE), ("hwV", 0, MAX_SIDE), ("hwH", 0, MAX_SIDE),
                 ("padV", 0, MAX_SIDE), ("padH", 0, MAX_SIDE), ("strideV", 1, MAX_SIDE),
                 ("strideH", 1, MAX_SIDE))
    host = "convnet.host.local_conv:LocalConvLayer"
    reference = "convnet.host.reference:LocalConvReference"
    device = "convnet.device.plan:GatherLayerPlan"
    device_kernels = ("gemm.cu",)
    title = ""                 # report wording
    weights_per = ""           # "neuron" or "slice": who owns a weight set

    def check(self, numbers, err):
        slices, hw_v, hw_h, pad_v, pad_h, stride_v, stride_h = numbers
        if slices < 1:
            raise err(f"a layer needs at least 1 slice, not {slices}")
        for name, v in (("vertical half-width", hw_v), ("horizontal half-width", hw_h),
                        ("vertical padding", pad_v), ("horizontal padding", pad_h)):
            if v < 0:
                raise err(f"{name} must not be negative, not {v}")
        if pad_v > hw_v:
            raise err(f"vertical padding {pad_v} exceeds the vertical half-width {hw_v}")
        if pad_h > hw_h:
            raise err(f"horizontal padding {pad_h} exceeds the horizontal half-width {hw_h}")
        for name, v in (("vertical stride", stride_v), ("horizontal stride", stride_h)):
            if v < 1:
                raise err(f"{name} must be at least 1, not {v}")
        return {"slices": slices, "hw_v": hw_v, "hw_h": hw_h, "pad_v": pad_v, "pad_h": pad_h,
                "stride_v": stride_v, "stride_h": stride_h}

    def control_numbers(self, spec):
        return [spec.slices, spec.hw_v, spec.hw_h, spec.pad_v, spec.pad_h, spec.stride_v,
                spec.stride_h]

    def filter_size(self, spec):
        return 2 * spec.hw_v + 1, 2 * spec.hw_h + 1

    def shape(self, spec, ph, pw, pd, prior_name):
        fv, fh = self.filter_size(spec)
        height = field_size(ph, fv, spec.pad_v, spec.stride_v, "vertical", spec,
                            f"height of the {prior_name}")
        width = field_size(pw, fh, spec.pad_h, spec.stride_h, "horizontal", spec,
                           f"width of the {prior_name}")
        depth = spec.slices
        npw = fv * fh * pd + 1
        return height, width, depth, npw, self.n_weight_sets(height, width, depth) * npw

    def n_weight_sets(self, height, width, depth):
        raise NotImplementedError

    def report(self, layer):
        spec = layer.spec
        return [f"Layer {layer.index + 1} is {self.title}, with {layer.depth} slices, "
                f"each {layer.height} high and {layer.width} wide",
                f"   Horz half-width={spec.hw_h}, padding={spec.pad_h}, stride={spec.stride_h}",
                f"   Vert half-width={spec.hw_v}, padding={spec.pad_v}, stride={spec.stride_v}",
                _neurons_line(layer, self.weights_per)]


class Local(_Windowed):
    keyword = "LOCAL LAYER"
    summary = "a locally connected hidden layer"
    title = "locally connected"
    weights_per = "neuron"
    onnx = "convnet.export.onnx_layers:LocalNodes"

    def n_weight_sets(self, height, width, depth):
        return height * width * depth

    def weight_sets(self, layer):
        fv, fh = self.filter_size(layer.spec)
        return [(f"(Local) Slice {s + 1} of {layer.depth} Row {r + 1} of {layer.height} "
                 f"Col {c + 1} of {layer.width}", fv * fh)
                for s in range(layer.depth) for r in range(layer.height)
                for c in range(layer.width)]


class Convolutional(_Windowed):
    keyword = "CONVOLUTIONAL LAYER"
    summary = "a convolutional hidden layer"
    title = "convolutional"
    weights_per = "slice"
    shares_weights = True
    onnx = "convnet.export.onnx_layers:ConvolutionalNodes"
    device_kernels = ("gemm.cu", "conv_small.cu")     # conv_small: few slices, computed directly

    def n_weight_sets(self, height, width, depth):
        return depth

    def weight_sets(self, layer):
        fv, fh = self.filter_size(layer.spec)
        return [(f"(Convolutional) Slice {s + 1} of {layer.depth}", fv * fh)
                for s in range(layer.depth)]


# ---------------------------------------------------------------------------------- pooling
class _Pooling(LayerKind):
    """A layer that summarises each window of each prior slice; no weights, no activation."""

    arg_names = (("widthV", 1, MAX_SIDE), ("widthH", 1, MAX_SIDE), ("strideV", 1, MAX_SIDE),
                 ("strideH", 1, MAX_SIDE))
    has_weights = False
    applies_tanh = False
    host = "convnet.host.pool:PoolLayer"
    reference = "convnet.host.reference:PoolReference"
    device = "convnet.device.plan:PoolLayerPlan"
    device_kernels = ("pool.cu",)
    title = ""                 # report wording
    listing_name = ""          # PRINT WEIGHTS wording

    def check(self, numbers, err):
        width_v, width_h, stride_v, stride_h = numbers
        for name, v in (("vertical pooling width", width_v),
                        ("horizontal pooling width", width_h),
                        ("vertical stride", stride_v), ("horizontal stride", stride_h)):
            if v < 1:
                raise err(f"{name} must be at least 1, not {v}")
        return {"width_v": width_v, "width_h": width_h, "stride_v": stride_v,
                "stride_h": stride_h}

    def control_numbers(self, spec):
        return [spec.width_v, spec.width_h, spec.stride_v, spec.stride_h]

    def filter_size(self, spec):
        return spec.width_v, spec.width_h

    def shape(self, spec, ph, pw, pd, prior_name):
        height = field_size(ph, spec.width_v, 0, spec.stride_v, "vertical pooling", spec,
                            f"height of the {prior_name}")
        width = field_size(pw, spec.width_h, 0, spec.stride_h, "horizontal pooling", spec,
                           f"width of the {prior_name}")
        return height, width, pd, 0, 0

    def report(self, layer):
        spec = layer.spec
        return [f"Layer {layer.index + 1} is {spec.width_v} by {spec.width_h} pooling "
                f"{self.title}, with stride {spec.stride_v} by {spec.stride_h}, "
                f"{layer.height} high, "
                f"{layer.width} wide, and {layer.depth} deep"]

    def listing_heading(self, layer):
        return (f"({self.listing_name}) {layer.height} rows by {layer.width} cols by "
                f"{layer.depth} slices")


class PooledAverage(_Pooling):
    keyword = "POOLED AVERAGE LAYER"
    summary = "an average-pooling layer"
    title = "average"
    listing_name = "Avg pool"
    onnx = "convnet.export.onnx_layers:AveragePoolNodes"


class PooledMax(_Pooling):
    keyword = "POOLED MAX LAYER"
    summary = "a max-pooling layer"
    title = "max"
    listing_name = "Max pool"
    onnx = "convnet.export.onnx_layers:MaxPoolNodes"
    keeps_winners = True
    commutes_with_tanh = True


# ---------------------------------------------------------------------------------- the registry
FC = FullyConnected("FC")
LOCAL = Local("LOCAL")
CONV = Convolutional("CONV")
POOLAVG = PooledAverage("POOLAVG")
POOLMAX = PooledMax("POOLMAX")

# Every kind, in the order the keyword reference lists them.
KINDS = {k: k for k in (FC, LOCAL, CONV, POOLAVG, POOLMAX)}
LAYER_KINDS = tuple(KINDS)


def kind_named(name):
    """The kind called ``name`` ("FC", "LOCAL", ...); ValueError for an unknown name."""
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown layer kind {name!r}") from None
