"""The example control files have no unexplained twins, and the control-language reference shows the
kind of every parameter's value rather than repeating its name."""

import re
from pathlib import Path

from convnet.control import PARAMETERS, keyword_reference

ROOT = Path(__file__).resolve().parents[1]


def test_parameter_placeholders_show_the_kind_of_value():
    doc = keyword_reference()
    for p in PARAMETERS:
        for name in (p.name,) + p.aliases:
            assert f"`{name} = {p.name}`" not in doc and f"`{name} = {name}`" not in doc
    assert "| `MAX BATCH = n` | whole number, 1 to 2147483647 |" in doc
    assert "| `TOL = x` | number, greater than 0.0 |" in doc
    assert "| `SERIES FRAC FULL = x` | number, 0.0 to 1.0 |" in doc
    assert "| `CUDA = YES \\| NO \\| AUTO` | YES, NO or AUTO |" in doc
    parameters = doc[doc.index("## Parameters"):]
    for line in parameters.splitlines():              # every table row has its cells
        if line.startswith("| `") and "= " in line:
            assert len(re.findall(r"(?<!\\)\|", line)) == 4, line


def _normalised(name):
    return re.sub(r"[-_]", "", name)


def test_no_two_example_files_differ_only_by_punctuation_or_a_suffix():
    stems = sorted(p.stem for p in (ROOT / "controlfiles").glob("*.ctl"))
    normal = [_normalised(s) for s in stems]
    assert len(set(normal)) == len(normal), stems
    # a file whose name extends another's says in its first comment why both exist
    for stem in stems:
        for other in stems:
            if other != stem and stem.startswith(other + "-"):
                first = (ROOT / "controlfiles" / f"{stem}.ctl").read_text().splitlines()[:4]
                assert any(f"{other}.ctl" in line for line in first if line.startswith("//")), stem
