"""Faults around a run that must end in one clear line, never a traceback: a folder given as a
control file, NUL bytes in file names, huge lines, an output folder that cannot be written, a disk
that fills up while CONVNET.LOG is written."""

import difflib
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import convnet.logs.writer as writer
from convnet import control
from convnet.cli import main

ROOT = Path(__file__).resolve().parents[1]
SMALL = "MAKE IMAGE 8 8 1 2 20\nFULLY CONNECTED LAYER 2\nANNEAL ITERS = 2\nMAXITERS = 2\nTRAIN\nTEST\n"


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_error(result):
    """The run's output is exactly one `convnet: error:` line (and the exit status 2)."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("convnet: error: "), result.output
    return lines[0]


@pytest.mark.parametrize("command", ["run", "check"])
def test_a_folder_given_as_control_file(tmp_path, command):
    out = ("--out", tmp_path / "out") if command == "run" else ()
    line = one_error(invoke(command, tmp_path, *out))
    assert line == f"convnet: error: {tmp_path}: is a folder, not a control file"


@pytest.mark.parametrize("text", ['READ MNIST IMAGE "a\0b.gz"', 'READ SERIES "a\0b.csv"',
                                  'READ C10 IMAGE "\0"', 'LOAD MODEL "m\0.cnm"'])
def test_nul_byte_in_a_file_name(tmp_path, text):
    path = tmp_path / "nul.ctl"
    path.write_text(text + "\n")
    line = one_error(invoke("check", path))
    assert f"{path}:1:" in line and "contains a NUL byte" in line and "\0" not in line


def test_a_huge_line_is_refused_with_bounded_work_and_a_short_message(tmp_path, monkeypatch):
    compared = []
    real = difflib.SequenceMatcher

    class Recording(real):
        def __init__(self, isjunk=None, a="", b="", autojunk=True):
            compared.append(max(len(a), len(b)))
            super().__init__(isjunk, a, b, autojunk)

    monkeypatch.setattr(difflib, "SequenceMatcher", Recording)
    for text in ("Q" * 200_000, "MAKE IMAGE " + "x" * 200_000, " ".join(["word"] * 40_000),
                 "MAKE IMAGE 1 2 3 4 " + "9" * 200_000, "WPEN = " + "1" * 200_000,
                 "K" * 100_000 + " = 3"):
        path = tmp_path / "long.ctl"
        path.write_text(text + "\n")
        line = one_error(invoke("check", path))
        assert len(line) < 300, line[:400]
    assert compared and max(compared) <= 400


def test_shown_escapes_and_cuts():
    assert control.shown("abc") == "abc"
    assert control.shown("a\0b\x1bc") == "a\\x00b\\x1bc"
    assert control.shown("x" * 1000) == "x" * control.SHOWN_CHARS + "... (1000 characters)"


def test_output_folder_that_cannot_be_created(tmp_path):
    ctl = tmp_path / "a.ctl"
    ctl.write_text(SMALL)
    line = one_error(invoke("run", ctl, "--out", "/proc/x/y"))
    assert line.startswith("convnet: error: cannot create the output folder '/proc/x/y': ")
    afile = tmp_path / "afile"
    afile.write_text("")
    line = one_error(invoke("run", ctl, "--out", afile))
    assert line == f"convnet: error: the output folder '{afile}' is a file, not a folder"


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="permissions do not bind root")
def test_read_only_output_folder(tmp_path):
    ctl = tmp_path / "a.ctl"
    ctl.write_text(SMALL)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        line = one_error(invoke("run", ctl, "--out", ro))
        assert "Permission denied" in line
        line = one_error(invoke("run", ctl, "--out", ro / "sub"))
        assert "Permission denied" in line
    finally:
        ro.chmod(0o700)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_full_disk_at_the_first_log_line(tmp_path):
    """CONVNET.LOG is a link to /dev/full: every write fails with ENOSPC (a real full device)."""
    ctl = tmp_path / "a.ctl"
    ctl.write_text(SMALL)
    out = tmp_path / "out"
    out.mkdir()
    (out / "CONVNET.LOG").symlink_to("/dev/full")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "convnet", "run", str(ctl), "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (f"convnet: error: cannot write {out / 'CONVNET.LOG'}: "
                                   "No space left on device")
    assert not (out / ".convnet.lock").exists()


class _FillingFile:
    """A log file whose disk fills up after ``room`` lines."""

    def __init__(self, room):
        self.room = room

    def write(self, text):
        self.room -= 1
        if self.room < 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return len(text)

    def flush(self):
        pass

    def close(self):
        pass


@pytest.mark.slow
@pytest.mark.parametrize("room", [3, 8, 30])
def test_disk_fills_up_while_the_log_is_written(tmp_path, monkeypatch, room):
    monkeypatch.setattr(writer, "open", lambda *a, **k: _FillingFile(room), raising=False)
    ctl = tmp_path / "a.ctl"
    ctl.write_text(SMALL)
    line = one_error(invoke("run", ctl, "--out", tmp_path / "out", "--seed", "1", "--quiet"))
    assert line.endswith(f"cannot write {tmp_path / 'out' / 'CONVNET.LOG'}: No space left on device")
    assert not (tmp_path / "out" / ".convnet.lock").exists()


def test_a_picture_that_cannot_be_written_is_a_located_error(tmp_path):
    ctl = tmp_path / "a.ctl"
    ctl.write_text('MAKE IMAGE 8 8 1 2 20\nDISPLAY TRAINING IMAGES 1 2 2 "no/such/folder/x.png"\n')
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "no").write_text("a file where a folder should be")
    line = one_error(invoke("run", ctl, "--out", tmp_path / "out", "--quiet"))
    assert line.startswith(f"convnet: error: {ctl}:2: ")


def test_save_model_never_replaces_something_that_is_not_a_regular_file(tmp_path):
    target = tmp_path / "device-like"
    target.mkdir()
    link = tmp_path / "link.cnm"
    link.symlink_to(tmp_path / "nowhere")
    for name in (target, link):
        ctl = tmp_path / "a.ctl"
        ctl.write_text(SMALL + f'SAVE MODEL "{name}"\n')
        line = one_error(invoke("run", ctl, "--out", tmp_path / "out", "--quiet", "--overwrite"))
        assert line == (f"convnet: error: {ctl}:7: {name}: cannot write the model file: it exists "
                        "and is not a regular file")
    assert target.is_dir() and link.is_symlink()


def test_error_messages_stay_one_short_line():
    from convnet.errors import ConvnetError
    text = str(ConvnetError("bad name 'a" + " " * 5000 + "b" + "c" * 5000 + "\0\n' here", "f.ctl", 3))
    assert text.startswith("f.ctl:3: bad name 'a (5000 blanks) bccc")
    assert "characters) here" in text and "\n" not in text and "\0" not in text
    assert len(text) < 300
    many = str(ConvnetError(" ".join(["word"] * 1000)))
    assert len(many) <= 600 and many.endswith("word")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_an_endless_control_file_is_refused():
    line = one_error(invoke("check", "/dev/zero"))
    assert line == (f"convnet: error: /dev/zero: the control file is longer than "
                    f"{control.MAX_CONTROL_CHARS:,} characters")


@pytest.mark.parametrize("room", [0, 1, 3])
def test_disk_fills_up_while_the_results_are_written(tmp_path, monkeypatch, room):
    import convnet.logs.results as results
    real = results.write_atomic
    left = [room]

    def filling(path, text):
        left[0] -= 1
        if left[0] < 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path) + ".tmp")
        return real(path, text)
    monkeypatch.setattr(results, "write_atomic", filling)
    ctl = tmp_path / "a.ctl"
    ctl.write_text(SMALL)
    line = one_error(invoke("run", ctl, "--out", tmp_path / "out", "--seed", "1", "--quiet"))
    assert line.endswith(": No space left on device") and "cannot write" in line, line
    assert not (tmp_path / "out" / ".convnet.lock").exists()
