"""Mini-batch training benchmark: test error against training seconds for SGD and ADAM settings.

    python benchmarks/minibatch.py controlfiles/lenet-mnist-split.ctl --device cuda \\
        "ADAM LR=0.002 EPOCHS=12 BATCH=128 SCHEDULE=ONE CYCLE"
    python benchmarks/minibatch.py controlfiles/mnist-small.ctl --threads 2 \\
        "SGD LR=0.5 EPOCHS=60 BATCH=64 SCHEDULE=COSINE NESTEROV"

Each variant is the control file with its settings put before the first TRAIN (TRAIN METHOD,
LEARNING RATE, EPOCHS, BATCH SIZE, LR SCHEDULE, NESTEROV = YES, ANNEAL ITERS = 0 unless ANNEAL=n
is given), run as ``convnet run`` would (seed 1 unless --seed) in a process of its own. A row:
the variant, the seconds of each phase of the TRAIN and its total (the final pass and confusion
matrix included), the training criterion, and the TEST misclassification (percent).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEYS = {"LR": "LEARNING RATE", "EPOCHS": "EPOCHS", "BATCH": "BATCH SIZE",
        "SCHEDULE": "LR SCHEDULE", "ANNEAL": "ANNEAL ITERS", "MOMENTUM": "MOMENTUM",
        "WPEN": "WPEN", "SCALE": "ANNEAL SCALE"}


def settings_lines(variant):
    """'ADAM LR=0.002 EPOCHS=12 SCHEDULE=ONE CYCLE NESTEROV' -> control-file lines."""
    words = variant.split()
    lines = [f"TRAIN METHOD = {words[0]}"]
    values = {"ANNEAL": "0"}
    key = None
    for word in words[1:]:
        if word == "NESTEROV":
            lines.append("NESTEROV = YES")
        elif "=" in word:
            key, value = word.split("=", 1)
            values[key] = value
        else:                                   # a second word of the last value (ONE CYCLE)
            values[key] += " " + word
    lines += [f"{KEYS[k]} = {v}" for k, v in values.items()]
    return lines


def run_variant(ctl, variant, device, threads, seed):
    text = ctl.read_text().splitlines()
    first_train = next(i for i, line in enumerate(text) if line.strip().upper() == "TRAIN")
    extra = settings_lines(variant) + [f"RANDOM SEED = {seed}",
                                       f"CUDA = {'YES' if device == 'cuda' else 'NO'}"]
    if device != "cuda":
        extra.append(f"THREADS = {threads}")
    body = text[:first_train] + extra + text[first_train:]
    with tempfile.TemporaryDirectory() as tmp:
        path = ctl.parent / f".minibatch-{os.getpid()}.ctl"
        path.write_text("\n".join(body) + "\n")
        try:
            out = Path(tmp) / "run"
            env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
            proc = subprocess.run([sys.executable, "-m", "convnet", "run", path.name, "--out",
                                   str(out)], cwd=ctl.parent, env=env, capture_output=True,
                                  text=True)
        finally:
            path.unlink()
        if proc.returncode:
            return f"{variant}: failed ({proc.returncode}): {proc.stderr.strip()[-400:]}"
        runs = json.loads((out / "results.json").read_text())["runs"]
    train = next(r for r in runs if r["command"] == "TRAIN")
    test = next(r for r in runs if r["command"] == "TEST")
    phases = ", ".join(f"{p['name']} {p['seconds']:.3f} s" for p in train["phases"])
    epochs = train["phases"][-1]["figures"].get("epoch_seconds") or [0.0]
    phases += f" (epoch 1 {epochs[0]:.3f} s, later {min(epochs[1:] or epochs):.3f}-{max(epochs[1:] or epochs):.3f} s)"
    return (f"{variant:55s} | {phases}, TRAIN total {train['seconds']['total']:.3f} s | "
            f"criterion {train['final_criterion']:.5f} | test error "
            f"{test['misclassification']:.2f} %")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ctl", type=Path)
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    for variant in args.variants:
        print(run_variant(args.ctl.resolve(), variant, args.device, args.threads, args.seed),
              flush=True)


if __name__ == "__main__":
    main()
