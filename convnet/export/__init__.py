"""Exports of a trained model to other programs' formats (ONNX: :mod:`convnet.export.onnx`).

The export modules need the ``onnx`` extra (``pip install 'convnet-trainer[onnx]'``); importing
this package does not, so the session and the command line can say so in one line when it is
missing.
"""

from ..errors import ConvnetError

ONNX_EXTRA = "pip install 'convnet-trainer[onnx]'"


def require_onnx():
    """The ``onnx`` package, or ConvnetError saying how to install it."""
    try:
        import onnx
    except ImportError:
        raise ConvnetError(f"ONNX export needs the onnx package: {ONNX_EXTRA}") from None
    return onnx
