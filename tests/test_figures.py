"""A run's figures: drawn by a process of their own, so that the run itself imports neither
matplotlib nor anything else it does not use (dask, onnx); the same figures as those drawn in the
run's own process, which draws them itself when that process is gone."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from convnet.display import figures
from convnet.display.figure_worker import answer_to
from convnet.errors import ConvnetError

ROOT = Path(__file__).resolve().parents[1]
SMALL = ("MAKE IMAGE 8 8 1 2 20\nFULLY CONNECTED LAYER 2\nANNEAL ITERS = 2\nMAXITERS = 2\n"
         "TRAIN\nTEST\n")
NOT_LOADED = ("matplotlib", "dask", "distributed", "onnx", "onnxruntime")
PHASES = [{"name": "annealing", "title": "Simulated annealing", "unit": "evaluation",
           "chart": "scatter", "trace": [(1, 2.0), (2, 1.5), (3, 1.7)], "criterion": 1.5},
          {"name": "refinement", "unit": "iteration", "chart": "line",
           "trace": [(0, 1.5), (1, 0.5), (2, 0.25)], "criterion": 0.25}]

needs_two_cores = pytest.mark.skipif(figures.available_cores() < 2,
                                     reason="one core: figures are drawn in the run's process")


@pytest.fixture
def aside(monkeypatch):
    """Figures drawn by the drawing process (the tests otherwise draw in their own process)."""
    monkeypatch.delenv(figures.INLINE_VARIABLE, raising=False)
    figures.start()
    assert figures.process.proc is not None
    yield figures.process
    figures.stop()


@needs_two_cores
def test_a_cpu_run_loads_neither_matplotlib_nor_dask_nor_onnx(tmp_path):
    ctl, out = tmp_path / "small.ctl", tmp_path / "out"
    ctl.write_text(SMALL)
    code = ("import json, sys\nfrom convnet.cli import main\n"
            f"main(['run', {str(ctl)!r}, '--device', 'cpu', '--seed', '1', '--quiet', '--out', "
            f"{str(out)!r}], standalone_mode=False)\n"
            f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {NOT_LOADED!r})))\n")
    env = {k: v for k, v in os.environ.items() if k != figures.INLINE_VARIABLE}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          check=True)
    assert json.loads(proc.stdout.splitlines()[-1]) == []
    page = (out / "report.html").read_text()
    assert page.count("<svg") == 3            # the TRAIN's curve and confusion, the TEST's confusion
    assert (out / "criterion.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


@needs_two_cores
def test_the_drawing_process_draws_the_figures_drawn_here(aside, tmp_path):
    title = "TRAIN: annealing 1.5, final 0.25"
    figures.save_png(str(tmp_path / "aside.png"), "criterion_figure", PHASES, title=title)
    assert aside.proc is not None                       # it answered
    here = answer_to(("png", "criterion_figure", (PHASES,), {"title": title}))
    assert (tmp_path / "aside.png").read_bytes() == here[1]
    svg = figures.svg("confusion_figure", [[3, 1], [0, 4]], title="TEST 2")
    assert svg.startswith("<svg") and "TEST 2" in svg and ">3<" in svg.replace(" ", "")


@needs_two_cores
def test_figures_asked_for_together_come_back_each_its_own(aside):
    """Several requests before any answer (drawn side by side by the process's children): each
    figure's answer is its own, in any order they are taken."""

    confusions = [[[k, 1], [0, 4]] for k in range(6)]
    asked = [figures.Figure("svg", "confusion_figure", m, title=f"TEST {k}")
             for k, m in enumerate(confusions)]
    curve = figures.Figure("png", "criterion_figure", PHASES, title="curve")
    assert all(f.ticket is not None for f in asked + [curve])
    assert curve.result() == answer_to(("png", "criterion_figure", (PHASES,),
                                        {"title": "curve"}))[1]
    for k in (5, 0, 3, 1, 4, 2):
        here = answer_to(("svg", "confusion_figure", (confusions[k],), {"title": f"TEST {k}"}))
        assert asked[k].result() == here[1]
    assert aside.proc is not None and not aside.answers        # nothing failed, nothing left


@needs_two_cores
def test_figures_are_drawn_here_when_the_drawing_process_is_gone(aside):
    aside.proc.kill()
    aside.proc.wait()
    svg = figures.svg("criterion_figure", PHASES)
    assert svg.startswith("<svg") and "Simulated annealing" in svg
    assert aside.proc is None


def test_a_request_not_for_a_figure_is_refused():
    with pytest.raises(ValueError, match="not a figure request"):
        answer_to(("png", "save_png", (), {}))


def test_a_png_that_cannot_be_written_is_a_user_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConvnetError, match="cannot write"):
        figures.save_png(str(blocker / "curve.png"), "criterion_figure", PHASES)


def test_ctrl_c_while_waiting_for_a_figure_ends_the_run():
    """A second Ctrl-C (Interrupted) that lands while the run waits for the drawing process is
    not taken for a failed drawing: it reaches the run, and the process (whose answer may be
    half read) is stopped."""
    import io
    from convnet.errors import Interrupted

    class Waiting:
        def read(self, size):
            raise Interrupted("run ended by the user (Ctrl-C)", 2)

        def close(self):
            pass

    class Proc:
        stdin, stdout = io.BytesIO(), Waiting()

        def kill(self):
            self.killed = True

        def wait(self):
            pass

    drawing = figures.DrawingProcess()
    drawing.proc = proc = Proc()
    with pytest.raises(Interrupted):
        drawing.answer(drawing.request(("svg", "confusion_figure", ([[1]],), {})))
    assert drawing.proc is None and proc.killed
