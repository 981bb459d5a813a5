"""A model's architecture: its layer specs, every layer's shape and weights, and the report.

The layer kinds (FC, LOCAL, CONV, POOLAVG, POOLMAX) and all that is particular to each (keyword,
shape math of Equations 1-1 to 1-8, weight count and order, report wording, and where each compute
path implements it) live in :mod:`convnet.architecture.kinds`. The output layer is implicit:
fully connected, SoftMax, one neuron per class.

Weights are one flat vector in the book's host order (chapter 2): layer by layer, the output layer
last, each layer's weights in the order its kind gives.
"""

from dataclasses import dataclass, field
from typing import List, Optional

from ..errors import ConvnetError
from .kinds import (CONV, FC, KINDS, LAYER_KINDS, LOCAL, POOLAVG, POOLMAX, LayerKind,
                    kind_named)
from .lines import layer_words

__all__ = ["Architecture", "Layer", "LayerSpec", "LayerKind", "KINDS", "LAYER_KINDS",
           "kind_named", "FC", "LOCAL", "CONV", "POOLAVG", "POOLMAX"]


@dataclass(frozen=True)
class LayerSpec:
    """What a layer line says. Sizes not used by a kind are zero."""

    kind: LayerKind            # given as the kind or its name ("CONV"); held as the kind
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

    def __post_init__(self):
        # the kind may be given by name; hold the registry's kind object
        object.__setattr__(self, "kind", kind_named(self.kind))

    @property
    def filter_v(self):
        """Filter (window) height: 2 * half-width + 1, or the pooling width."""
        return self.kind.filter_size(self)[0]

    @property
    def filter_h(self):
        return self.kind.filter_size(self)[1]

    def control_line(self):
        """The layer line that produces this spec."""
        return " ".join([self.kind.keyword] + [str(v) for v in self.kind.control_numbers(self)])

    @classmethod
    def from_words(cls, kind, numbers, file=None, line=None):
        """Build a spec from the integers that follow the layer keywords, checking their ranges."""
        kind = kind_named(kind)
        fields = kind.check(numbers, lambda msg: ConvnetError(msg, file, line))
        return cls(kind, file=file, line=line, **fields)

    @classmethod
    def from_line(cls, text, file=None, line=None):
        """Build a spec from a whole layer line (``"LOCAL LAYER 2 1 1 1 1 1 1"``), as the control
        parser would."""
        kind, numbers = layer_words(text, file, line)
        return cls.from_words(kind, numbers, file, line)


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
            height, width, depth, npw, nw = spec.kind.shape(spec, ph, pw, pd, prior_name)
            self.layers.append(Layer(spec, i, ph, pw, pd, height, width, depth, npw, nw, offset))
            offset += nw
            ph, pw, pd = height, width, depth
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
        specs = [LayerSpec.from_line(line) for line in lines if line.strip()]
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
        for layer in self.all_layers:
            out.extend(layer.kind.report(layer))
        out.append(f"{self.n_weights} Total weights for the entire model")
        return out

    def __repr__(self):
        return (f"Architecture({self.control_lines()!r}, rows={self.rows}, cols={self.cols}, "
                f"bands={self.bands}, n_classes={self.n_classes})")
