"""The log and data modules load without the compute side (numba), so tools that only read logs
or data start quickly."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

LIGHT = ["convnet", "convnet.logs", "convnet.logs.reader", "convnet.logs.tables",
         "convnet.logs.writer", "convnet.logs.weights", "convnet.logs.timing", "convnet.data",
         "convnet._version"]


@pytest.mark.parametrize("module", LIGHT)
def test_module_imports_without_numba(module):
    code = (f"import sys, {module}\n"
            "heavy = sorted(m for m in sys.modules if m == 'numba' or m.startswith('numba.'))\n"
            "print(len(heavy))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0", f"importing {module} loaded numba"


def test_model_is_still_reachable_from_the_package():
    """Numba is loaded by a host model, not by the package or the Model class."""
    code = ("import sys, numpy as np, convnet\nprint(convnet.Model.__name__, 'numba' in sys.modules)\n"
            "from convnet.architecture import Architecture\n"
            "convnet.Model(Architecture.from_lines(['FULLY CONNECTED LAYER 2'], 2, 2, 1, 2), device='cpu')\n"
            "print('numba' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["Model", "False", "True"]


# what a GPU run imports: the command line, the session, the trainer and the device path
GPU_RUN = ["convnet.cli", "convnet.session", "convnet.model", "convnet.train.trainer",
           "convnet.train.conjgrad", "convnet.device.backend", "convnet.vectors"]


def test_a_gpu_run_imports_neither_numba_nor_the_host_kernels():
    code = (f"import sys, {', '.join(GPU_RUN)}\n"
            "heavy = sorted(m for m in sys.modules if m == 'numba' or m.startswith('numba.')\n"
            "               or m.startswith('convnet.host.') and m != 'convnet.host.threads')\n"
            "print(heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_command_line_imports_no_plotting():
    code = "import sys, convnet.cli\nprint('matplotlib' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_version_is_one_value():
    """convnet/_version.py alone says the version; the package, `convnet --version` and the
    distribution's metadata (setup.cfg) read it from there."""
    import configparser
    import convnet
    from convnet._version import __version__
    root = Path(__file__).resolve().parents[1]
    assigned = [p.relative_to(root).as_posix() for p in sorted((root / "convnet").rglob("*.py"))
                if re.search(r"^\s*__version__\s*=", p.read_text(encoding="utf-8"), re.M)]
    assert assigned == ["convnet/_version.py"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)
    assert convnet.__version__ is __version__
    setup = configparser.ConfigParser()
    setup.read(root / "setup.cfg")
    assert setup["metadata"]["version"] == "attr: convnet._version.__version__"
    out = subprocess.run([sys.executable, "-m", "convnet", "--version"], capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == f"convnet, version {__version__}"
