"""The session's command table: every command the parser can produce has a handler, found by name."""

import inspect

from convnet.control import COMMANDS
from convnet.session import Session
from convnet.sweep import EXPANDED_COMMANDS


def test_every_registry_command_has_a_handler():
    """Every command but those a sweep's expansion turns into other lines before a session runs."""
    names = {spec.command_name for spec in COMMANDS} - EXPANDED_COMMANDS | {"SET"}
    assert names == set(Session.HANDLERS)


def test_handlers_are_named_functions_of_a_session_and_a_command():
    """Each handler is a Session method or a module function (the DISPLAY commands), found by its
    name where it is defined, and takes (session, command)."""
    for name, handler in Session.HANDLERS.items():
        assert inspect.isfunction(handler), name
        home = inspect.getmodule(handler)
        assert (getattr(Session, handler.__name__, None) is handler
                or getattr(home, handler.__name__, None) is handler), name
        assert len(inspect.signature(handler).parameters) == 2, name


def test_session_module_has_no_name_mangled_dispatch():
    source = inspect.getsource(Session)
    assert "getattr(self" not in source
    assert "except ImportError" not in source
