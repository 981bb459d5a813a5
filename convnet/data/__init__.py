"""Data readers: MAKE IMAGE, MNIST, CIFAR-10 and time series, all giving a :class:`Dataset`."""

from .cifar import read_c10
from .dataset import Dataset
from .mnist import read_images, read_labels
from .series import SeriesInfo, SeriesSettings, read_series
from .synthetic import make_image

__all__ = ["Dataset", "make_image", "read_images", "read_labels", "read_c10", "read_series",
           "SeriesSettings", "SeriesInfo"]
