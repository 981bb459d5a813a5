"""The package version, in a module of its own so that light modules (logs, data) can name it
without importing the compute side."""

__version__ = "0.1.0"
