"""`convnet check` of a file that saves a model and loads it later; LOAD MODEL errors name the
control file and its line."""

import pytest
from click.testing import CliRunner

from convnet.cli import main

SAVE_THEN_LOAD = """MAKE IMAGE 6 6 1 3 30
CONVOLUTIONAL LAYER 2 1 1 1 1 1 1
FULLY CONNECTED LAYER 4
ANNEAL ITERS = 3
MAXITERS = 3
TRAIN
SAVE MODEL "m.cnm"
CLEAR
MAKE IMAGE 6 6 1 3 20
LOAD MODEL "m.cnm"
TEST
"""


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_check_accepts_save_then_load(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ctl = tmp_path / "saveload.ctl"
    ctl.write_text(SAVE_THEN_LOAD)
    result = invoke("check", ctl)
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "m.cnm").exists()            # check writes nothing
    # and the run it promised works
    result = invoke("run", ctl, "--out", tmp_path / "out", "--seed", "1", "--quiet",
                    "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "m.cnm").exists()


def test_check_still_knows_the_saved_shape(tmp_path, monkeypatch):
    """The model a LOAD will find is the one saved: a TEST on data of another size is refused."""
    monkeypatch.chdir(tmp_path)
    ctl = tmp_path / "bad.ctl"
    ctl.write_text(SAVE_THEN_LOAD.replace("MAKE IMAGE 6 6 1 3 20", "MAKE IMAGE 5 6 1 3 20"))
    result = invoke("check", ctl)
    assert result.exit_code == 2
    assert f"convnet: error: {ctl}:11: " in result.output


def test_check_refuses_a_load_of_a_model_never_saved(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ctl = tmp_path / "nosave.ctl"
    ctl.write_text(SAVE_THEN_LOAD.replace('SAVE MODEL "m.cnm"', 'SAVE MODEL "other.cnm"'))
    result = invoke("check", ctl)
    assert result.exit_code == 2
    line = result.output.strip().splitlines()[-1]
    assert line.startswith(f"convnet: error: {ctl}:10: model file '")
    assert "m.cnm' not found: looked for" in line and "where SAVE MODEL writes" in line


def test_load_model_error_names_the_control_file_and_line(tmp_path):
    (tmp_path / "junk.cnm").write_bytes(b"not a model")
    ctl = tmp_path / "load.ctl"
    ctl.write_text('MAKE IMAGE 6 6 1 3 20\n// a comment\nLOAD MODEL "junk.cnm"\nTEST\n')
    result = invoke("run", ctl, "--out", tmp_path / "out", "--device", "cpu")
    assert result.exit_code == 2
    line = result.output.strip().splitlines()[-1]
    assert line.startswith(f"convnet: error: {ctl}:3: model file '{tmp_path / 'junk.cnm'}': "), line


def test_a_model_saved_in_one_run_is_loaded_in_the_next_from_either_place(tmp_path):
    """SAVE MODEL writes under --out; LOAD MODEL looks beside the control file, then under
    --out, says which it used, and names both places when the file is in neither."""
    from convnet.errors import ConvnetError
    from convnet.session import run
    (tmp_path / "save.ctl").write_text("MAKE IMAGE 6 6 1 2 30\nFULLY CONNECTED LAYER 3\n"
                                       "ANNEAL ITERS = 2\nMAXITERS = 2\nTRAIN\nSAVE MODEL \"m.model\"\n")
    (tmp_path / "load.ctl").write_text("CLEAR\nLOAD MODEL \"m.model\"\nMAKE IMAGE 6 6 1 2 30\nTEST\n")
    out = tmp_path / "out"
    run([str(tmp_path / "save.ctl"), str(tmp_path / "load.ctl")], out=str(out), seed=1)
    log = (out / "CONVNET.LOG").read_text()
    assert f"Model loaded from {out / 'm.model'} (in the output folder)" in log
    (tmp_path / "m.model").write_bytes((out / "m.model").read_bytes())
    run([str(tmp_path / "load.ctl")], out=str(tmp_path / "second"), seed=1)
    log = (tmp_path / "second" / "CONVNET.LOG").read_text()
    assert f"Model loaded from {tmp_path / 'm.model'} (beside the control file)" in log
    (tmp_path / "m.model").unlink()
    with pytest.raises(ConvnetError) as info:
        run([str(tmp_path / "load.ctl")], out=str(tmp_path / "third"), seed=1)
    message = str(info.value)
    assert f"{tmp_path / 'load.ctl'}:2:" in message and "not found" in message
    assert str(tmp_path / "m.model") in message and str(tmp_path / "third" / "m.model") in message
