"""The live progress line: rewritten in place, elapsed and remaining time, ended by close()."""

import io

from convnet.display.progress import ProgressLine


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def screen(text):
    """The lines a terminal shows after ``text``: a carriage return moves back to column 0."""
    lines, row, col = [[]], 0, 0
    for ch in text:
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append([])
            row, col = row + 1, 0
        else:
            line = lines[row]
            if col < len(line):
                line[col] = ch
            else:
                line.append(ch)
            col += 1
    return ["".join(line) for line in lines]


def test_progress_line_rewrites_in_place_with_elapsed_and_remaining():
    stream, clock = io.StringIO(), Clock()
    progress = ProgressLine(stream, min_interval=0.0, clock=clock)
    progress("annealing", 0, 0.9, 0.9, total=100)
    clock.t += 10.0
    progress("annealing", 10, 0.8, 0.7, total=100)
    text = stream.getvalue()
    assert "\n" not in text and text.count("\r") == 2
    shown = screen(text)
    assert len(shown) == 1
    line = shown[0]
    assert line.startswith("annealing  iteration 10/100  criterion 0.8  best 0.7")
    assert "elapsed 0:10" in line
    assert "remaining 1:30" in line                   # 1 s per evaluation, 90 to go
    clock.t += 5.0
    progress("refinement", 1, 0.5, 0.5, total=50)     # a new phase: no estimate yet
    line = screen(stream.getvalue())[0]
    assert line.startswith("refinement  iteration 1/50  criterion 0.5  best 0.5  elapsed 0:15")
    assert "remaining" not in line
    clock.t += 2.0
    progress("refinement", 3, 0.4, 0.4, total=50)
    line = screen(stream.getvalue())[0]
    assert "remaining at most 0:47" in line           # 1 s per iteration, at most 47 more
    progress.close()
    assert stream.getvalue().endswith("\n")
    shown = screen(stream.getvalue())
    assert shown[-1] == "" and len(shown) == 2


def test_progress_line_blanks_leftovers_of_a_longer_line():
    stream, clock = io.StringIO(), Clock()
    progress = ProgressLine(stream, min_interval=0.0, clock=clock)
    progress("annealing", 5, 123456.789, 123456.789, total=1000)
    progress("final", 1, None, None)
    progress.close()
    line = screen(stream.getvalue())[0]
    assert line.rstrip() == "final  iteration 1  elapsed 0:00"


def test_progress_line_throttles_but_close_shows_the_last_state():
    stream, clock = io.StringIO(), Clock()
    progress = ProgressLine(stream, min_interval=1.0, clock=clock)
    for i in range(50):
        clock.t += 0.01
        progress("annealing", i, 1.0 / (i + 1), 1.0 / (i + 1), total=50)
    assert stream.getvalue().count("\r") == 1          # only the first was shown so far
    progress.close()
    line = screen(stream.getvalue())[0]
    assert "iteration 49/50" in line and "best 0.02" in line


def test_progress_line_close_without_output_writes_nothing():
    stream = io.StringIO()
    ProgressLine(stream).close()
    assert stream.getvalue() == ""


class Terminal(io.StringIO):
    def isatty(self):
        return True


CONTROL = """\
MAKE IMAGE 5 5 1 2 20
FULLY CONNECTED LAYER 2
ANNEAL ITERS = 4
MAXITERS = 3
TRAIN
"""


def _session(tmp_path, monkeypatch, stdout, quiet):
    import sys
    from convnet.session import Session
    ctl = tmp_path / "p.ctl"
    ctl.write_text(CONTROL)
    out = tmp_path / ("quiet" if quiet else "loud")
    monkeypatch.setattr(sys, "stdout", stdout)
    session = Session(out=str(out), device="cpu", seed=4, threads=1, quiet=quiet)
    try:
        session.run([str(ctl)])
    finally:
        session.close()
    return (out / "CONVNET.LOG").read_text()


def test_session_shows_progress_on_a_terminal_and_never_in_the_log(tmp_path, monkeypatch):
    terminal = Terminal()
    log = _session(tmp_path, monkeypatch, terminal, quiet=False)
    shown = terminal.getvalue()
    assert "\rAnnealing  iteration" in shown and "/4" in shown
    assert "\rRefinement  iteration" in shown
    assert "\r" not in log and "Refinement  iteration" not in log and "best " not in log


def test_no_progress_when_quiet_and_plain_lines_when_not_a_terminal(tmp_path, monkeypatch):
    terminal = Terminal()
    _session(tmp_path, monkeypatch, terminal, quiet=True)
    assert terminal.getvalue() == ""
    pipe = io.StringIO()                      # not a terminal: whole lines, no carriage return
    _session(tmp_path, monkeypatch, pipe, quiet=False)
    assert "\r" not in pipe.getvalue()
    lines = pipe.getvalue().splitlines()
    assert any(l.startswith("Annealing  iteration") for l in lines), lines
    assert any(l.startswith("Refinement  iteration") for l in lines), lines


def test_a_dropped_progress_line_ends_its_line():
    stream, clock = io.StringIO(), Clock()
    progress = ProgressLine(stream, min_interval=1.0, clock=clock)
    progress("Refinement", 1, 0.5, 0.5, total=3)
    progress("Refinement", 2, 0.4, 0.4, total=3)     # throttled, not shown yet
    del progress
    import gc
    gc.collect()
    assert stream.getvalue().endswith("\n")
    assert "iteration 2/3" in screen(stream.getvalue())[0]


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_batch_progress_without_a_terminal_prints_a_plain_line_as_each_file_starts_and_ends():
    from convnet.batch import BatchRow
    from convnet.display.progress import BatchProgress
    stream, clock = io.StringIO(), _Clock()
    progress = BatchProgress(3, stream, terminal=False, clock=clock)
    progress.started("a.ctl")
    clock.now = 2.0
    progress.started("b.ctl", " on GPU 1")
    clock.now = 65.0
    progress.ended(BatchRow(file="a.ctl", out="o/a", seconds=64.96))
    progress.ended(BatchRow(file="c.ctl", out="o/c", status="error: c.ctl: no such control file"),
                   was_started=False)
    clock.now = 70.0
    progress.ended(BatchRow(file="b.ctl", out="o/b", seconds=68.0,
                            status="error: b.ctl:2: TRAIN needs a layer"))
    progress.close()
    assert stream.getvalue().splitlines() == [
        "[0:00] started a.ctl", "[0:02] started b.ctl on GPU 1",
        "[1:05] ended a.ctl in 65.0 s: ok",
        "[1:05] ended c.ctl: error: c.ctl: no such control file",
        "[1:10] ended b.ctl in 68.0 s: error: b.ctl:2: TRAIN needs a layer"]
    assert "\r" not in stream.getvalue() and "\033" not in stream.getvalue()


def test_batch_progress_on_a_terminal_keeps_a_status_line_under_the_lines():
    from convnet.batch import BatchRow
    from convnet.display.progress import BatchProgress
    stream, clock = io.StringIO(), _Clock()
    progress = BatchProgress(2, stream, terminal=True, clock=clock)
    progress.started("a.ctl")
    progress.started("b.ctl")
    clock.now = 5.0
    progress.ended(BatchRow(file="a.ctl", out="o/a", seconds=5.0, status="error: x"))
    assert stream.getvalue().endswith("\r\033[K[0:05] ended a.ctl in 5.0 s: error: x\n"
                                      "running 1, done 1 of 2 (1 failed), waiting 0, elapsed 0:05")
    progress.close()
    assert stream.getvalue().endswith("\r\033[K")       # the table starts on a clean line


def _numba_function_of(module):
    import numba

    def twice(x):
        return 2 * x
    twice.__module__ = module
    return numba.njit(twice)


def test_compile_notice_speaks_once_when_a_kernel_of_the_package_compiles():
    from convnet.display.progress import CompileNotice
    stream = io.StringIO()
    with CompileNotice(stream):
        _numba_function_of("someone.else")(1)             # not ours: silent
        assert stream.getvalue() == ""
        _numba_function_of("convnet.host.probe")(1)       # compiles: said
        _numba_function_of("convnet.host.probe")(2)       # said once only
    assert stream.getvalue() == "compiling host kernels (first run only)\n"
    stream = io.StringIO()
    probe = _numba_function_of("convnet.host.probe")
    probe(1)                                              # compiled before: nothing to say
    with CompileNotice(stream):
        probe(3)
    _numba_function_of("convnet.host.probe")(1)           # after the run: no listener
    assert stream.getvalue() == ""


def test_without_a_terminal_whole_lines_at_each_phase_and_every_ten_seconds():
    import io
    from convnet.display.progress import ProgressLine
    now = [0.0]
    stream = io.StringIO()
    line = ProgressLine(stream, clock=lambda: now[0], plain=True)
    for step in range(1, 40):                       # an evaluation every second
        now[0] = float(step)
        line("Annealing", step, 0.5, 0.4, total=39)
    now[0] = 40.0
    line("Refinement", 1, 0.3, 0.3, total=100)
    line.close()
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert lines[0].startswith("Annealing  iteration 1/39")
    assert [int(l.split()[2].split("/")[0]) for l in lines if l.startswith("Annealing")] == \
        [1, 11, 21, 31, 39]                         # every 10 s, and where the phase ended
    assert lines[-1].startswith("Refinement  iteration 1/100")
