"""The host compute path: float64 kernels for every layer family, run on threads over cases.

:mod:`convnet.host.reference` holds the plain per-case algorithms of the book's chapter 2;
:class:`convnet.host.backend.HostBackend` is the fast path used by :class:`convnet.Model`.
"""
