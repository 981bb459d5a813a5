"""A batch on a Dask cluster against the same batch on this machine: the engine's cost per task.

    python benchmarks/cluster.py [--files 8] [--rounds 2]

Starts `dask scheduler` and two `dask worker` processes (one thread each) on 127.0.0.1, writes
--files small CPU control files (MAKE IMAGE, a convolutional and a fully connected layer, a few
annealing and conjugate-gradient iterations; with --trivial, files that only make a few images),
and runs them with `convnet batch --scheduler` and with `convnet batch --jobs 2`, in turn,
--rounds times. For each: the wall time of the whole batch,
the sum of the sessions' own seconds (summary.csv), and the overhead per task, (wall x 2 - sum of
session seconds) / files: what running a session costs beyond the session itself (starting it,
moving its files, for the cluster the scheduling and the round trips). The machine's load is
printed: on a shared machine the figures are noisy; compare the two lines of one round.
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONTROL = """\
MAKE IMAGE 12 12 1 4 {cases}
CONVOLUTIONAL LAYER 4 1 1 1 1 1 1
POOLED MAX LAYER 2 2 2 2
FULLY CONNECTED LAYER 6
ANNEAL ITERS = 20
MAXITERS = 20
TOL = 1e-12
TRAIN
"""


# a session with nothing to compute: the batch's cost is then starting and collecting sessions
TRIVIAL = "MAKE IMAGE 6 6 1 2 {cases}\n"


def start_cluster(folder, env):
    log = open(Path(folder) / "dask.log", "ab")
    sched_file = Path(folder) / "scheduler.json"
    procs = [subprocess.Popen([sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1",
                               "--port", "0", "--no-dashboard", "--scheduler-file",
                               str(sched_file)], stdout=log, stderr=subprocess.STDOUT, env=env)]
    while not sched_file.exists() or not sched_file.read_text().strip():
        time.sleep(0.2)
    time.sleep(0.2)
    address = json.loads(sched_file.read_text())["address"]
    for k in range(2):
        procs.append(subprocess.Popen([sys.executable, "-m", "dask", "worker", address,
                                       "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1",
                                       "--local-directory", str(Path(folder) / f"w{k}")],
                                      stdout=log, stderr=subprocess.STDOUT, env=env))
    import distributed
    with distributed.Client(address, timeout=60) as client:
        client.wait_for_workers(2, timeout=120)
    return address, procs


def run(cmd, env, cwd):
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return wall


def session_seconds(summary):
    with open(summary, newline="") as f:
        return sum(float(r["seconds"]) for r in csv.DictReader(f))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--trivial", action="store_true",
                    help="files that only make a few images: the per-task cost alone")
    args = ap.parse_args(argv)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for k in range(args.files):
            path = Path(tmp) / f"cpu{k + 1}.ctl"
            path.write_text((TRIVIAL if args.trivial else CONTROL).format(cases=400 + 20 * k))
            files.append(path.name)
        address, procs = start_cluster(tmp, env)
        try:
            print(f"{args.files} {'trivial ' if args.trivial else ''}CPU control files, 2 workers of one thread each against "
                  f"--jobs 2 (load average at start: {os.getloadavg()[0]:.1f}, "
                  f"{os.cpu_count()} cores)")
            print(f"{'round':>5}  {'how':<22}{'wall s':>9}{'sessions s':>12}{'overhead/task s':>17}")
            base = [sys.executable, "-m", "convnet", "batch", *files, "--device", "cpu",
                    "--seed", "1", "--threads", "1"]
            for r in range(1, args.rounds + 1):
                for how, extra in (("cluster (--scheduler)", ["--scheduler", address]),
                                   ("local (--jobs 2)", ["--jobs", "2"])):
                    out = f"out-{r}-{extra[0][2:]}"
                    wall = run(base + ["--out", out] + extra, env, tmp)
                    inside = session_seconds(Path(tmp) / out / "summary.csv")
                    print(f"{r:>5}  {how:<22}{wall:>9.2f}{inside:>12.2f}"
                          f"{(2 * wall - inside) / args.files:>17.2f}", flush=True)
        finally:
            for p in reversed(procs):
                p.terminate()
            for p in procs:
                p.wait(30)


if __name__ == "__main__":
    main()
