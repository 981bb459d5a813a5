"""No run replaces an earlier run's results unless asked (convnet/runfolder.py and `convnet run`)."""

import json
import os
import subprocess
import sys

import pytest

from convnet.errors import ConvnetError
from convnet.runfolder import check_control_files, choose_out, earlier_run, new_run_folder

SMALL = ("MAKE IMAGE 6 6 1 2 40\nFULLY CONNECTED LAYER 3\nANNEAL ITERS = 3\nMAXITERS = 2\n"
         "TRAIN\n")


def test_new_folders_count_up_per_stem(tmp_path):
    parent = tmp_path / "runs"
    first = new_run_folder("some/where/exp.ctl", str(parent))
    second = new_run_folder("exp.ctl", str(parent))
    other = new_run_folder("other.ctl", str(parent))
    assert [os.path.basename(f) for f in (first, second, other)] == ["exp-1", "exp-2", "other-1"]
    os.rmdir(first)                                  # a gap below the highest is not reused
    assert os.path.basename(new_run_folder("exp.ctl", str(parent))) == "exp-3"


def test_an_out_holding_an_earlier_run_is_refused(tmp_path):
    ctl = tmp_path / "a.ctl"
    ctl.write_text(SMALL)
    (tmp_path / "out").mkdir()
    assert choose_out(str(tmp_path / "out"), [str(ctl)]) == (str(tmp_path / "out"), False)
    (tmp_path / "out" / "results.json").write_text("{}")
    assert earlier_run(str(tmp_path / "out")).endswith("results.json")
    with pytest.raises(ConvnetError, match="earlier run.*--overwrite"):
        choose_out(str(tmp_path / "out"), [str(ctl)])
    assert choose_out(str(tmp_path / "out"), [str(ctl)], overwrite=True)[0] == str(tmp_path / "out")


def test_missing_control_files_are_named(tmp_path):
    with pytest.raises(ConvnetError, match="control file not found") as info:
        check_control_files([str(tmp_path / "typo.ctl")])
    assert info.value.file == str(tmp_path / "typo.ctl")
    with pytest.raises(ConvnetError, match="is a folder"):
        check_control_files([str(tmp_path)])


def _convnet(args, cwd):
    return subprocess.run([sys.executable, "-m", "convnet", "run", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_quick_start_twice_and_a_typo_in_between(tmp_path):
    """Run, mistype, run again: both runs' results are kept in folders of their own, and the
    typo writes nothing."""
    (tmp_path / "exp.ctl").write_text(SMALL)
    first = _convnet(["exp.ctl", "--seed", "1"], tmp_path)
    assert first.returncode == 0, first.stderr
    log = (tmp_path / "runs" / "exp-1" / "CONVNET.LOG").read_text()
    typo = _convnet(["exq.ctl"], tmp_path)
    assert typo.returncode == 2 and "exq.ctl: control file not found" in typo.stderr
    assert sorted(os.listdir(tmp_path / "runs")) == ["exp-1"]
    second = _convnet(["exp.ctl", "--seed", "2"], tmp_path)
    assert second.returncode == 0, second.stderr
    assert (tmp_path / "runs" / "exp-1" / "CONVNET.LOG").read_text() == log
    assert json.loads((tmp_path / "runs" / "exp-2" / "results.json").read_text())["status"] == "done"
    assert "runs/exp-2" in second.stdout


@pytest.mark.slow
def test_cli_refuses_to_replace_an_earlier_run_without_overwrite(tmp_path):
    (tmp_path / "exp.ctl").write_text(SMALL)
    assert _convnet(["exp.ctl", "--out", "out", "--seed", "1"], tmp_path).returncode == 0
    before = (tmp_path / "out" / "CONVNET.LOG").read_text()
    again = _convnet(["exp.ctl", "--out", "out"], tmp_path)
    assert again.returncode == 2 and "earlier run" in again.stderr
    assert (tmp_path / "out" / "CONVNET.LOG").read_text() == before
    assert _convnet(["exp.ctl", "--out", "out", "--overwrite"], tmp_path).returncode == 0
