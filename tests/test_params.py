"""Typed parameters (convnet/params.py) and how the session hands them down."""

import pytest

from convnet import control
from convnet.params import (ALL_DEVICES, DEFAULTS, PARAMETER_DEFS, DeviceParams, Params,
                            TrainingParams, group_fields, parse_devices)
from convnet.session import Session


def test_defaults_and_phrases_round_trip():
    params = Params()
    assert params.phrases() == DEFAULTS
    assert list(params.phrases()) == [definition.phrase for definition in PARAMETER_DEFS]
    given = dict(DEFAULTS, **{"WPEN": 0.01, "MAX BATCH": 17, "CUDA DEVICES": "0,1", "THREADS": 3})
    typed = Params.from_phrases(given)
    assert typed.phrases() == given
    assert typed.training == TrainingParams(wpen=0.01)
    assert typed.device == DeviceParams(max_batch=17, cuda_devices="0,1")
    assert typed.threads == 3 and typed.seed is None


def test_every_parameter_has_one_typed_home():
    homes = [(definition.group, definition.attr) for definition in PARAMETER_DEFS]
    assert len(set(homes)) == len(homes)
    for group in ("training", "device", "series"):
        assert group_fields(group) == [attr for home, attr in homes if home == group]


def test_replace_and_unknown_phrases():
    params = Params().replace(**{"CUDA DEVICES": "ALL", "RANDOM SEED": 12})
    assert params.device.cuda_devices == "ALL" and params.seed == 12
    assert Params().device.cuda_devices is None
    with pytest.raises(KeyError):
        Params.from_phrases({"NOT A PARAMETER": 1})


@pytest.mark.parametrize("text, canonical", [("0,1", "0,1"), (" 2 , 0 ", "2,0"), ("all", "ALL")])
def test_parse_devices(text, canonical):
    assert parse_devices(text) == canonical


@pytest.mark.parametrize("text", ["", "0,0", "-1", "a", "1,,2"])
def test_parse_devices_refuses(text):
    with pytest.raises(ValueError):
        parse_devices(text)


def test_the_parser_re_exports_the_helpers():
    assert control.parse_devices is parse_devices and control.ALL_DEVICES == ALL_DEVICES
    assert control.DEFAULT_PARAMETERS is DEFAULTS


def test_session_keeps_phrases_and_hands_down_typed_values():
    session = Session(check_only=True, seed=5, gpus="1")
    for text in ("WPEN = 0.01", "MAX ITERS = 7", "SERIES WINDOW = 9", "CUDA DEVICES = 0"):
        session.execute(control.parse_line(text))
    assert session.params == dict(DEFAULTS, **{"WPEN": 0.01, "MAXITERS": 7, "SERIES WINDOW": 9,
                                                "CUDA DEVICES": "0"})
    settings = session.settings()
    assert settings.phrases() == session.params            # what results.json records
    assert settings.training.maxiters == 7 and settings.series.window == 9
    assert settings.seed is None
    in_force = session.params_in_force()                    # model, device, CUDA.LOG
    assert in_force.device.cuda_devices == "1" and in_force.seed == 5
    assert in_force.training == settings.training
