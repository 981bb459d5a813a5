"""convnet: a command-line trainer for convolutional nets driven by plain-text control files."""

from ._version import __version__
from .architecture import Architecture
from .errors import ConvnetError


def __getattr__(name):
    # Model pulls in the numba kernels; load it on first use so that convnet.logs and
    # convnet.data stay light.
    if name == "Model":
        from .model import Model
        return Model
    if name in ("run", "check"):              # run / check control files, as the command line does
        from . import session
        return getattr(session, name)
    raise AttributeError(f"module 'convnet' has no attribute {name!r}")


__all__ = ["Architecture", "ConvnetError", "Model", "check", "run", "__version__"]
