"""Layer specifications, visual-field shapes (Equation 1-8), weight counts and the architecture report.

Layer kinds:
    FC       fully connected (height = width = 1, one slice per neuron)
    LOCAL    locally connected (a weight set for every neuron)
    CONV     convolutional (a weight set for every slice)
    POOLAVG  average pooling (no weights)
    POOLMAX  max pooling (no weights)

The output layer is implicit: fully connected, SoftMax, one neuron per class.

Weights are laid out in the book's host order (chapter 2): layer by layer, the output layer last.
FC / output: per neuron, the prior activations in (depth, height, width) order, then the bias.
CONV: per slice, [prior slice][filter row][filter col], then the bias.
LOCAL: per neuron in (depth, height, width) order, [prior slice][filter row][filter col], then the bias.
"""

from dataclasses import dataclass, field
from typing import List, Optional

from .errors import ConvnetError

FC = "FC"
LOCAL = "LOCAL"
CONV = "CONV"
POOLAVG = "POOLAVG"
POOLMAX = "POOLMAX"

LAYER_KINDS = (FC, LOCAL, CONV, POOLAVG, POOLMAX)

# The control-file keywords of each kind, for messages and for re-creating the line.
KIND_KEYWORDS = {
    FC: "FULLY CONNECTED LAYER",
    LOCAL: "LOCAL LAYER",
    CONV: "CONVOLUTIONAL LAYER",
    POOLAVG: "POOLED AVERAGE LAYER",
    POOLMAX: "POOLED MAX LAYER",
}


@dataclass(frozen=True)
class LayerSpec:
    """What a layer line says. Sizes not used by a kind are zero."""

    kind: str
    slices: int = 0            # FC, LOCAL, CONV
    hw_v: int = 0              # LOCAL, CONV half-widths
    hw_h: int = 0
    pad_v: int = 0             # LOCAL, CONV padding
    pad_h: int = 0
    width_v: int = 0           # POOL* window widths (not half-widths)
    width_h: int = 0
    stride_v: int = 1
    stride_h: int = 1
    file: Optional[str] = field(default=None, compare=False)
    line: Optional[int] = field(default=None, compare=False)

    @property
    def filter_v(self):
        """Filter (window) height: 2 * half-width + 1, or the pooling width."""
        return self.width_v if self.kind in (POOLAVG, POOLMAX) else 2 * self.hw_v + 1

    @property
    def filter_h(self):
        return self.width_h if self.kind in (POOLAVG, POOLMAX) else 2 * self.hw_h + 1

    def control_line(self):
        """The layer line that produces this spec."""
        kw = KIND_KEYWORDS[self.kind]
        if self.kind == FC:
            return f"{kw} {self.slices}"
        if self.kind in (LOCAL, CONV):
            return (f"{kw} {self.slices} {self.hw_v} {self.hw_h} {self.pad_v} {self.pad_h} "
                    f"{self.stride_v} {self.stride_h}")
        return f"{kw} {self.width_v} {self.width_h} {self.stride_v} {self.stride_h}"

    @classmethod
    def from_words(cls, kind, numbers, file=None, line=None):
        """Build a spec from the integers that follow the layer keywords, checking their ranges."""
        def err(msg):
            return ConvnetError(msg, file, line)

        if kind == FC:
            (slices,) = numbers
            if slices < 1:
                raise err(f"a fully connected layer needs at least 1 slice, not {slices}")
            return cls(FC, slices=slices, file=file, line=line)
        if kind in (LOCAL, CONV):
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
            return cls(kind, slices=slices, hw_v=hw_v, hw_h=hw_h, pad_v=pad_v, pad_h=pad_h,
                       stride_v=stride_v, stride_h=stride_h, file=file, line=line)
        if kind in (POOLAVG, POOLMAX):
            width_v, width_h, stride_v, stride_h = numbers
            for name, v in (("vertical pooling width", width_v), ("horizontal pooling width", width_h),
                            ("vertical stride", stride_v), ("horizontal stride", stride_h)):
                if v < 1:
                    raise err(f"{name} must be at least 1, not {v}")
            return cls(kind, width_v=width_v, width_h=width_h, stride_v=stride_v,
                       stride_h=stride_h, file=file, line=line)
        raise ValueError(f"unknown layer kind {kind!r}")


@dataclass
class Layer:
    """A layer placed in a model: its spec, its prior layer's shape and its own shape and weights."""

    spec: LayerSpec
    index: int                 # 0-based; hidden layers first, the output layer last
    prior_height: int
    prior_width: int
    prior_depth: int
    height: int
    width: int
    depth: int
    n_prior_weights: int       # inputs to one neuron including the bias (0 for pooling)
    n_weights: int
    weight_offset: int         # where this layer's weights begin in the flat host-order vector
    is_output: bool = False

    @property
    def kind(self):
        return self.spec.kind

    @property
    def n_neurons(self):
        return self.height * self.width * self.depth

    @property
    def n_prior(self):
        return self.prior_height * self.prior_width * self.prior_depth

    @property
    def weight_slice(self):
        return slice(self.weight_offset, self.weight_offset + self.n_weights)


def _field_size(prior, filt, pad, stride, what, spec, prior_name):
    """Equation 1-8: C = (W - F + 2P) / S + 1, integer division; refuse a filter wider than the padded prior."""
    span = prior - filt + 2 * pad
    if span < 0:
        raise ConvnetError(
            f"the {what} filter ({filt}) is larger than the {prior_name} ({prior}"
            + (f" plus padding {2 * pad}" if pad else "") + ")", spec.file, spec.line)
    return span // stride + 1


class Architecture:
    """A whole model's shapes: the input image, the hidden layers and the implicit output layer."""

    def __init__(self, specs, rows, cols, bands, n_classes):
        if rows < 1 or cols < 1 or bands < 1:
            raise ConvnetError(f"input images must have positive size, not {rows}x{cols}x{bands}")
        if n_classes < 2:
            raise ConvnetError(f"the data must have at least 2 classes, not {n_classes}")
        self.specs = tuple(specs)
        self.rows, self.cols, self.bands, self.n_classes = rows, cols, bands, n_classes
        self.layers: List[Layer] = []
        ph, pw, pd = rows, cols, bands
        offset = 0
        for i, spec in enumerate(self.specs):
            prior_name = "input image" if i == 0 else f"layer {i}"
            if spec.kind == FC:
                h, w, d = 1, 1, spec.slices
                npw = ph * pw * pd + 1
                nw = d * npw
            elif spec.kind in (LOCAL, CONV):
                h = _field_size(ph, spec.filter_v, spec.pad_v, spec.stride_v, "vertical", spec,
                                f"height of the {prior_name}")
                w = _field_size(pw, spec.filter_h, spec.pad_h, spec.stride_h, "horizontal", spec,
                                f"width of the {prior_name}")
                d = spec.slices
                npw = spec.filter_v * spec.filter_h * pd + 1
                nw = (h * w * d if spec.kind == LOCAL else d) * npw
            else:
                h = _field_size(ph, spec.filter_v, 0, spec.stride_v, "vertical pooling", spec,
                                f"height of the {prior_name}")
                w = _field_size(pw, spec.filter_h, 0, spec.stride_h, "horizontal pooling", spec,
                                f"width of the {prior_name}")
                d = pd
                npw = 0
                nw = 0
            self.layers.append(Layer(spec, i, ph, pw, pd, h, w, d, npw, nw, offset))
            offset += nw
            ph, pw, pd = h, w, d
        self.n_hid_weights = offset
        npw = ph * pw * pd + 1
        out_spec = LayerSpec(FC, slices=n_classes)
        self.output = Layer(out_spec, len(self.specs), ph, pw, pd, 1, 1, n_classes, npw,
                            n_classes * npw, offset, is_output=True)
        self.n_weights = offset + self.output.n_weights

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_lines(cls, lines, rows, cols, bands, n_classes):
        """Build from layer lines in control-file syntax (e.g. ``"CONVOLUTIONAL LAYER 6 1 1 1 1 1 1"``)."""
        from .control import parse_layer_line
        specs = [parse_layer_line(line) for line in lines if line.strip()]
        return cls(specs, rows, cols, bands, n_classes)

    @property
    def all_layers(self):
        """Hidden layers then the output layer."""
        return self.layers + [self.output]

    @property
    def n_layers(self):
        """The number of layers including the output layer, as the book counts them."""
        return len(self.layers) + 1

    @property
    def n_inputs(self):
        return self.rows * self.cols * self.bands

    def control_lines(self):
        return [s.control_line() for s in self.specs]

    def same_shape(self, other):
        return (self.specs == other.specs and self.rows == other.rows and self.cols == other.cols
                and self.bands == other.bands and self.n_classes == other.n_classes)

    def penalty_mask(self):
        """1.0 for every weight the weight penalty applies to, 0.0 for biases."""
        import numpy as np
        mask = np.ones(self.n_weights)
        for layer in self.all_layers:
            if layer.n_prior_weights:
                mask[layer.weight_offset + layer.n_prior_weights - 1:
                     layer.weight_offset + layer.n_weights:layer.n_prior_weights] = 0.0
        return mask

    # ------------------------------------------------------------------ the report (book p.166-167)
    def report(self):
        """The architecture report, one string per line, in the book's wording."""
        out = [f"Input has {self.rows} rows, {self.cols} columns, and {self.bands} bands",
               "Model architecture...",
               f"Model has {self.n_layers} layers, including fully connected output"]
        for layer in self.layers:
            s = layer.spec
            n = layer.index + 1
            if s.kind == FC:
                out.append(f"Layer {n} is fully connected, with {layer.depth} slices, "
                           f"each {layer.height} high and {layer.width} wide")
                out.append(f"   {layer.n_neurons} neurons and {layer.n_prior_weights} prior weights "
                           f"per neuron gives {layer.n_weights} weights")
            elif s.kind in (LOCAL, CONV):
                name = "locally connected" if s.kind == LOCAL else "convolutional"
                out.append(f"Layer {n} is {name}, with {layer.depth} slices, "
                           f"each {layer.height} high and {layer.width} wide")
                out.append(f"   Horz half-width={s.hw_h}, padding={s.pad_h}, stride={s.stride_h}")
                out.append(f"   Vert half-width={s.hw_v}, padding={s.pad_v}, stride={s.stride_v}")
                per = "neuron" if s.kind == LOCAL else "slice"
                out.append(f"   {layer.n_neurons} neurons and {layer.n_prior_weights} prior weights "
                           f"per {per} gives {layer.n_weights} weights")
            else:
                name = "average" if s.kind == POOLAVG else "max"
                out.append(f"Layer {n} is {s.width_v} by {s.width_h} pooling {name}, with stride "
                           f"{s.stride_v} by {s.stride_h}, {layer.height} high, {layer.width} wide, "
                           f"and {layer.depth} deep")
        o = self.output
        out.append(f"Layer {o.index + 1} (output) is fully connected, with {o.depth} slices (classes)")
        out.append(f"   {o.n_neurons} neurons and {o.n_prior_weights} prior weights per neuron "
                   f"gives {o.n_weights} weights")
        out.append(f"{self.n_weights} Total weights for the entire model")
        return out

    def __repr__(self):
        return (f"Architecture({self.control_lines()!r}, rows={self.rows}, cols={self.cols}, "
                f"bands={self.bands}, n_classes={self.n_classes})")
