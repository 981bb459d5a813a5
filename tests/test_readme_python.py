"""Every code block of the README's Python section runs as written."""

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def python_blocks():
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```python\n(.*?)^```$", section, flags=re.M | re.S)


def test_package_exports_run_and_check():
    import convnet
    from convnet import session
    assert convnet.run is session.run and convnet.check is session.check
    assert {"run", "check", "Model", "Architecture"} <= set(convnet.__all__)


@pytest.mark.slow
def test_readme_python_blocks_run_as_written(tmp_path, monkeypatch, capsys):
    blocks = python_blocks()
    assert len(blocks) == 2 and "convnet.run(" in blocks[1]
    # the blocks use paths relative to the repository; run them in a copy of what they read
    (tmp_path / "controlfiles").mkdir()
    shutil.copy(ROOT / "controlfiles" / "manual_example.ctl", tmp_path / "controlfiles")
    monkeypatch.chdir(tmp_path)
    namespace = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    assert np.isfinite(namespace["crit"]) and namespace["grad"].shape == (namespace["arch"].n_weights,)
    assert np.allclose(namespace["probabilities"].sum(axis=1), 1.0)
    assert (tmp_path / "manual-run" / "CONVNET.LOG").exists()
    assert "% misclassified, criterion" in capsys.readouterr().out
    assert namespace["train"].phase("refinement").steps > 0
