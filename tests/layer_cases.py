"""Small nets that isolate one layer kind, shared by the per-kind tests (test_layer_*.py).

Every kind is tried alone on the input image and again after a convolutional layer, so that its
delta into a prior layer (never formed for the input image) is exercised too."""

from convnet.architecture import KINDS, Architecture, LayerSpec

# numbers after each kind's keyword: asymmetric windows, padding and strides where a kind has them
NUMBERS = {
    "FC": [3],
    "LOCAL": [2, 1, 2, 1, 0, 1, 2],
    "CONV": [3, 2, 1, 1, 1, 2, 1],
    "POOLAVG": [2, 3, 2, 1],
    "POOLMAX": [3, 2, 1, 2],
}
ROWS, COLS, BANDS, CLASSES = 7, 8, 2, 3
PRIOR_LINE = "CONVOLUTIONAL LAYER 2 1 1 1 1 1 1"
PLACES = ("alone", "after-conv")


def kind_spec(kind):
    return LayerSpec.from_words(kind, NUMBERS[kind])


def kind_arch(kind, place):
    """The net for one kind in one place; the kind's layer is its last hidden layer."""
    specs = [kind_spec(kind)]
    if place == "after-conv":
        specs.insert(0, Architecture.from_lines([PRIOR_LINE], ROWS, COLS, BANDS, CLASSES).specs[0])
    return Architecture(specs, ROWS, COLS, BANDS, CLASSES)


def cases():
    """(kind, place) pairs and their test ids, e.g. "LOCAL-after-conv"."""
    pairs = [(k, p) for k in KINDS for p in PLACES]
    return pairs, [f"{k}-{p}" for k, p in pairs]


def layer_name(layer):
    return "output layer" if layer.is_output else f"layer {layer.index + 1} ({layer.kind})"
