"""benchmarks/gpu.py's candidate table (no GPU needed: it formats the JSON record's fields)."""

import os

from scripts import load_script

HERE = os.path.dirname(os.path.abspath(__file__))


def _gpu_bench():
    return load_script("benchmarks/gpu.py", "gpu_bench")


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


def _suite_row(ours, strict, tf32, floor):
    return {"cases": 1000, "gflop": 1.0, "gradient_ms": ours, "vs_float64": (1e-8, 2e-7),
            "torch": {"eager": strict * 1.5, "graph": strict, "warnings": []},
            "torch_ms": strict,
            "torch_tf32": {"eager": tf32, "compile": tf32 * 2,
                           "warnings": ["torch.compile slower than eager (2 > 1 ms)"]},
            "torch_tf32_ms": tf32, "floor_ms": floor}


def test_suite_table_gives_each_ratio_and_the_geometric_mean(capsys):
    gpu = _gpu_bench()
    rows = [("a", _suite_row(1.0, 4.0, 2.0, 0.5)), ("b", _suite_row(2.0, 2.0, 1.0, 0.5))]
    gpu.print_suite(rows)
    out = capsys.readouterr().out
    line_a = next(line for line in out.splitlines() if line.startswith("a "))
    # ours / strict 0.25, ours / tf32 0.50, ours / floor 2.0, the best mode named
    assert line_a.split()[-4:-1] == ["0.25", "0.50", "2.0"] and "4.000 graph" in line_a
    # geometric means: sqrt(0.25 * 1.0) and sqrt(0.5 * 2.0)
    assert "float32 strict 0.500" in out and "TF32 allowed 1.000" in out
    assert "WARNING b (torch_tf32): torch.compile slower than eager" in out
    assert "trial point" not in out                         # no line times: no such line


def test_suite_table_gives_the_means_at_a_trial_point_formed_on_the_gpu(capsys):
    gpu = _gpu_bench()
    rows = [("a", _suite_row(1.0, 4.0, 2.0, 0.5) | {"line_ms": 0.5}),
            ("b", _suite_row(2.0, 2.0, 1.0, 0.5) | {"line_ms": 1.0})]
    gpu.print_suite(rows)
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "trial point" in ln)
    # sqrt(0.125 * 0.5) and sqrt(0.25 * 1.0)
    assert line.endswith("float32 strict 0.250, TF32 allowed 0.500")


def test_compile_warnings_say_why_a_compile_time_is_not_pytorch_at_its_best():
    gpu = _gpu_bench()
    report = {"graphs": 3, "graph_breaks": {"data-dependent branch": 2}, "recompiles": {},
              "cudagraph_skips": 1, "fallbacks": {}, "warmup_calls": 40, "settled": False}
    warnings = gpu.torch_anchor_warnings({"eager": 1.0, "compile": 3.0, "compile_report": report})
    text = " | ".join(warnings)
    assert "slower than eager" in text and "graph breaks" in text
    assert "CUDA graphs skipped 1" in text and "still compiling after 40 calls" in text
    assert gpu.torch_anchor_warnings({"eager": 2.0, "compile": 1.0}) == []


def test_suite_nets_are_the_shared_suite_with_paths_into_this_checkout():
    """benchmarks/suite holds the benchmark and suite nets (the device sees only the checkout);
    each one's layers are the shared file's, and its data files exist here."""
    import pathlib
    gpu = _gpu_bench()
    suite = pathlib.Path(gpu.SUITE_DIR)
    assert sorted(p.stem for p in suite.glob("*.ctl")) == sorted(gpu.SUITE)
    shared = pathlib.Path(HERE).parents[1] / "shared" / "bench"
    for name in gpu.SUITE:
        text = (suite / f"{name}.ctl").read_text()
        for line in text.splitlines():
            if line.startswith("READ"):
                target = line.split('"')[1]
                assert (suite / target).resolve().is_file(), line
        original = next((p for p in (shared / f"{name}.ctl", shared / "suite" / f"{name}.ctl")
                         if p.is_file()), None)
        if original is not None:
            keep = [ln for ln in text.splitlines() if not ln.startswith("READ")]
            assert keep == [ln for ln in original.read_text().splitlines()
                            if not ln.startswith("READ")]


def test_warm_up_runs_for_its_seconds_and_at_least_its_calls():
    """Our timing starts only after warm_up: at least `least` calls, and calls until `seconds`
    have passed (the first evaluations after the host validation ran slower)."""
    import time
    gpu = _gpu_bench()
    calls = []
    gpu.warm_up(calls.append, seconds=0.0, least=3)
    assert calls == [0, 1, 2]
    calls.clear()
    t0 = time.perf_counter()
    gpu.warm_up(lambda i: (calls.append(i), time.sleep(0.01)), seconds=0.05, least=1)
    assert time.perf_counter() - t0 >= 0.05 and len(calls) >= 2 and calls == list(range(len(calls)))
