"""CUDA graph capture (convnet/device/graphs.py) against a stand-in for the driver: no GPU."""

import gc

import pytest

from convnet.device.graphs import Graph


class _Driver:
    """Records the driver calls a Graph makes; fails the capture's end when told to."""

    def __init__(self, fail_end=False):
        self.calls = []
        self.fail_end = fail_end

    def call(self, name, *args):
        self.calls.append(name)
        if name == "cuStreamEndCapture" and self.fail_end:
            raise RuntimeError("cuStreamEndCapture failed")

    def _cuStreamEndCapture(self, *args):
        self.calls.append("cuStreamEndCapture (after an error)")

    def _cuGraphDestroy(self, *args):
        pass


class _Stream:
    handle = 1


def test_no_garbage_collection_while_capturing():
    """A collection during capture would free PyCUDA buffers, which capture forbids: the
    collector is off while record() runs and on again afterwards."""
    seen = []
    driver = _Driver()
    graph = Graph(driver, _Stream(), lambda: seen.append(gc.isenabled()))
    assert seen == [False] and gc.isenabled()
    assert driver.calls == ["cuStreamBeginCapture", "cuStreamEndCapture",
                            "cuGraphInstantiateWithFlags"]
    del graph


@pytest.mark.parametrize("where", ["record", "end"])
def test_the_collector_is_back_after_a_failed_capture(where):
    def record():
        if where == "record":
            raise ValueError("a launch failed")
    with pytest.raises((ValueError, RuntimeError)):
        Graph(_Driver(fail_end=where == "end"), _Stream(), record)
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    try:
        Graph(_Driver(), _Stream(), lambda: None)
        assert not gc.isenabled()
    finally:
        gc.enable()
