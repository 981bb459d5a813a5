"""Which kernel variants win where, over one or more runs of benchmarks/gpu.py.

    python benchmarks/variants.py TABLE.json [TABLE.json ...] [--within 0.02] [--all]

Reads the tuner's steady-state times (gpu_bench.json's "tile_ms": every candidate of every launch
site) and prints, for each variant that convnet/device/tuning.py lists, at how many sites it was
a candidate, at how many it was the fastest, and how far behind the fastest it was at its best
site; variants never the fastest nor within --within of it are marked "won nowhere" (the ones
to consider deleting; the variants conv_tiled.py and conv_small.cu make for each layer's shape
are not listed, so not judged). Weight-gradient sites ("gradient ...") count for gemm_tn's
variants, the others for gemm_nn's. Use tables of the current code: a variant that was deleted or
added since shows only where it was timed.
"""

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from convnet.device import tuning  # noqa: E402


def listed_variants():
    """{(product, variant): family} of every variant tuning.py lists, product "nn" or "tn"."""
    families = {"nn": {"float32": tuning.NN_TILES, "split TF32": tuning.NN_SPLIT,
                       "TF32": tuning.NN_TF32},
                "tn": {"float32": {t: None for t in tuning.tn_tiles()},
                       "split TF32": tuning.TN_SPLIT, "TF32": tuning.TN_TF32}}
    return {(product, variant): family for product, by_family in families.items()
            for family, variants in by_family.items() for variant in variants}


def product_of(site):
    """The product a launch site's candidates belong to: tn for weight gradients, else nn."""
    return "tn" if site.startswith("gradient") else "nn"


@dataclass
class Record:
    """One variant over the tables: sites where it was a candidate, sites it won, and its time
    over the fastest's at its best site (1.0 where it was the fastest)."""
    sites: int = 0
    wins: int = 0
    closest: float = math.inf


def tally(tables):
    """{(product, variant): Record} over every net and launch site of the tables."""
    records = {}
    for table in tables:
        for net in table.values():
            for site, times in (net.get("tile_ms") or {}).items():
                timed = {v: ms for v, ms in times.items() if ms}
                if not timed:
                    continue
                best = min(timed.values())
                for variant, ms in timed.items():
                    r = records.setdefault((product_of(site), variant), Record())
                    r.sites += 1
                    r.wins += ms == best
                    r.closest = min(r.closest, ms / best)
    return records


def report(records, within=0.02, show_all=False):
    """The lines of the report: listed variants that were timed, by product and family, those
    that won nowhere marked (only those, unless show_all)."""
    listed = listed_variants()
    lines = []
    for (product, variant), family in sorted(listed.items(), key=lambda kv: (kv[0][0], kv[1],
                                                                             kv[0][1])):
        r = records.get((product, variant))
        if r is None:
            continue
        nowhere = r.wins == 0 and r.closest > 1 + within
        if nowhere or show_all:
            mark = "  won nowhere" if nowhere else ""
            lines.append(f"gemm_{product} {variant:28s} {family:10s}  sites {r.sites:4d}  "
                         f"fastest {r.wins:4d}  at best {r.closest:.3f}{mark}")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tables", nargs="+", help="gpu_bench.json records of benchmarks/gpu.py")
    ap.add_argument("--within", type=float, default=0.02,
                    help="a variant this close to the fastest somewhere did not win nowhere")
    ap.add_argument("--all", action="store_true", help="every listed variant that was timed")
    args = ap.parse_args(argv)
    tables = []
    for path in args.tables:
        with open(path) as f:
            tables.append(json.load(f))
    lines = report(tally(tables), args.within, args.all)
    print("\n".join(lines) if lines else "every listed variant that was timed won somewhere")
    return lines


if __name__ == "__main__":
    main()
