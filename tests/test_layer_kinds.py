"""The layer-kind registry: each kind's keyword, numbers, shapes, weights and wording, and its
bindings to every compute path."""

import pytest

from convnet.architecture import KINDS, Architecture, kind_named
from convnet.control import COMMANDS, parse_layer_line
from layer_cases import BANDS, CLASSES, COLS, NUMBERS, ROWS, kind_arch, kind_spec

KIND_IDS = [str(k) for k in KINDS]


def test_every_kind_has_test_numbers():
    assert set(NUMBERS) == set(KINDS)


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_keyword_round_trip(kind):
    spec = kind_spec(kind)
    line = spec.control_line()
    assert line == " ".join([kind.keyword] + [str(v) for v in NUMBERS[kind]])
    again = parse_layer_line(line)
    assert again == spec and again.kind is kind
    assert sum(1 for c in COMMANDS if c.phrase == kind.keyword) == 1


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_a_kind_is_its_name(kind):
    assert kind == str(kind) and kind_named(str(kind)) is kind
    assert {str(kind): 1}[kind] == 1


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_numbers_out_of_range_name_the_problem(kind):
    from convnet.errors import ConvnetError
    low = [0] * len(kind.arg_names)
    with pytest.raises(ConvnetError):
        parse_layer_line(" ".join([kind.keyword] + [str(v) for v in low]), "x.ctl", 4)


# Equation 1-8 by hand for NUMBERS on a 7 x 8 x 2 input: (height, width, depth, weights per
# neuron with the bias, weights of the layer)
SHAPES = {
    "FC": (1, 1, 3, 7 * 8 * 2 + 1, 3 * 113),
    "LOCAL": ((7 - 3 + 2) // 1 + 1, (8 - 5) // 2 + 1, 2, 3 * 5 * 2 + 1, 7 * 2 * 2 * 31),
    "CONV": ((7 - 5 + 2) // 2 + 1, (8 - 3 + 2) // 1 + 1, 3, 5 * 3 * 2 + 1, 3 * 31),
    "POOLAVG": ((7 - 2) // 2 + 1, (8 - 3) // 1 + 1, 2, 0, 0),
    "POOLMAX": ((7 - 3) // 1 + 1, (8 - 2) // 2 + 1, 2, 0, 0),
}


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_shape_and_weight_count(kind):
    arch = kind_arch(kind, "alone")
    layer = arch.layers[0]
    got = (layer.height, layer.width, layer.depth, layer.n_prior_weights, layer.n_weights)
    assert got == SHAPES[kind]
    assert len(kind.weight_sets(layer)) * layer.n_prior_weights == layer.n_weights
    assert arch.n_weights == layer.n_weights + arch.output.n_weights
    assert arch.output.n_prior_weights == layer.n_neurons + 1


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_report_names_the_layer(kind):
    arch = kind_arch(kind, "alone")
    lines = kind.report(arch.layers[0])
    assert lines[0].startswith("Layer 1 is ")
    assert lines == arch.report()[3:3 + len(lines)]


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_bindings_load(kind):
    arch = kind_arch(kind, "after-conv")
    layer = arch.layers[1]
    host = kind.host_layer(layer)
    assert host.n_out == layer.n_neurons
    for step in ("step_forward", "step_forward_t", "step_gradient", "step_delta"):
        assert callable(getattr(host, step))
    ref = kind.reference_layer(layer)
    for step in ("forward", "delta_to_prior", "gradient"):
        assert callable(getattr(ref, step))
    assert callable(kind.onnx_layer(layer).emit)        # its ONNX nodes (convnet/export)


def test_capabilities_are_consistent():
    for kind in KINDS:
        assert kind.applies_tanh == kind.has_weights
        if kind.keeps_winners or kind.commutes_with_tanh:
            assert not kind.has_weights
        if kind.shares_weights:
            assert kind.has_weights


def test_output_layer_report():
    arch = Architecture.from_lines([], ROWS, COLS, BANDS, CLASSES)
    assert arch.report()[3] == f"Layer 1 (output) is fully connected, with {CLASSES} slices (classes)"


def test_kernel_sources_and_tests_named_by_each_kind_exist():
    from pathlib import Path
    import convnet.device
    folder = Path(convnet.device.__file__).parent / "kernels"
    for kind in KINDS:
        for name in kind.device_kernels:
            assert (folder / name).is_file(), (kind, name)
        assert kind.device_kernels, kind
        for test in kind.tests:
            assert (Path(__file__).parent.parent / test).is_file()


def test_kinds_survive_pickling_as_the_same_objects():
    import pickle
    arch = kind_arch("POOLMAX", "after-conv")
    again = pickle.loads(pickle.dumps(arch))
    assert [L.kind for L in again.layers] == [L.kind for L in arch.layers]
    assert all(a.kind is b.kind for a, b in zip(again.layers, arch.layers))
    assert again.report() == arch.report()
