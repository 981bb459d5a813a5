"""convnet: a command-line trainer for convolutional nets driven by plain-text control files."""

__version__ = "0.1.0"

from .architecture import Architecture  # noqa: E402
from .errors import ConvnetError  # noqa: E402
from .model import Model  # noqa: E402

__all__ = ["Architecture", "ConvnetError", "Model", "__version__"]
