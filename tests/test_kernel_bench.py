"""benchmarks/kernel.py's validation on the emulated runtime, timing off: every variant of every
family against its numpy reference, so a variant list or a reference that does not fit its
launches fails here (the GPU runs the same validation with timing)."""

import pytest

from scripts import load_script
from test_device_emulated import fake_runtime  # noqa: F401 (the fixture)


def _bench():
    return load_script("benchmarks/kernel.py", "kernel_bench")


def test_families_are_listed(capsys):
    bench = _bench()
    assert bench.main(["--list"]) == []
    out = capsys.readouterr().out
    assert all(name in out for name in bench.FAMILIES)


# the shape each family is checked on: "small" unless named here
SHAPE = {"conv_small_avg": "avgsmall", "conv_grad_avg": "avgsmall",
         "conv_grad_first": "firstsmall", "conv_patch": "patch", "conv_patch_tf32": "patch"}


@pytest.mark.parametrize("family", ["gemm_nn", "gemm_nn_split", "gemm_nn_tf32", "conv_fwd",
                                    "conv_bwd", "gemm_tn", "gemm_tn_split", "gemm_tn_tf32",
                                    "conv_grad", "conv_small_pool", "conv_small_avg",
                                    "conv_grad_avg", "conv_grad_first", "conv_patch",
                                    "conv_patch_tf32"])
def test_every_variant_matches_its_reference(fake_runtime, family, capsys):  # noqa: F811
    bench = _bench()
    rows = bench.main([family, "--shapes", SHAPE.get(family, "small"), "--no-timing"])
    variants = {variant for _, variant, _, _, _ in rows}
    assert len(variants) >= 2, rows                     # the first candidate and others
    for _, variant, launches, error, ms in rows:
        assert launches >= 1 and error <= bench.TOLERANCE and ms is None
    assert family in bench.FAMILIES and "Max rel err" in capsys.readouterr().out


@pytest.mark.parametrize("family,prefix", [("gemm_nn_split", "tcp"), ("gemm_nn_tf32", "tfp")])
def test_the_pair_variants_match_their_reference(fake_runtime, family, prefix):  # noqa: F811
    """Gathered depths of 2 mod 4 (the "even" shape: 18 and 34 slices) give the launches the
    pair twins of the runs-of-four tiles, and each matches the reference."""
    bench = _bench()
    rows = bench.main([family, "--shapes", "even", "--no-timing"])
    pairs = {variant for _, variant, _, _, _ in rows if variant.startswith(prefix)}
    assert len(pairs) >= 4, rows
    assert all(error <= bench.TOLERANCE for _, _, _, error, _ in rows)

def test_a_wrong_variant_fails(fake_runtime, monkeypatch):  # noqa: F811
    """The check can fail: an emulated kernel that disagrees with its reference is caught."""
    bench = _bench()
    real = fake_runtime.kernels.gemm_tn

    def off(*args, **kwargs):
        real(*args, **kwargs)
        part = args[-2]
        fake_runtime.kernels.f32(part, 4)[:] += 1.0     # the first four partial sums

    monkeypatch.setattr(fake_runtime.kernels, "gemm_tn", off)
    with pytest.raises(AssertionError, match="off the reference"):
        bench.main(["gemm_tn", "--shapes", "small", "--no-timing"])
