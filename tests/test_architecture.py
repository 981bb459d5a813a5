"""Architecture: Equation 1-8 shapes, weight counts, offsets, penalty mask, the book's report."""

import numpy as np
import pytest

from convnet.architecture import CONV, FC, LOCAL, POOLAVG, POOLMAX, Architecture, LayerSpec
from convnet.errors import ConvnetError

MANUAL_LINES = [
    "CONVOLUTIONAL LAYER 6 1 1 1 1 1 1",
    "POOLED MAX LAYER 3 3 2 2",
    "LOCAL LAYER 3 1 1 1 1 1 1",
    "POOLED AVERAGE LAYER 3 3 2 2",
    "FULLY CONNECTED LAYER 4",
]

# The book's report for the manual example (p.166-167), line by line.
BOOK_REPORT = """\
Input has 12 rows, 12 columns, and 1 bands
Model architecture...
Model has 6 layers, including fully connected output
Layer 1 is convolutional, with 6 slices, each 12 high and 12 wide
Horz half-width=1, padding=1, stride=1
Vert half-width=1, padding=1, stride=1
864 neurons and 10 prior weights per slice gives 60 weights
Layer 2 is 3 by 3 pooling max, with stride 2 by 2, 5 high, 5 wide, and 6 deep
Layer 3 is locally connected, with 3 slices, each 5 high and 5 wide
Horz half-width=1, padding=1, stride=1
Vert half-width=1, padding=1, stride=1
75 neurons and 55 prior weights per neuron gives 4125 weights
Layer 4 is 3 by 3 pooling average, with stride 2 by 2, 2 high, 2 wide, and 3 deep
Layer 5 is fully connected, with 4 slices, each 1 high and 1 wide
4 neurons and 13 prior weights per neuron gives 52 weights
Layer 6 (output) is fully connected, with 6 slices (classes)
6 neurons and 5 prior weights per neuron gives 30 weights
4267 Total weights for the entire model"""


def test_manual_example_report_matches_the_book_line_for_line():
    arch = Architecture.from_lines(MANUAL_LINES, 12, 12, 1, 6)
    assert [line.strip() for line in arch.report()] == BOOK_REPORT.splitlines()
    assert arch.n_weights == 4267


def test_manual_example_shapes_and_offsets():
    arch = Architecture.from_lines(MANUAL_LINES, 12, 12, 1, 6)
    shapes = [(l.height, l.width, l.depth) for l in arch.all_layers]
    assert shapes == [(12, 12, 6), (5, 5, 6), (5, 5, 3), (2, 2, 3), (1, 1, 4), (1, 1, 6)]
    assert [l.n_prior_weights for l in arch.all_layers] == [10, 0, 55, 0, 13, 5]
    assert [l.n_weights for l in arch.all_layers] == [60, 0, 4125, 0, 52, 30]
    assert [l.weight_offset for l in arch.all_layers] == [0, 60, 60, 4185, 4185, 4237]
    assert arch.n_layers == 6 and arch.output.is_output


def test_penalty_mask_excludes_every_bias():
    arch = Architecture.from_lines(MANUAL_LINES, 12, 12, 1, 6)
    mask = arch.penalty_mask()
    n_biases = 6 + 75 + 4 + 6
    assert mask.sum() == arch.n_weights - n_biases
    # the conv layer's biases are every 10th weight
    assert np.all(mask[9:60:10] == 0) and mask[0] == 1


def test_weight_counts_of_every_reference_case(reference_index):
    assert reference_index["cases"]
    for case in reference_index["cases"]:
        arch = Architecture.from_lines(case["control_lines"], case["rows"], case["cols"],
                                       case["bands"], case["n_classes"])
        assert arch.n_weights == case["n_weights"], case["name"]


@pytest.mark.parametrize("prior,filt,pad,stride,expect", [
    (12, 3, 1, 1, 12), (12, 3, 0, 1, 10), (9, 3, 0, 2, 4), (10, 3, 1, 3, 4), (7, 7, 0, 1, 1),
    (5, 2, 0, 2, 2),
])
def test_equation_1_8_with_inexact_division(prior, filt, pad, stride, expect):
    hw = (filt - 1) // 2
    if filt % 2:
        spec = LayerSpec(CONV, slices=2, hw_v=hw, hw_h=hw, pad_v=pad, pad_h=pad,
                         stride_v=stride, stride_h=stride)
    else:
        spec = LayerSpec(POOLMAX, width_v=filt, width_h=filt, stride_v=stride, stride_h=stride)
    arch = Architecture([spec], prior, prior, 1, 2)
    assert arch.layers[0].height == expect and arch.layers[0].width == expect


def test_asymmetric_layer_and_no_hidden_layer():
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 3 2 1 1 0 1 2"], 9, 12, 3, 4)
    layer = arch.layers[0]
    assert (layer.height, layer.width) == ((9 - 5 + 2) // 1 + 1, (12 - 3 + 0) // 2 + 1)
    assert layer.n_prior_weights == 5 * 3 * 3 + 1
    bare = Architecture([], 4, 4, 2, 3)
    assert bare.n_weights == 3 * (32 + 1) and bare.n_layers == 1
    assert bare.report()[-1] == "99 Total weights for the entire model"


def test_local_and_fc_weight_counts():
    arch = Architecture.from_lines(["LOCAL LAYER 2 1 1 1 1 1 1", "FULLY CONNECTED LAYER 5"], 7, 7, 1, 3)
    local, fc = arch.layers
    assert local.n_weights == 7 * 7 * 2 * 10
    assert fc.n_prior_weights == 7 * 7 * 2 + 1 and fc.n_weights == 5 * 99
    assert arch.layers[0].kind == LOCAL and fc.kind == FC


@pytest.mark.parametrize("lines,rows,message", [
    (["CONVOLUTIONAL LAYER 2 3 3 0 0 1 1"], 5, "larger than"),
    (["POOLED AVERAGE LAYER 6 6 1 1"], 5, "larger than"),
    (["FULLY CONNECTED LAYER 3", "LOCAL LAYER 2 1 1 0 0 1 1"], 5, "layer 1"),
])
def test_filter_larger_than_prior_is_refused(lines, rows, message):
    with pytest.raises(ConvnetError, match=message):
        Architecture.from_lines(lines, rows, rows, 1, 2)


def test_layer_spec_round_trips_to_its_control_line():
    for line in MANUAL_LINES:
        arch = Architecture.from_lines([line], 12, 12, 1, 2)
        assert arch.control_lines() == [line]
    assert POOLAVG != POOLMAX


# A saved model's layer lines are read by the architecture itself (it sits below the control
# parser); every line, good or bad, must read as the control parser reads it.
LAYER_LINE_CASES = [
    "CONVOLUTIONAL LAYER 6 1 1 1 1 1 1", "convolutional   layer 6 1 1 1 1 1 1",
    "FULLY CONNECTED LAYER 5", "LOCAL LAYER 2 1 1 1 1 1 1", "POOLED MAX LAYER 2 2 2 2",
    "POOLED AVERAGE LAYER 2 2 1 1", "FULLY CONNECTED LAYER", "FULLY CONNECTED LAYER 5 6",
    "FULLY CONNECTED LAYER 0", "FULLY CONNECTED LAYER x", "FULLY CONNECTED LAYER 2.5",
    "LOCAL LAYER 2 -1 1 1 1 1 1", "POOLED MAX LAYER 2 2 0 1", "FULLY CONNECTED LAYER " + "9" * 101,
    "CONVOLUTIONAL LAYER 6 1 1 1 1 1", "TRAIN", "CONVOLUTIONAL LAYER 1 1 1 5 5 1 1",
]


@pytest.mark.parametrize("text", LAYER_LINE_CASES)
def test_layer_lines_read_as_the_control_parser_reads_them(text):
    from convnet.control import parse_layer_line as control_reads
    outcomes = []
    for parse in (LayerSpec.from_line, control_reads):
        try:
            outcomes.append(("spec", parse(text, "model.cnv", 3)))
        except ConvnetError as e:
            outcomes.append(("error", str(e)))
    assert outcomes[0] == outcomes[1]
