"""The session's signal counter: a first Ctrl-C asks the phase to move on, a second one or a
SIGTERM ends the run, and an end whose exception was lost is raised again at the next check."""

import signal

import pytest

from convnet.errors import Interrupted
from convnet.interrupt import Interrupt


def test_first_press_asks_the_phase_to_move_on_and_the_second_ends_the_run():
    intr = Interrupt()
    with intr.phase():
        assert not intr.stop_requested()
        intr.handler(signal.SIGINT, None)
        assert intr.stop_requested()
        with pytest.raises(Interrupted):
            intr.handler(signal.SIGINT, None)


def test_a_press_outside_a_phase_ends_the_run():
    with pytest.raises(Interrupted):
        Interrupt().handler(signal.SIGINT, None)


def test_an_end_lost_in_a_callback_is_raised_at_the_next_check():
    """A compiled library that runs a Python callback (Numba's compiler) prints and drops an
    exception raised there, so SIGTERM's Interrupted could vanish and the run go on."""
    intr = Interrupt()
    with intr.phase():
        try:                        # what the library does with the handler's exception
            intr.terminate(signal.SIGTERM, None)
        except Interrupted:
            pass
        with pytest.raises(Interrupted) as caught:
            intr.stop_requested()
    assert "SIGTERM" in str(caught.value)
