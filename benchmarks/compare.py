"""Two runs of benchmarks/gpu.py side by side, from their gpu_bench.json records.

    python benchmarks/compare.py AFTER.json BEFORE.json [--sites gradient] [--min-ms 0.05]

For every net in both records: the gradient's milliseconds before and after and their ratio,
then, for each launch site whose kernels were timed (the site's name starting with one of
--sites, and taking at least --min-ms in either run), the fastest variant of each run and the
ratio of their times. Last the geometric mean of the nets' ratios. Both runs should come from
one machine and one call (the README's rule: machines differ by 2-4x).
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu import geometric_mean  # noqa: E402


def fastest(tile_ms):
    """(ms, variant) of the fastest variant timed at a site, or None."""
    timed = [(ms, variant) for variant, ms in tile_ms.items() if ms is not None]
    return min(timed) if timed else None


def site_rows(after, before, prefixes=("gradient",), min_ms=0.05):
    """[(site, (ms, variant) after, (ms, variant) before)] of one net's timed sites."""
    rows = []
    for site, timed in after.get("tile_ms", {}).items():
        if not site.startswith(tuple(prefixes)) or site not in before.get("tile_ms", {}):
            continue
        a, b = fastest(timed), fastest(before["tile_ms"][site])
        if a and b and max(a[0], b[0]) >= min_ms:
            rows.append((site, a, b))
    return rows


def compare(after, before, prefixes=("gradient",), min_ms=0.05):
    """The lines of the comparison and the geometric mean of the gradients' ratios (None when
    the records share no net)."""
    lines, ratios = [], []
    for net in after:
        if net not in before:
            continue
        a, b = after[net]["gradient_ms"], before[net]["gradient_ms"]
        ratios.append(a / b)
        lines.append(f"{net:16s} gradient {b:8.3f} -> {a:8.3f} ms  {a / b:.3f}")
        for site, (ams, avar), (bms, bvar) in site_rows(after[net], before[net], prefixes,
                                                        min_ms):
            lines.append(f"    {site:24s} {bvar:24s} {bms:7.3f} -> {avar:24s} {ams:7.3f}"
                         f"  {ams / bms:.3f}")
    mean = geometric_mean(ratios)
    if mean is not None:
        lines.append(f"geometric mean of the gradients' ratios: {mean:.3f} ({len(ratios)} nets)")
    return lines, mean


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("after", help="gpu_bench.json of the run to judge")
    ap.add_argument("before", help="gpu_bench.json of the run to compare it with")
    ap.add_argument("--sites", default="gradient",
                    help="site names to show start with one of these (comma-separated)")
    ap.add_argument("--min-ms", type=float, default=0.05, help="leave out quicker sites")
    args = ap.parse_args(argv)
    records = []
    for path in (args.after, args.before):
        with open(path) as f:
            records.append(json.load(f))
    lines, mean = compare(*records, tuple(args.sites.split(",")), args.min_ms)
    print("\n".join(lines) if lines else "the two records share no net")
    return mean


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
