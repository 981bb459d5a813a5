"""Test error against training seconds: the book's conjugate gradients, SGD and Adam, on the host
or on one GPU.

    python benchmarks/methods.py controlfiles/mnist-small.ctl --threads 2 --seeds 1,2,3 \\
        --json benchmarks/host_methods.json --png benchmarks/host_methods.png
    python benchmarks/methods.py controlfiles/lenet-mnist-split.ctl --device cuda \\
        --methods CG,SGD-GPU,ADAM-GPU --every 0.1 --target-error 1 --target-error 0.9 \\
        --target-seconds 1 --target-seconds 2 --json lenet-gpu.json --png lenet-gpu.png
    python benchmarks/methods.py ctl --methods ADAM-GPU --set "EPOCHS = 24" --set "BATCH SIZE = 256"
    python benchmarks/methods.py --plot-only --json benchmarks/host_methods.json \\
        --png benchmarks/host_methods.png

Every method x seed is the control file with the method's lines put before its first TRAIN: the
preset's (PRESETS, chosen by name), then ``CUDA = YES`` with --device cuda, then every --set line
in the order given (a later line wins). Each is run as ``convnet run`` would in a process of its
own, one run after another; --device cpu runs on --threads host threads. Before the first run
every method's file is checked as ``convnet check`` would (a bad --set stops it there).

While a run trains, the weights are kept at the first check point (a conjugate-gradient iteration,
an epoch) after every --every seconds of training (fractions allowed; 0: at every check point);
after the run's TEST each kept set is tested on the same test cases (that testing and the keeping
are not in the seconds). A row: the method, the seed, TRAIN's seconds, the final training
criterion, the TEST misclassification, the device that ran it (the GPU's name, or host and
threads), the load average before and after the run, and the curve
[(seconds, test error %, training criterion)] (the criterion of the last iteration or epoch, of
its batches for SGD and Adam). The JSON also names the device and the machine (lscpu's model name
and cores); the PNG draws every curve and a guide line at each --target-error and
--target-seconds, its axis naming the device.
"""

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from convnet.atomic import replace_file

ROOT = Path(__file__).resolve().parents[1]

_SGD_HOST = ["TRAIN METHOD = SGD", "ANNEAL ITERS = 0", "BATCH SIZE = 256", "EPOCHS = 600",
             "LEARNING RATE = 1", "NESTEROV = YES"]
_ADAM_HOST = ["TRAIN METHOD = ADAM", "ANNEAL ITERS = 0", "BATCH SIZE = 256", "EPOCHS = 600",
              "LEARNING RATE = 0.01"]

# The settings compared, by name (benchmarks/NOTES.md, "Mini-batch training on the host", says why
# the host's are these). The -GPU presets take smaller batches and fewer epochs with a one-cycle
# rate: a GPU epoch costs milliseconds, and its runs are compared at seconds, not minutes.
PRESETS = {
    "CG": [],                                          # the book's: annealing, conjugate gradients
    "SGD": _SGD_HOST + ["LR SCHEDULE = CONSTANT"],
    "ADAM": _ADAM_HOST + ["LR SCHEDULE = CONSTANT"],
    "ADAM-WPEN": _ADAM_HOST + ["LR SCHEDULE = COSINE", "WPEN = 0.01"],
    # 100 epochs, then conjugate gradients from where they ended (at most 400 iterations)
    "SGD-CG": _SGD_HOST + ["LR SCHEDULE = CONSTANT", "TRAIN METHOD = SGD CG", "EPOCHS = 100",
                           "MAXITERS = 400"],
    "ADAM-CG": _ADAM_HOST + ["LR SCHEDULE = CONSTANT", "TRAIN METHOD = ADAM CG", "EPOCHS = 100",
                             "MAXITERS = 400"],
    "SGD-GPU": ["TRAIN METHOD = SGD", "ANNEAL ITERS = 0", "BATCH SIZE = 128", "EPOCHS = 16",
                "LEARNING RATE = 1", "NESTEROV = YES", "LR SCHEDULE = ONE CYCLE"],
    "ADAM-GPU": ["TRAIN METHOD = ADAM", "ANNEAL ITERS = 0", "BATCH SIZE = 128", "EPOCHS = 16",
                 "LEARNING RATE = 0.002", "LR SCHEDULE = ONE CYCLE"],
    # the best GPU settings found on lenet-mnist-split (NOTES, "Moved cases on one H100"): each
    # case moved by up to a pixel every epoch; Adam with 256-case batches, 40 epochs and 0.004
    "SGD-GPU-SHIFT": ["TRAIN METHOD = SGD", "ANNEAL ITERS = 0", "BATCH SIZE = 128", "EPOCHS = 16",
                      "LEARNING RATE = 1", "NESTEROV = YES", "LR SCHEDULE = ONE CYCLE",
                      "AUGMENT SHIFT = 1"],
    "ADAM-GPU-SHIFT": ["TRAIN METHOD = ADAM", "ANNEAL ITERS = 0", "BATCH SIZE = 256",
                       "EPOCHS = 40", "LEARNING RATE = 0.004", "LR SCHEDULE = ONE CYCLE",
                       "AUGMENT SHIFT = 1"],
}
COLORS = {"CG": "tab:blue", "SGD": "tab:orange", "ADAM": "tab:green", "ADAM-WPEN": "tab:red",
          "SGD-GPU": "tab:orange", "ADAM-GPU": "tab:green", "SGD-CG": "tab:purple",
          "ADAM-CG": "tab:olive", "SGD-GPU-SHIFT": "tab:red", "ADAM-GPU-SHIFT": "tab:brown"}
DEVICES = ("cpu", "cuda")


def method_lines(method, device="cpu", overrides=()):
    """The lines a run of ``method`` gets before its first TRAIN: the preset's, the device's, then
    the overrides (``NAME = value``, each as given)."""
    if method not in PRESETS:
        raise SystemExit(f"unknown method {method!r}: use one of {', '.join(PRESETS)}")
    if device not in DEVICES:
        raise SystemExit(f"unknown device {device!r}: use cpu or cuda")
    for line in overrides:
        if "=" not in line:
            raise SystemExit(f"--set {line!r}: write a parameter line, as \"EPOCHS = 24\"")
    return PRESETS[method] + (["CUDA = YES"] if device == "cuda" else []) + list(overrides)


def with_lines(text, lines):
    """The control file's ``text`` with ``lines`` put before its first TRAIN."""
    body = text.splitlines()
    first_train = next((i for i, line in enumerate(body) if line.strip().upper() == "TRAIN"), None)
    if first_train is None:
        raise SystemExit("the control file has no TRAIN line")
    return "\n".join(body[:first_train] + list(lines) + body[first_train:]) + "\n"


def device_label(model, threads):
    """The GPU's name from the model's device runtime (several GPUs: the first's name and their
    count), else the host and its threads."""
    backend = model.backend
    parts = getattr(backend, "backends", None) or [backend]
    runtime = getattr(parts[0], "rt", None)
    if runtime is None:
        return f"host, {threads} thread{'' if threads == 1 else 's'}"
    name = runtime.device.name()
    return name if len(parts) == 1 else f"{len(parts)} x {name}"


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
            # the model's weights are a host array on both paths (the device's runner copies
            # them back each epoch; its conjugate gradients hand over a host array that is
            # reused two iterations later), so a copy now keeps them
            kept.append((seconds, clock["criterion"],
                         np.array(context.model.weights, dtype=np.float64, copy=True)))
            clock["last"] = seconds
        clock["excluded"] += time.perf_counter() - t0

    curve, device = [], {}

    def test_and_curve(model, dataset, log):
        result = original[2](model, dataset, log)
        device["label"] = device_label(model, spec["threads"])
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
                device=spec["device"] if spec["device"] == "cpu" else "auto",
                quiet=True, report=False)
    Path(spec_path).with_suffix(".row.json").write_text(json.dumps(
        result_row(Path(spec["out"]) / "results.json", clock["excluded"], curve, device)))


def result_row(results_path, excluded, curve, device):
    """A row from the run's results.json (TRAIN's seconds less the keeping of the weights)."""
    runs = json.loads(results_path.read_text())["runs"]
    train = next(r for r in runs if r["command"] == "TRAIN")
    test = [r for r in runs if r["command"] == "TEST"][-1]
    seconds = train["seconds"]["total"] - excluded
    return {"train_s": seconds, "criterion": train["final_criterion"],
            "test_error": test["misclassification"], "device": train["device"],
            "threads": train["threads"], "device_label": device.get("label"),
            "curve": curve + [[round(seconds, 3), test["misclassification"],
                               train["final_criterion"]]]}


def write_method_file(ctl, method, lines):
    """The control file with ``method``'s lines, beside it (its data paths stay right); the
    caller removes it."""
    path = ctl.parent / f".methods-{os.getpid()}-{method}.ctl"
    path.write_text(with_lines(ctl.read_text(), lines))
    return path


def check_methods(ctl, methods):
    """Check every method's control file as ``convnet check`` does; the first error ends it."""
    from convnet.errors import ConvnetError
    from convnet.session import check
    for method, lines in methods.items():
        path = write_method_file(ctl, method, lines)
        try:
            check([path], echo=lambda *a, **k: None)
        except ConvnetError as e:
            raise SystemExit(f"{method}: {e} (lines put before TRAIN: {lines})")
        finally:
            path.unlink()


def run_one(ctl, method, lines, seed, device, threads, every):
    """One run in a process of its own; its row with the load average around it."""
    with tempfile.TemporaryDirectory() as tmp:
        path = write_method_file(ctl, method, lines)
        spec = Path(tmp) / "spec.json"
        spec.write_text(json.dumps({"ctl": str(path), "out": str(Path(tmp) / "run"),
                                    "seed": seed, "device": device,
                                    "threads": threads if device == "cpu" else None,
                                    "every": every}))
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


def axis_device(data):
    """The device words of the seconds axis: the rows' (earlier files: host and threads)."""
    labels = sorted({row.get("device_label") for row in data["rows"]} - {None})
    return " / ".join(labels) if labels else f"host, {data.get('threads', '?')} threads"


def plot(data, png, target_errors=(5.0,), target_seconds=(60.0,), ymax=20.0):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5))
    for row in data["rows"]:
        s, e, _ = zip(*row["curve"])
        label = row["method"] if row["seed"] == data["seeds"][0] else None
        ax.plot(s, e, color=COLORS.get(row["method"], "gray"), alpha=0.8, label=label)
        ax.plot(s[-1], e[-1], "o", color=COLORS.get(row["method"], "gray"))
    for error in target_errors:
        ax.axhline(error, color="black", lw=0.8, ls="--")
    for seconds in target_seconds:
        ax.axvline(seconds, color="black", lw=0.8, ls=":")
    ax.set_ylim(0, ymax)
    ax.set_xlabel(f"training seconds (TRAIN, {axis_device(data)})")
    ax.set_ylabel("test misclassification %")
    ax.set_title(f"{data['ctl']}: seeds {', '.join(map(str, data['seeds']))}\n{data['machine']}",
                 fontsize=9)
    ax.legend()
    fig.tight_layout()
    picture = io.BytesIO()
    fig.savefig(picture, format="png", dpi=100)
    plt.close(fig)
    replace_file(png, picture.getvalue())


def arguments(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ctl", type=Path, nargs="?")
    ap.add_argument("--child")
    ap.add_argument("--methods", default="CG,SGD,ADAM", help=f"of {', '.join(PRESETS)}")
    ap.add_argument("--device", choices=DEVICES, default="cpu")
    ap.add_argument("--set", action="append", default=[], dest="overrides",
                    metavar='"NAME = value"', help="a line after every method's (repeatable)")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--threads", type=int, default=2, help="host threads (--device cpu)")
    ap.add_argument("--every", type=float, default=5.0, help="seconds between kept weights")
    ap.add_argument("--target-error", type=float, action="append", dest="target_errors",
                    help="a guide line at this test error %% (repeatable; default 5)")
    ap.add_argument("--target-seconds", type=float, action="append", dest="target_seconds",
                    help="a guide line at these training seconds (repeatable; default 60)")
    ap.add_argument("--ymax", type=float, default=20.0, help="the plot's top test error %%")
    ap.add_argument("--json", type=Path, default=Path("methods.json"))
    ap.add_argument("--png", type=Path, default=Path("methods.png"))
    ap.add_argument("--plot-only", action="store_true")
    args = ap.parse_args(argv)
    args.target_errors = args.target_errors or [5.0]
    args.target_seconds = args.target_seconds or [60.0]
    if not args.child and not args.plot_only and args.ctl is None:
        ap.error("a control file is needed (or --plot-only)")
    return args


def main(argv=None):
    args = arguments(argv)
    if args.child:
        return child(args.child)
    guides = dict(target_errors=args.target_errors, target_seconds=args.target_seconds,
                  ymax=args.ymax)
    if args.plot_only:
        return plot(json.loads(args.json.read_text()), args.png, **guides)
    seeds = [int(s) for s in args.seeds.split(",")]
    ctl = args.ctl.resolve()
    methods = {m: method_lines(m, args.device, args.overrides) for m in args.methods.split(",")}
    check_methods(ctl, methods)
    data = {"ctl": args.ctl.name, "device": args.device, "machine": machine(),
            "threads": args.threads if args.device == "cpu" else None, "seeds": seeds,
            "every": args.every, "overrides": args.overrides, "methods": methods, "rows": []}
    for method, lines in methods.items():
        for seed in seeds:
            row = run_one(ctl, method, lines, seed, args.device, args.threads, args.every)
            data["rows"].append(row)
            data["device_label"] = axis_device(data)
            print(f"{method:9s} seed {seed}: {row['train_s']:7.2f} s, criterion "
                  f"{row['criterion']:.3g}, test {row['test_error']:.2f} % on "
                  f"{row['device_label']} (load {row['load_before']:.1f} -> "
                  f"{row['load_after']:.1f})", flush=True)
            replace_file(args.json, (json.dumps(data, indent=1) + "\n").encode())
    plot(data, args.png, **guides)


if __name__ == "__main__":
    main()
