"""The package version, in a module of its own so that light modules (logs, data) can name it
without importing the compute side."""

__version__ = "0.1.0"

# The name pip installs this package under ("convnet" on the package index is another project);
# the import name and the command stay ``convnet``.
DISTRIBUTION = "convnet-trainer"


def pip_install(extra):
    """The command that adds an optional part (an extra of setup.cfg), for hints in messages."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"
