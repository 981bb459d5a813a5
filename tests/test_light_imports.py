"""The log and data modules load without the compute side (numba), so tools that only read logs
or data start quickly."""

import subprocess
import sys

import pytest

LIGHT = ["convnet", "convnet.logs", "convnet.logs.reader", "convnet.logs.writer",
         "convnet.logs.weights", "convnet.logs.timing", "convnet.data", "convnet._version"]


@pytest.mark.parametrize("module", LIGHT)
def test_module_imports_without_numba(module):
    code = (f"import sys, {module}\n"
            "heavy = sorted(m for m in sys.modules if m == 'numba' or m.startswith('numba.'))\n"
            "print(len(heavy))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0", f"importing {module} loaded numba"


def test_model_is_still_reachable_from_the_package():
    code = "import sys, convnet\nprint(convnet.Model.__name__, 'numba' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["Model", "True"]


def test_version_is_one_value():
    import convnet
    from convnet._version import __version__
    assert convnet.__version__ == __version__
