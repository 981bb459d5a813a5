"""PRINT WEIGHTS in the book's layout (p.169-172)."""

import numpy as np

from convnet.architecture import Architecture
from convnet.logs.weights import format_weights

MANUAL = ["CONVOLUTIONAL LAYER 6 1 1 1 1 1 1", "POOLED MAX LAYER 3 3 2 2", "LOCAL LAYER 3 1 1 1 1 1 1",
          "POOLED AVERAGE LAYER 3 3 2 2", "FULLY CONNECTED LAYER 4"]


def _manual():
    arch = Architecture.from_lines(MANUAL, 12, 12, 1, 6)
    return arch, np.arange(arch.n_weights, dtype=np.float64) / 1000.0


def test_manual_example_counts_and_headings():
    arch, w = _manual()
    lines = format_weights(arch, w)
    # every weight one line; headings: 6 conv slices, 1 pool, 75 local neurons, 1 pool, 4 + 6 FC
    assert arch.n_weights == 4267
    assert len(lines) == 4267 + 6 + 1 + 75 + 1 + 4 + 6
    assert lines[0] == "Layer 1 of 6 (Convolutional) Slice 1 of 6"
    assert lines[1] == "     0.000000 Input band 1 Neuron 1"
    assert lines[9] == "     0.008000 Input band 1 Neuron 9"
    assert lines[10] == "     0.009000 BIAS"
    assert lines[11] == "Layer 1 of 6 (Convolutional) Slice 2 of 6"
    assert lines[66] == "Layer 2 of 6 (Max pool) 5 rows by 5 cols by 6 slices"
    assert lines[67] == "Layer 3 of 6 (Local) Slice 1 of 3 Row 1 of 5 Col 1 of 5"
    assert lines[68] == "     0.060000 Prior layer slice 1 Neuron 1"
    assert lines[68 + 9] == "     0.069000 Prior layer slice 2 Neuron 1"
    assert lines[68 + 53] == "     0.113000 Prior layer slice 6 Neuron 9"
    assert lines[68 + 54] == "     0.114000 BIAS"
    assert lines[68 + 55] == "Layer 3 of 6 (Local) Slice 1 of 3 Row 1 of 5 Col 2 of 5"
    assert "Layer 3 of 6 (Local) Slice 3 of 3 Row 5 of 5 Col 5 of 5" in lines
    i = lines.index("Layer 4 of 6 (Avg pool) 2 rows by 2 cols by 3 slices")
    assert lines[i + 1] == "Layer 5 of 6 (Full) Slice (this neuron) 1 of 4"
    assert lines[i + 2].endswith(" Prior layer slice 1 Neuron 1")
    assert lines[i + 5].endswith(" Prior layer slice 1 Neuron 4")
    assert lines[i + 6].endswith(" Prior layer slice 2 Neuron 1")
    assert lines[i + 14].endswith(" BIAS")
    j = lines.index("Layer 6 of 6 (Full) Slice (this neuron) 1 of 6")
    assert [l.split(" ", 6)[-1] for l in lines[j + 1:j + 6]] == [
        "Prior layer slice 1 Neuron 1", "Prior layer slice 2 Neuron 1",
        "Prior layer slice 3 Neuron 1", "Prior layer slice 4 Neuron 1", "BIAS"]
    assert lines[-1] == f"     {w[-1]:.6f} BIAS"


def test_values_in_host_order():
    arch, _ = _manual()
    w = np.random.default_rng(0).normal(size=arch.n_weights)
    values = [float(l.split()[0]) for l in format_weights(arch, w) if not l.startswith("Layer")]
    assert np.allclose(values, w, atol=5e-7)


def test_fc_on_input_and_multiband_conv_names():
    arch = Architecture.from_lines(["FULLY CONNECTED LAYER 2"], 2, 3, 2, 3)
    lines = format_weights(arch, np.zeros(arch.n_weights))
    assert lines[0] == "Layer 1 of 2 (Full) Slice (this neuron) 1 of 2"
    assert lines[1] == "     0.000000 Input band 1 Neuron 1"
    assert lines[6] == "     0.000000 Input band 1 Neuron 6"
    assert lines[7] == "     0.000000 Input band 2 Neuron 1"
    assert lines[13] == "     0.000000 BIAS"
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 1 0 1 0 0 1 1"], 4, 4, 3, 2)
    lines = format_weights(arch, -np.ones(arch.n_weights))
    assert lines[1:4] == ["     -1.000000 Input band 1 Neuron 1", "     -1.000000 Input band 1 Neuron 2",
                          "     -1.000000 Input band 1 Neuron 3"]
    assert lines[4] == "     -1.000000 Input band 2 Neuron 1"


def test_output_only_model():
    arch = Architecture([], 2, 2, 1, 2)
    lines = format_weights(arch, np.ones(arch.n_weights))
    assert lines[0] == "Layer 1 of 1 (Full) Slice (this neuron) 1 of 2"
    assert len(lines) == 2 * (1 + 4 + 1)
