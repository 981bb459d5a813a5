"""Training benchmark: time to a trained net, and how the refinement spends it.

    python benchmarks/training.py controlfiles/lenet-mnist-split.ctl --device cuda
    python benchmarks/training.py controlfiles/mnist-small.ctl --threads 2 --sigma 0.1,0.5
    python benchmarks/training.py controlfiles/mnist-small.ctl --parallel 4 --cpus 0-7

Each variant runs the control file as ``convnet run`` would (seed 1 unless --seed), in a process
of its own, and prints one row: annealing and refinement seconds, iterations, gradient
evaluations, evaluations per iteration, the seconds spent inside the evaluator and outside it per
evaluation (the optimizer's own vector work and logging), the final training criterion, the TEST
misclassification, and when (iteration, refinement seconds) the weights first reached --target
test error. For that last column every --watch iterations the weights are kept, and after the
run's TEST each kept set is tested on the same test cases; that testing is not in any time
printed.

A variant is a value of the line search's slope fraction (``--sigma``, conjgrad.WOLFE_SIGMA;
the run's default is marked). --parallel N runs N variants at once, each pinned to its own
--threads cores (Linux; for a machine with many cores), which keeps host timings comparable
between variants only when the machine has that many idle cores.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ctl", type=Path, help="control file with a TRAIN and a TEST")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sigma", default="", help="comma-separated slope fractions (default: the "
                    "code's own)")
    ap.add_argument("--watch", type=int, default=25, help="keep the weights every N iterations")
    ap.add_argument("--target", type=float, default=None,
                    help="test misclassification percent to reach (default: 1.0 for cuda, 5.0)")
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--cpus", default=None, help="cores to pin to, e.g. 0-7 (with --parallel)")
    ap.add_argument("--code", type=Path, default=ROOT,
                    help="the convnet tree to run (default: this one), e.g. an older checkout")
    ap.add_argument("--out", type=Path, default=None, help="folder for the runs' files")
    ap.add_argument("--json", type=Path, default=None, help="write the rows here too")
    ap.add_argument("--profile", action="store_true",
                    help="profile the refinement (cProfile); each run's profile.txt lists the "
                    "functions by their own time")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


# ------------------------------------------------------------------------------ one run (child)
def child(spec_path):
    """Run one variant in this process; writes its row next to the spec."""
    spec = json.loads(Path(spec_path).read_text())
    from convnet.train import conjgrad, trainer
    if spec["sigma"] is not None:
        conjgrad.WOLFE_SIGMA = spec["sigma"]
    kept = []                     # (iteration, refinement seconds without the keeping, weights)
    inside = {"seconds": 0.0, "calls": 0}
    curve = []
    conjgrad.ConjugateGradients = _counted_cg(conjgrad.ConjugateGradients, spec["watch"], kept,
                                              inside)
    trainer.run_steps = _profiled_steps(trainer.run_steps, spec, spec_path)
    trainer.test = _test_with_curve(trainer.test, kept, curve)
    import convnet
    out = spec["out"]
    convnet.run(spec["ctl"], out=out, device=spec["device"], seed=spec["seed"],
                threads=spec["threads"], quiet=True, report=False)
    row = _row(json.loads((Path(out) / "results.json").read_text()), inside, curve,
               getattr(conjgrad, "WOLFE_SIGMA", 0.1))
    Path(spec_path).with_suffix(".row.json").write_text(json.dumps(row))


def _timed(evaluation, inside):
    """evaluation, with its calls and seconds counted in ``inside`` as the evaluator's"""
    def call(*args):
        t0 = time.perf_counter()
        try:
            return evaluation(*args)
        finally:
            inside["seconds"] += time.perf_counter() - t0
            inside["calls"] += 1
    return call


def _counted_cg(original_cg, watch, kept, inside):
    """The refinement's conjugate gradients with the evaluator's calls timed and the weights
    kept every ``watch`` iterations (the keeping's time excluded)."""
    import numpy as np

    class CountedCG(original_cg):
        def __init__(self, func, grad, x0, **kw):
            on_iter = kw.get("on_iter")
            clock = {"start": time.perf_counter(), "excluded": 0.0}
            self.clock = clock

            def watching(it, f, step, w):
                if on_iter is not None:
                    on_iter(it, f, step, w)
                if it % watch == 0:
                    t0 = time.perf_counter()
                    elapsed = t0 - clock["start"] - clock["excluded"]
                    kept.append((it, elapsed, np.array(w, copy=True)))
                    clock["excluded"] += time.perf_counter() - t0

            kw["on_iter"] = watching
            make_line = kw.get("line")
            if make_line is not None:        # trial points formed by the evaluator: time those

                def timed_line(x, d):
                    line = make_line(x, d)
                    line.evaluate = _timed(line.evaluate, inside)
                    return line

                kw["line"] = timed_line
            super().__init__(func, _timed(grad, inside), x0, **kw)

        def result(self):
            inside["excluded"] = self.clock["excluded"]
            return super().result()

    return CountedCG


def _profiled_steps(original_steps, spec, spec_path):
    """The trainer's loop, profiled for the refinement when asked (profile.txt by the spec)."""
    from convnet.train import conjgrad

    def run_steps(stepper, stop=None, end=None):
        if not (spec.get("profile") and isinstance(stepper, conjgrad.RefinementPhase)):
            return original_steps(stepper, stop, end)
        import cProfile
        import io
        import pstats
        profiler = cProfile.Profile()
        profiler.runcall(original_steps, stepper, stop, end)
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
        Path(spec_path).with_name("profile.txt").write_text(text.getvalue())

    return run_steps


def _test_with_curve(original_test, kept, curve):
    """The trainer's TEST, which also tests every kept set of weights on the same cases (their
    test error as TEST reports it goes in ``curve``)."""
    from convnet.train.confusion import confusion_matrix, misclassification

    def test_and_curve(model, dataset, log):
        result = original_test(model, dataset, log)
        final = model.weights.copy()
        ev = model.evaluator(dataset.inputs, dataset.classes, 0.0)
        n_classes = model.arch.n_classes
        for it, elapsed, w in kept:
            matrix = confusion_matrix(ev.outputs(w), dataset.classes, n_classes)
            curve.append([it, round(elapsed, 3), misclassification(matrix)])
        model.weights = final
        return result

    return test_and_curve


def _row(results, inside, curve, sigma):
    """The variant's row from its results.json and what the instruments counted."""
    train = next(r for r in results["runs"] if r["command"] == "TRAIN")
    test = [r for r in results["runs"] if r["command"] == "TEST"][-1]
    refinement = next(p for p in train["phases"] if p["name"] == "refinement")
    return {
        "sigma": sigma,
        "annealing_s": train["seconds"]["annealing"],
        "refinement_s": train["seconds"]["refinement"] - inside.get("excluded", 0.0),
        "iterations": refinement["steps"],
        "gradients": refinement["evaluations"]["gradient"],
        "inside_s": inside["seconds"],
        "stop": refinement["stop_reason"],
        "train_criterion": train["final_criterion"],
        "test_error": test["misclassification"],
        "curve": curve,
    }


# ------------------------------------------------------------------------------ the table
def run_variant(args, sigma, folder, cpus):
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"ctl": str(args.ctl.resolve()), "device": args.device, "seed": args.seed,
            "threads": args.threads, "sigma": sigma, "watch": args.watch, "out": str(folder),
            "profile": args.profile}
    spec_path = folder / "variant.json"
    spec_path.write_text(json.dumps(spec))
    cmd = [sys.executable, str(Path(__file__).resolve()), str(args.ctl), "--child", str(spec_path)]
    if cpus:
        cmd = ["taskset", "-c", cpus] + cmd
    env = dict(os.environ)
    env["PYTHONPATH"] = str(args.code.resolve()) + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                          cwd=str(args.ctl.resolve().parent))
    if proc.returncode != 0:
        return {"sigma": sigma, "error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
    row = json.loads(spec_path.with_suffix(".row.json").read_text())
    row["wall_s"] = time.perf_counter() - t0
    return row


def cpu_sets(spec, parallel, threads):
    if not spec:
        return [None] * parallel
    lo, hi = (int(x) for x in spec.split("-"))
    cores = list(range(lo, hi + 1))
    return [",".join(str(c) for c in cores[i * threads:(i + 1) * threads]) for i in range(parallel)]


def reached(curve, target):
    for it, seconds, error in curve:
        if error <= target:
            return f"{it} / {seconds:.1f} s"
    return "not reached"


def format_row(row, default_sigma, target):
    sigma = row["sigma"] if row["sigma"] is not None else default_sigma
    mark = " (default)" if sigma == default_sigma else ""
    if "error" in row:
        return f"| {sigma:g}{mark} | failed: {row['error']} |"
    n = max(row["gradients"], 1)
    return (f"| {sigma:g}{mark} | {row['annealing_s']:.2f} | {row['refinement_s']:.2f} | "
            f"{row['iterations']} | {row['gradients']} | "
            f"{row['gradients'] / max(row['iterations'], 1):.2f} | "
            f"{1000 * row['inside_s'] / n:.2f} | "
            f"{1000 * (row['refinement_s'] - row['inside_s']) / n:.2f} | {row['stop']} | "
            f"{row['train_criterion']:.6g} | {row['test_error']:.2f} | "
            f"{reached(row['curve'], target)} |")


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        child(args.child)
        return 0
    from convnet.train import conjgrad
    target = args.target if args.target is not None else (1.0 if args.device == "cuda" else 5.0)
    sigmas = [float(s) for s in args.sigma.split(",") if s.strip()] or [None]
    out = args.out or Path(tempfile.mkdtemp(prefix="convnet-training-"))
    cpus = cpu_sets(args.cpus, args.parallel, args.threads)
    print(f"{args.ctl.name}: device {args.device}, {args.threads} threads, seed {args.seed}; "
          f"target {target:g} % test error; code {args.code}; files in {out}", flush=True)
    head = ("| sigma | anneal s | refine s | iterations | gradients | per iteration | evaluator ms "
            "| outside ms | stop | train criterion | test % | reached target (iteration / s) |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1), flush=True)
    rows = []
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        futures = [pool.submit(run_variant, args, s, out / f"variant{i}", cpus[i % len(cpus)])
                   for i, s in enumerate(sigmas)]
        for future in as_completed(futures):       # each row as soon as its run ends
            row = future.result()
            rows.append(row)
            print(format_row(row, conjgrad.WOLFE_SIGMA, target), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"ctl": str(args.ctl), "device": args.device,
                                         "threads": args.threads, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
