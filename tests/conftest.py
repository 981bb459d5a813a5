"""Shared fixtures: the golden reference vectors and small random problems."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from convnet.architecture import Architecture, LayerSpec

# A run's figures are drawn in the test's own process, which imports matplotlib once, rather than
# by a drawing process of each run's own (tests/test_figures.py tests that process).
os.environ.setdefault("CONVNET_DRAW_INLINE", "1")

# The golden vectors made by the author's C++ code (see its README.md), kept in the repository so
# that every checkout runs them; this is the one place the tests look for them.
REFERENCE_DIR = Path(__file__).resolve().parent / "fixtures" / "reference"


def reference_files():
    """Every golden-vector file; a missing or empty folder is an error, never a skip."""
    files = sorted(REFERENCE_DIR.glob("*.npz"))
    if not files:
        raise FileNotFoundError(f"no golden vectors (*.npz) in {REFERENCE_DIR}")
    return files


class ReferenceCase:
    """One golden-vector file: the problem, its architecture and every stored array."""

    def __init__(self, path):
        self.path = Path(path)
        self.name = self.path.stem
        with np.load(self.path, allow_pickle=False) as d:
            self.arrays = {k: d[k] for k in d.files}
        a = self.arrays
        self.lines = [str(s) for s in a["control_lines"]]
        self.rows, self.cols = int(a["rows"]), int(a["cols"])
        self.bands, self.n_classes = int(a["bands"]), int(a["n_classes"])
        self.wpen = float(a["wpen"])
        self.inputs, self.classes, self.weights = a["inputs"], a["classes"], a["weights"]
        self.outputs, self.gradient = a["outputs"], a["gradient"]
        self.criterion = float(a["criterion"])
        self.arch = Architecture.from_lines(self.lines, self.rows, self.cols, self.bands,
                                            self.n_classes)

    def activations(self):
        """{(layer, case): activations} for the cases stored."""
        out = {}
        for k, v in self.arrays.items():
            if k.startswith("act_L"):
                layer, case = k[5:].split("_case")
                out[int(layer), int(case)] = v
        return out

    def poolmax_ids(self):
        """{(layer, case): winner ids} for the max-pooling layers and cases stored."""
        out = {}
        for k, v in self.arrays.items():
            if k.startswith("poolmax_id_L"):
                layer, case = k[len("poolmax_id_L"):].split("_case")
                out[int(layer), int(case)] = v
        return out


def pytest_generate_tests(metafunc):
    """Tests asking for ``reference_case`` run once per golden file."""
    if "reference_case" in metafunc.fixturenames:
        files = reference_files()
        metafunc.parametrize("reference_case", files, ids=[f.stem for f in files], indirect=True)


@pytest.fixture(scope="session")
def reference_index():
    """The golden vectors' index.json: the cases and their conventions."""
    return json.loads((REFERENCE_DIR / "index.json").read_text())


@pytest.fixture
def reference_case(request):
    return ReferenceCase(request.param)


# ------------------------------------------------------------------------ random problems
def random_architecture(rng, max_layers=4):
    """A small random architecture: any stack of the five layer kinds (possibly none), random
    half-widths, padding up to the half-width, strides 1-3 (division need not be exact),
    pooling windows 1-3, 1-3 bands, 2-4 classes."""
    rows, cols = int(rng.integers(3, 10)), int(rng.integers(3, 10))
    bands = int(rng.integers(1, 4))
    n_classes = int(rng.integers(2, 5))
    specs = []
    h, w, d = rows, cols, bands
    for _ in range(int(rng.integers(0, max_layers + 1))):
        kinds = ["FC", "LOCAL", "CONV", "POOLAVG", "POOLMAX"]
        kind = kinds[int(rng.integers(len(kinds)))]
        if kind == "FC":
            spec = LayerSpec("FC", slices=int(rng.integers(1, 5)))
            h, w, d = 1, 1, spec.slices
        elif kind in ("LOCAL", "CONV"):
            hv = int(rng.integers(0, min(2, (h - 1) // 2 + 1) + 1))
            hh = int(rng.integers(0, min(2, (w - 1) // 2 + 1) + 1))
            pv, ph = int(rng.integers(0, hv + 1)), int(rng.integers(0, hh + 1))
            if h - (2 * hv + 1) + 2 * pv < 0:
                pv = hv
            if w - (2 * hh + 1) + 2 * ph < 0:
                ph = hh
            sv, sh = int(rng.integers(1, 4)), int(rng.integers(1, 4))
            spec = LayerSpec(kind, slices=int(rng.integers(1, 4)), hw_v=hv, hw_h=hh, pad_v=pv,
                             pad_h=ph, stride_v=sv, stride_h=sh)
            h = (h - (2 * hv + 1) + 2 * pv) // sv + 1
            w = (w - (2 * hh + 1) + 2 * ph) // sh + 1
            d = spec.slices
        else:
            pv, ph = int(rng.integers(1, min(3, h) + 1)), int(rng.integers(1, min(3, w) + 1))
            sv, sh = int(rng.integers(1, 4)), int(rng.integers(1, 4))
            spec = LayerSpec(kind, width_v=pv, width_h=ph, stride_v=sv, stride_h=sh)
            h = (h - pv) // sv + 1
            w = (w - ph) // sh + 1
        specs.append(spec)
    return Architecture(specs, rows, cols, bands, n_classes)


def random_problem(seed, n_cases=3, max_layers=4, weight_scale=0.5):
    """(arch, weights, inputs, classes, wpen) for a random small problem."""
    rng = np.random.default_rng(seed)
    arch = random_architecture(rng, max_layers)
    weights = rng.normal(0.0, weight_scale, arch.n_weights)
    inputs = rng.uniform(-1.0, 1.0, (n_cases, arch.bands, arch.rows, arch.cols))
    classes = rng.integers(0, arch.n_classes, n_cases)
    wpen = float(rng.choice([0.0, 0.01, 0.1]))
    return arch, weights, inputs, classes, wpen


@pytest.fixture
def make_problem():
    """Factory fixture: make_problem(seed, n_cases=3, max_layers=4) -> (arch, w, x, y, wpen)."""
    return random_problem
