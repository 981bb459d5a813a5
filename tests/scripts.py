"""Loading a script of the checkout (benchmarks/, tests/) as a module, for tests of its parts."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script(relative_path, name):
    """The module of the script at ``relative_path`` (from the checkout's root), run as ``name``."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, relative_path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
