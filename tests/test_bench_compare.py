"""benchmarks/compare.py: two gpu_bench.json records side by side (no GPU needed)."""

import json

import pytest

from scripts import load_script


def _compare():
    return load_script("benchmarks/compare.py", "bench_compare")


def _net(ms, sites):
    return {"gradient_ms": ms, "tile_ms": sites}


AFTER = {"a": _net(2.0, {"gradient 2 48 10": {"x": 1.0, "y": 0.8}, "delta 2 10": {"x": 0.5},
                         "gradient 0 8 10": {"x": 0.01}}),
         "b": _net(1.0, {}), "only-after": _net(1.0, {})}
BEFORE = {"a": _net(4.0, {"gradient 2 48 10": {"x": 1.6, "y": 1.7}, "delta 2 10": {"x": 0.6},
                          "gradient 0 8 10": {"x": 0.02}}),
          "b": _net(1.0, {})}


def test_each_net_its_sites_and_the_mean():
    lines, mean = _compare().compare(AFTER, BEFORE)
    assert mean == pytest.approx((0.5 * 1.0) ** 0.5)
    assert lines[0].split()[:5] == ["a", "gradient", "4.000", "->", "2.000"]
    # the fastest variant of each run at a gradient site; quick sites and other sites left out
    assert lines[1].split() == ["gradient", "2", "48", "10", "x", "1.600", "->", "y", "0.800",
                                "0.500"]
    assert not any("delta" in ln or "gradient 0" in ln or "only-after" in ln for ln in lines)
    assert lines[-1].startswith("geometric mean of the gradients' ratios: 0.707 (2 nets)")


def test_other_sites_on_request(tmp_path, capsys):
    paths = []
    for name, record in (("after", AFTER), ("before", BEFORE)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(record))
    mean = _compare().main([str(p) for p in paths] + ["--sites", "delta,gradient",
                                                       "--min-ms", "0"])
    out = capsys.readouterr().out
    assert mean == pytest.approx(0.5 ** 0.5)
    assert "delta 2 10" in out and "gradient 0 8 10" in out


def test_records_without_a_common_net(capsys):
    lines, mean = _compare().compare({"a": _net(1.0, {})}, {"b": _net(1.0, {})})
    assert lines == [] and mean is None
