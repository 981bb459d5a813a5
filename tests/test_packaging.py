"""The wheel holds every file the package reads, and an installed copy runs from another folder.

Builds the wheel of a copy of this checkout (no network: setuptools and wheel as installed),
compares its convnet/ files with the source tree's, installs it into an empty folder and runs the
`convnet` command it installs on a tiny control file."""

import configparser
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from convnet._version import DISTRIBUTION, __version__

ROOT = Path(__file__).resolve().parents[1]
# What a checkout holds that is not part of the package: caches and build outputs.
NOT_SHIPPED_DIRS = {"__pycache__", ".numba-cache"}
NOT_SHIPPED_SUFFIXES = (".pyc", ".nbi", ".nbc")

pytestmark = pytest.mark.slow


def source_files():
    """Every file under convnet/ that an installed copy must hold, relative to the root."""
    found = set()
    for folder, dirs, files in os.walk(ROOT / "convnet"):
        dirs[:] = [d for d in dirs if d not in NOT_SHIPPED_DIRS]
        for name in files:
            if not name.endswith(NOT_SHIPPED_SUFFIXES):
                found.add(Path(folder, name).relative_to(ROOT).as_posix())
    return found


def _copy_checkout(target):
    """The files a build reads, without build outputs or caches of this checkout."""
    ignore = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", *NOT_SHIPPED_DIRS,
                                    *(f"*{s}" for s in NOT_SHIPPED_SUFFIXES), "out")
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, target / name)
    shutil.copytree(ROOT / "convnet", target / "convnet", ignore=ignore)


def _can_build_here():
    """setuptools builds wheels by itself from 70.1 on; before that it needs the wheel package."""
    import importlib.util
    try:
        import setuptools
    except ImportError:
        return False
    version = tuple(int(p) for p in setuptools.__version__.split(".")[:2] if p.isdigit())
    has_wheel = importlib.util.find_spec("wheel") is not None
    return version >= (70, 1) or (version >= (61,) and has_wheel)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    source = tmp_path_factory.mktemp("source")
    _copy_checkout(source)
    wheels = tmp_path_factory.mktemp("wheels")
    # offline with the setuptools and wheel installed here; else pip fetches pyproject's own
    offline = ["--no-build-isolation", "--no-index"] if _can_build_here() else []
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *offline,
                           "-w", str(wheels), str(source)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (built,) = wheels.glob("*.whl")
    return built


def test_the_wheel_is_named_and_versioned_as_the_package(wheel):
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    assert setup["metadata"]["name"] == DISTRIBUTION
    assert wheel.name.startswith(f"{DISTRIBUTION.replace('-', '_')}-{__version__}-")


def test_the_wheel_holds_every_file_of_the_package(wheel):
    with zipfile.ZipFile(wheel) as archive:
        shipped = {n for n in archive.namelist() if n.startswith("convnet/")}
    expected = source_files()
    assert "convnet/device/kernels/common.cuh" in expected
    assert sorted(expected - shipped) == [], "left out of the wheel"
    assert sorted(shipped - expected) == [], "in the wheel but not in the source tree"


def test_the_installed_wheel_runs_from_another_folder(wheel, tmp_path):
    target = tmp_path / "installed"
    target.mkdir()
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                           "--target", str(target), str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ctl = elsewhere / "tiny.ctl"
    ctl.write_text("MAKE IMAGE 6 6 1 2 12\nFULLY CONNECTED LAYER 2\nANNEAL ITERS = 2\n"
                   "MAXITERS = 2\nTRAIN\n")
    env = dict(os.environ, PYTHONPATH=str(target), NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    env.pop("PYTHONHOME", None)
    where = subprocess.run([sys.executable, "-c", "import convnet; print(convnet.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, check=True)
    assert where.stdout.strip() == str(target / "convnet" / "__init__.py")
    # every CUDA source the GPU path compiles reads (common.cuh inlined) from the installed copy
    kernels = subprocess.run([sys.executable, "-c",
                              "from convnet.device.runtime import KERNEL_FILES, kernel_source\n"
                              "print(sum(len(kernel_source(n)) > 0 for n in KERNEL_FILES))"],
                             cwd=elsewhere, env=env, capture_output=True, text=True)
    assert kernels.returncode == 0, kernels.stderr[-3000:]
    from convnet.device.runtime import KERNEL_FILES
    assert kernels.stdout.strip() == str(len(KERNEL_FILES))
    command = target / "bin" / "convnet"                       # the installed entry point
    said = []
    for _ in range(2):          # a cold Numba cache (a fresh install), then a warm one
        proc = subprocess.run([str(command), "run", "tiny.ctl", "--out", "results", "--seed", "1",
                               "--threads", "1", "--overwrite"],
                              cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        lines = proc.stdout.splitlines()
        said.append(lines[0] == "compiling host kernels (first run only)")
        assert lines[-1] == ("Open the report in a browser: "
                             f"{elsewhere / 'results' / 'report.html'}")
    assert said == [True, False]
    log = (elsewhere / "results" / "CONVNET.LOG").read_text()
    assert "TRAIN" in log and "Total misclassification" in log
