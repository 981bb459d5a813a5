"""benchmarks/gpu.py's candidate table (no GPU needed: it formats the JSON record's fields)."""

import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def _gpu_bench():
    spec = importlib.util.spec_from_file_location(
        "gpu_bench", os.path.join(HERE, os.pardir, "benchmarks", "gpu.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_candidate_table_ranks_and_marks_the_choice():
    gpu = _gpu_bench()
    choice = {"delta 2 10000": "tiled_c6_w", "forward 4 10000": "128x64_8x4_k16"}
    tile_ms = {"delta 2 10000": {"tiled_c2": 1.336, "tiled_c6_w": 1.2584, "320x20_8x4_k10": 1.8592},
               "forward 4 10000": {f"t{i}": 1 + i / 10 for i in range(10)} | {"128x64_8x4_k16": 0.3616}}
    lines = gpu.candidate_lines("lenet-mnist", choice, tile_ms, most=3)
    assert len(lines) == 2
    first = lines[0]
    assert first.startswith("lenet-mnist") and "delta 2 10000" in first
    # fastest first, the choice starred, three decimals
    assert first.index("tiled_c6_w* 1.258") < first.index("tiled_c2 1.336") < first.index("320x20_8x4_k10 1.859")
    assert lines[1].split("10000", 1)[1].split()[:2] == ["128x64_8x4_k16*", "0.362"]
    assert lines[1].endswith("(+8 more)") and "t9" not in lines[1]
