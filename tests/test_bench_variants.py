"""benchmarks/variants.py: which listed kernel variants won where (no GPU needed)."""

import json

from scripts import load_script


def _variants():
    return load_script("benchmarks/variants.py", "bench_variants")


def _table(sites):
    return {"net": {"gradient_ms": 1.0, "tile_ms": sites}}


# at the forward site the plain gather loses by 20 %, a runs-of-four tile by 1 %; at the gradient
# site tc64x64_w32x32_s3 is 10 % behind; tiled_c6_w is made for a layer's shape, never listed
FIRST = _table({"forward 2 100": {"tcq64x64_w32x32_k32_s2": 1.0, "tcq64x64_w32x32_s3": 1.01,
                                  "tc128x64_w32x32_s3": 1.2},
                "gradient 2 50 100": {"tc128x64_w32x64_s3": 0.5, "tc64x64_w32x32_s3": 0.55},
                "delta 2 100": {"tiled_c6_w": 0.3, "128x64_8x4": 0.9}})
# a second table where tc64x64_w32x32_s3 wins the weight gradient
SECOND = _table({"gradient 2 50 100": {"tc128x64_w32x64_s3": 0.5, "tc64x64_w32x32_s3": 0.49}})


def test_a_variant_never_fastest_nor_close_won_nowhere():
    v = _variants()
    lines = v.report(v.tally([FIRST]))
    marked = {line.split()[1] for line in lines}
    assert marked == {"tc128x64_w32x32_s3", "tc64x64_w32x32_s3", "128x64_8x4"}
    assert all(line.endswith("won nowhere") for line in lines)
    plain = next(line for line in lines if "tc128x64_w32x32_s3" in line)
    assert plain.startswith("gemm_nn tc128x64_w32x32_s3") and "split TF32" in plain
    assert "at best 1.200" in plain


def test_a_win_in_any_table_counts_and_gradients_are_gemm_tn():
    v = _variants()
    lines = v.report(v.tally([FIRST, SECOND]))
    assert not any("tc64x64_w32x32_s3" in line for line in lines)
    records = v.tally([FIRST, SECOND])
    assert records[("tn", "tc64x64_w32x32_s3")].wins == 1
    assert records[("tn", "tc64x64_w32x32_s3")].sites == 2
    assert ("nn", "tc64x64_w32x32_s3") not in records


def test_the_margin_and_the_full_listing(tmp_path, capsys):
    v = _variants()
    # within 25 % counts as close: only the delta's float32 tile (3x behind) won nowhere
    assert [line.split()[1] for line in v.report(v.tally([FIRST]), within=0.25)] == ["128x64_8x4"]
    path = tmp_path / "gpu_bench.json"
    path.write_text(json.dumps(FIRST))
    lines = v.main([str(path), "--all"])
    listed = {line.split()[1] for line in lines}
    assert {"tcq64x64_w32x32_k32_s2", "tcq64x64_w32x32_s3", "tc128x64_w32x64_s3"} <= listed
    assert "tiled_c6_w" not in capsys.readouterr().out
