"""Test error against training seconds on the host: the book's conjugate gradients, SGD and Adam.

    python benchmarks/host_methods.py controlfiles/mnist-small.ctl --threads 2 --seeds 1,2,3 \\
        --json benchmarks/host_methods.json --png benchmarks/host_methods.png
    python benchmarks/host_methods.py --plot-only --json benchmarks/host_methods.json \\
        --png benchmarks/host_methods.png

Every method x seed is the control file with the method's lines (METHODS) put before its first
TRAIN, run as ``convnet run`` would in a process of its own, one run after another. While it
trains, the weights are kept at the first check point (a conjugate-gradient iteration, an epoch)
after every --every seconds of training; after the run's TEST each kept set is tested on the same
test cases (that testing and the keeping are not in the seconds). A row: the method, the seed,
TRAIN's seconds, the final training criterion, the TEST misclassification, the load average
before and after the run, and the curve [(seconds, test error %, training criterion)] (the
criterion of the last iteration or epoch, of its batches for SGD and Adam). The JSON also names the
machine (lscpu's model name and cores); the PNG draws every curve, the 5 % line and 60 s.
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

# The settings compared (benchmarks/NOTES.md, "Mini-batch training on the host", says why these).
METHODS = {
    "CG": [],                                          # the book's: annealing, conjugate gradients
    "SGD": ["TRAIN METHOD = SGD", "ANNEAL ITERS = 0", "BATCH SIZE = 256", "EPOCHS = 600",
            "LEARNING RATE = 1", "NESTEROV = YES", "LR SCHEDULE = CONSTANT"],
    "ADAM": ["TRAIN METHOD = ADAM", "ANNEAL ITERS = 0", "BATCH SIZE = 256", "EPOCHS = 600",
             "LEARNING RATE = 0.01", "LR SCHEDULE = CONSTANT"],
    "ADAM-WPEN": ["TRAIN METHOD = ADAM", "ANNEAL ITERS = 0", "BATCH SIZE = 256", "EPOCHS = 600",
                  "LEARNING RATE = 0.01", "LR SCHEDULE = COSINE", "WPEN = 0.01"],
}


def child(spec_path):
    """Run one method and seed in this process; writes its row next to the spec."""
    spec = json.loads(Path(spec_path).read_text())
    import numpy as np
    import convnet
    from convnet.train import trainer
    from convnet.train.confusion import confusion_matrix, misclassification
    kept, clock = [], {"excluded": 0.0, "last": -1e9, "criterion": None}
    original = trainer.TrainContext.report, trainer.TrainContext.validate, trainer.test

    def report(context, phase, step, criterion, *rest):
        clock["criterion"] = float(criterion)
        return original[0](context, phase, step, criterion, *rest)

    def validate(context, phase, step):
        original[1](context, phase, step)
        t0 = time.perf_counter()
        seconds = t0 - context.started - clock["excluded"]
        if seconds - clock["last"] >= spec["every"]:
            kept.append((seconds, clock["criterion"], np.array(context.model.weights, copy=True)))
            clock["last"] = seconds
        clock["excluded"] += time.perf_counter() - t0

    curve = []

    def test_and_curve(model, dataset, log):
        result = original[2](model, dataset, log)
        final = model.weights.copy()
        ev = model.evaluator(dataset.inputs, dataset.classes, 0.0)
        for seconds, criterion, w in kept:
            matrix = confusion_matrix(ev.outputs(w), dataset.classes, model.arch.n_classes)
            curve.append([round(seconds, 3), misclassification(matrix), criterion])
        model.weights = final
        return result

    trainer.TrainContext.report, trainer.TrainContext.validate = report, validate
    trainer.test = test_and_curve
    convnet.run(spec["ctl"], out=spec["out"], seed=spec["seed"], threads=spec["threads"],
                quiet=True, report=False)
    runs = json.loads((Path(spec["out"]) / "results.json").read_text())["runs"]
    train = next(r for r in runs if r["command"] == "TRAIN")
    test = [r for r in runs if r["command"] == "TEST"][-1]
    row = {"train_s": train["seconds"]["total"] - clock["excluded"],
           "criterion": train["final_criterion"], "test_error": test["misclassification"],
           "curve": curve + [[round(train["seconds"]["total"] - clock["excluded"], 3),
                              test["misclassification"], train["final_criterion"]]]}
    Path(spec_path).with_suffix(".row.json").write_text(json.dumps(row))


def run_one(ctl, method, seed, threads, every):
    """One run in a process of its own; its row with the load average around it."""
    text = ctl.read_text().splitlines()
    first_train = next(i for i, line in enumerate(text) if line.strip().upper() == "TRAIN")
    body = text[:first_train] + METHODS[method] + text[first_train:]
    with tempfile.TemporaryDirectory() as tmp:
        path = ctl.parent / f".host-methods-{os.getpid()}.ctl"
        path.write_text("\n".join(body) + "\n")
        spec = Path(tmp) / "spec.json"
        spec.write_text(json.dumps({"ctl": str(path), "out": str(Path(tmp) / "run"),
                                    "seed": seed, "threads": threads, "every": every}))
        load_before = os.getloadavg()[0]
        env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        try:
            proc = subprocess.run([sys.executable, __file__, "--child", str(spec)], cwd=ctl.parent,
                                  env=env, capture_output=True, text=True)
        finally:
            path.unlink()
        if proc.returncode:
            raise SystemExit(f"{method} seed {seed} failed: {proc.stderr.strip()[-600:]}")
        row = json.loads(spec.with_suffix(".row.json").read_text())
    row.update(method=method, seed=seed, load_before=load_before, load_after=os.getloadavg()[0])
    return row


def machine():
    """lscpu's model name and CPU count (Linux), else the platform's words."""
    try:
        fields = dict(line.split(":", 1) for line in subprocess.run(
            ["lscpu"], capture_output=True, text=True).stdout.splitlines() if ":" in line)
        return f"{fields['Model name'].strip()}, {fields['CPU(s)'].strip()} CPUs"
    except (OSError, KeyError):
        import platform
        return platform.processor() or platform.machine()


def plot(data, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colors = {"CG": "tab:blue", "SGD": "tab:orange", "ADAM": "tab:green", "ADAM-WPEN": "tab:red"}
    fig, ax = plt.subplots(figsize=(8, 5))
    for row in data["rows"]:
        s, e, _ = zip(*row["curve"])
        label = row["method"] if row["seed"] == data["seeds"][0] else None
        ax.plot(s, e, color=colors.get(row["method"], "gray"), alpha=0.8, label=label)
        ax.plot(s[-1], e[-1], "o", color=colors.get(row["method"], "gray"))
    ax.axhline(5.0, color="black", lw=0.8, ls="--")
    ax.axvline(60.0, color="black", lw=0.8, ls=":")
    ax.set_ylim(0, 20)
    ax.set_xlabel("training seconds (TRAIN, 2 host threads)")
    ax.set_ylabel("test misclassification %")
    ax.set_title(f"{data['ctl']}: seeds {', '.join(map(str, data['seeds']))}\n{data['machine']}",
                 fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ctl", type=Path, nargs="?")
    ap.add_argument("--child")
    ap.add_argument("--methods", default="CG,SGD,ADAM")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--every", type=float, default=5.0, help="seconds between kept weights")
    ap.add_argument("--json", type=Path, default=Path("host_methods.json"))
    ap.add_argument("--png", type=Path, default=Path("host_methods.png"))
    ap.add_argument("--plot-only", action="store_true")
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child)
    if args.plot_only:
        return plot(json.loads(args.json.read_text()), args.png)
    seeds = [int(s) for s in args.seeds.split(",")]
    data = {"ctl": args.ctl.name, "machine": machine(), "threads": args.threads, "seeds": seeds,
            "methods": {m: METHODS[m] for m in args.methods.split(",")}, "rows": []}
    for method in args.methods.split(","):
        for seed in seeds:
            row = run_one(args.ctl.resolve(), method, seed, args.threads, args.every)
            data["rows"].append(row)
            print(f"{method:5s} seed {seed}: {row['train_s']:7.1f} s, criterion "
                  f"{row['criterion']:.3g}, test {row['test_error']:.2f} % (load "
                  f"{row['load_before']:.1f} -> {row['load_after']:.1f})", flush=True)
            args.json.write_text(json.dumps(data, indent=1) + "\n")
    plot(data, args.png)


if __name__ == "__main__":
    main()
