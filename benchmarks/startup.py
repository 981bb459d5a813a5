"""Start-up of `convnet run` on the GPU: wall time against training time, cold and warm.

    python benchmarks/startup.py [CTL] [--warm-runs 3] [--code TREE] [--out DIR]

Runs CTL (default: the manual's example, controlfiles/manual_example.ctl) as `convnet run
--device cuda --seed 1`, each run a process of its own: first with empty kernel caches (a new
CONVNET_CACHE_DIR, PYCUDA_CACHE_DIR and NUMBA_CACHE_DIR: what a clean machine does), then
--warm-runs times with the caches that run filled. Prints one row per run: wall seconds, the
TRAIN's seconds (results.json), the difference (the time outside training), the CUDA.LOG line
about the kernels, and the final criterion. --code TREE runs another checkout's convnet the same
way (before and after, side by side; its criterion must be the same to the last digit).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_run(code, ctl, out, caches):
    env = dict(os.environ, PYTHONPATH=f"{code}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               CONVNET_CACHE_DIR=str(caches / "convnet"), PYCUDA_CACHE_DIR=str(caches / "pycuda"),
               NUMBA_CACHE_DIR=str(caches / "numba"))
    (caches / "pycuda").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "convnet", "run", str(ctl), "--device", "cuda",
                          "--seed", "1", "--quiet", "--out", str(out)], env=env,
                         capture_output=True, text=True, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"run failed ({code}):\n{res.stderr}")
    data = json.loads((out / "results.json").read_text())
    train = sum(r["seconds"]["total"] for r in data["runs"])
    kernels = next((ln for ln in (out / "CUDA.LOG").read_text().splitlines()
                    if ln.startswith("Kernels:")), "(no kernel line)")
    return wall, train, data["runs"][-1]["final_criterion"], kernels


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ctl", nargs="?", type=Path, default=ROOT / "controlfiles" / "manual_example.ctl")
    ap.add_argument("--warm-runs", type=int, default=3)
    ap.add_argument("--code", type=Path, action="append", default=[],
                    help="another checkout to run the same way (repeatable)")
    ap.add_argument("--out", type=Path, default=None, help="keep the runs' folders here")
    args = ap.parse_args(argv)
    top = Path(args.out or tempfile.mkdtemp(prefix="convnet-startup-"))
    rows = []
    for k, code in enumerate([ROOT, *args.code]):
        caches = Path(tempfile.mkdtemp(prefix="convnet-startup-caches-"))
        for n in range(1 + args.warm_runs):
            what = "cold" if n == 0 else f"warm {n}"
            wall, train, crit, kernels = one_run(code.resolve(), args.ctl.resolve(),
                                                 top / f"code{k}-run{n}", caches)
            rows.append((code.name or str(code), what, wall, train, crit, kernels))
            print(f"{rows[-1][0]:<12} {what:<7} wall {wall:6.2f} s  training {train:6.2f} s  "
                  f"outside {wall - train:5.2f} s  criterion {crit!r}  {kernels}", flush=True)
    print()
    print(f"| code | run | wall s | training s | outside training s | final criterion |")
    print(f"|---|---|---|---|---|---|")
    for code, what, wall, train, crit, _ in rows:
        print(f"| {code} | {what} | {wall:.2f} | {train:.2f} | {wall - train:.2f} | {crit!r} |")


if __name__ == "__main__":
    main()
