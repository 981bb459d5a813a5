"""Hashes of everything convnet computes and writes, to show that a change of structure changed no
behaviour: run it before and after, and compare.

    python3 tools/behaviour_hashes.py -o before.json            # on the old commit
    python3 tools/behaviour_hashes.py -o after.json --compare before.json

Three groups, each on the host path and on the device path emulated in numpy (the emulated CUDA
runtime of tests/test_device_emulated.py, so no GPU is needed; ``--gpu`` uses the real one):
  golden   the author's golden vectors (tests/fixtures/reference): criterion, gradient and outputs,
           hashed to the last bit;
  random   random architectures of every layer kind (tests/test_device_backend.py), the same;
  runs     every example control file in controlfiles/, run with --seed 1; TRAIN and TEST lines
           get MAXITERS / ANNEAL ITERS caps and the large data sets a KEEP CASES before them so the
           whole set runs in minutes. CONVNET.LOG, CUDA.LOG and results.json are hashed with times,
           dates and the version taken out (what differs between two runs of the same code).

results.json is hashed in the layout of the results reader of the code being run (a file of an
older format version is converted as ``convnet`` reads it), so that a change of the results
layout alone can be checked too: ``--baseline-results DIR`` takes the baseline's normalised
results.json files kept with ``--keep`` (``DEVICE-FILE.ctl-results.json.txt``), converts them
through the current reader and hashes them in place of the baseline's own results.json hashes;
``--hashes FILE`` compares hashes written earlier with ``-o`` instead of computing them.

A hash that differs names the item; ``--keep DIR`` keeps the normalised files to diff.
"""

import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
sys.path.insert(0, ROOT)

CAPS = ["MAXITERS = 12", "ANNEAL ITERS = 15"]
LARGE_DATA_CASES = "KEEP CASES 1 300"         # before TRAIN / TEST of the files named below
LARGE_DATA = ("lenet-mnist.ctl", "lenet-mnist-split.ctl", "mnist-small.ctl", "series-sp500.ctl",
              "series-sp500-split.ctl", "local-rgb.ctl")
TIME_PATTERNS = [
    (re.compile(r"\d+(\.\d+)?(e[-+]?\d+)? ?(ms|s|seconds|sec)\b"), "<time>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\+00:00)?"), "<date>"),
    (re.compile(r"convnet \d+\.\d+\.\d+\S*"), "convnet <version>"),
]
TIME_KEYS = {"started", "updated", "finished", "seconds", "writing_seconds", "convnet_version"}


def digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a, dtype=np.float64))
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def emulated_device():
    """The numpy emulation of the CUDA runtime in place of PyCUDA (as the tests use it)."""
    emulation = _load("convnet_emulation", os.path.join(TESTS, "test_device_emulated.py"))
    from convnet.device import runtime
    from convnet import devices
    saved = (dict(runtime.Runtime._instances), devices.cuda_status)
    runtime.Runtime._instances = {0: emulation.FakeRuntime()}
    devices.cuda_status = lambda: (True, "emulated device")
    try:
        yield
    finally:
        runtime.Runtime._instances, devices.cuda_status = saved[0], saved[1]


def evaluate(arch, device, inputs, classes, weights, wpen):
    from convnet.model import Model
    model = Model(arch, device=device, threads=2) if device == "cpu" else Model(arch, device=device)
    ev = model.evaluator(inputs, classes, wpen)
    crit, grad = ev.gradient(weights)
    return digest([crit], grad, [ev.criterion(weights)], ev.outputs(weights))


def golden(device):
    from convnet.architecture import Architecture
    out = {}
    for path in sorted(os.listdir(os.path.join(TESTS, "fixtures", "reference"))):
        if not path.endswith(".npz"):
            continue
        with np.load(os.path.join(TESTS, "fixtures", "reference", path)) as z:
            a = {k: z[k] for k in z.files}
        arch = Architecture.from_lines([str(s) for s in a["control_lines"]], int(a["rows"]),
                                       int(a["cols"]), int(a["bands"]), int(a["n_classes"]))
        out[path] = evaluate(arch, device, a["inputs"], a["classes"], a["weights"], float(a["wpen"]))
    return out


def random_nets(device, count):
    backend_tests = _load("convnet_backend_tests", os.path.join(TESTS, "test_device_backend.py"))
    out = {}
    for seed in range(count):
        arch = backend_tests.random_architecture(np.random.default_rng(1000 + seed))
        rng = np.random.default_rng(seed)
        x = rng.random((200, arch.bands, arch.rows, arch.cols)) * 2 - 1
        c = rng.integers(0, arch.n_classes, 200)
        w = rng.normal(0, 0.5, arch.n_weights)
        out[f"seed {seed}"] = evaluate(arch, device, x, c, w, 0.01)
    return out


def capped(text, name, cuda):
    """The control file with caps before every TRAIN and TEST (see the module notes)."""
    lines = []
    for line in text.splitlines():
        word = line.strip().upper()
        if word in ("TRAIN", "TEST"):
            if name in LARGE_DATA:
                lines.append(LARGE_DATA_CASES)
            if word == "TRAIN":
                lines.extend(CAPS)
            if cuda:
                lines.append("CUDA = YES")
        lines.append(line)
    return "\n".join(lines) + "\n"


# On a real GPU the free memory and the CUDA.LOG timing section (section 4, up to the book's
# activities) vary from run to run as well.
GPU_PATTERNS = [(re.compile(r"\(\d+ MiB free\)"), "(<free> MiB free)"),
                (re.compile(r"\n\d+\. Device time by layer.*?(?=\nThe book's activities)", re.S),
                 "\n<device time section>")]


def normalised_log(text, gpu=False):
    for pattern, replacement in GPU_PATTERNS if gpu else ():
        text = pattern.sub(replacement, text)
    for pattern, replacement in TIME_PATTERNS:
        text = pattern.sub(replacement, text)
    kept = []
    skipping = False
    for line in text.splitlines():
        # the timing tables: every figure in them is a time or a count of timed calls
        if re.match(r"(Host|Device) timing|^Layer .*calls|Timing by layer", line):
            skipping = True
        if skipping and not line.strip():
            skipping = False
        if not skipping:
            kept.append(line)
    return "\n".join(kept)


def normalised_results(data):
    if isinstance(data, dict):
        return {k: normalised_results(v) for k, v in data.items() if k not in TIME_KEYS}
    if isinstance(data, list):
        return [normalised_results(v) for v in data]
    if isinstance(data, str):
        return normalised_log(data)
    return data


def results_text(data):
    """Results data as hashed: in the current reader's layout, normalised, as sorted JSON."""
    try:
        from convnet.logs.results import in_current_layout
    except ImportError:                     # a version of convnet with one results layout
        def in_current_layout(data):
            return data
    return json.dumps(normalised_results(in_current_layout(data)), indent=1, sort_keys=True)


def baseline_results(before, folder, keep=None):
    """``before`` with its results.json hashes made anew from the normalised files in
    ``folder`` (see the module notes); returns how many were replaced."""
    replaced = 0
    for name in sorted(os.listdir(folder)):
        m = re.match(r"(\w+)-(.+\.ctl)-results\.json\.txt$", name)
        if not m:
            continue
        device, control_file = m.groups()
        with open(os.path.join(folder, name)) as f:
            text = results_text(json.load(f))
        before.setdefault(f"{device} runs", {})[f"{control_file} results.json"] = \
            hashlib.sha256(text.encode()).hexdigest()[:16]
        replaced += 1
        if keep:
            os.makedirs(keep, exist_ok=True)
            with open(os.path.join(keep, f"baseline-{name}"), "w") as f:
                f.write(text)
    return replaced


def control_runs(device, keep=None, real_gpu=False, only=None):
    from convnet.session import run
    from convnet.sweep import sweep_of
    out = {}
    folder = tempfile.mkdtemp(prefix="convnet-hashes-")
    try:
        shutil.copytree(os.path.join(ROOT, "data"), os.path.join(folder, "data"))
        os.makedirs(os.path.join(folder, "controlfiles"))
        for name in sorted(os.listdir(os.path.join(ROOT, "controlfiles"))):
            if not name.endswith(".ctl") or (only and name not in only):
                continue
            with open(os.path.join(ROOT, "controlfiles", name)) as f:
                text = capped(f.read(), name, device != "cpu")
            ctl = os.path.join(folder, "controlfiles", name)
            with open(ctl, "w") as f:
                f.write(text)
            run_out = os.path.join(folder, "out-" + name)
            start = time.perf_counter()
            run([ctl], out=run_out, seed=1, threads=2, device=device, report=False,
                sweep_run=1 if sweep_of(ctl) else None)     # a sweep file: its first combination
            files = {}
            for log_name in ("CONVNET.LOG", "CUDA.LOG"):
                path = os.path.join(run_out, log_name)
                if os.path.exists(path):
                    with open(path) as f:
                        files[log_name] = normalised_log(f.read().replace(folder, "<dir>"),
                                                         gpu=real_gpu)
            with open(os.path.join(run_out, "results.json")) as f:
                results = json.loads(f.read().replace(folder, "<dir>"))
            files["results.json"] = results_text(results)
            for file_name, text in files.items():
                out[f"{name} {file_name}"] = hashlib.sha256(text.encode()).hexdigest()[:16]
                if keep:
                    os.makedirs(keep, exist_ok=True)
                    with open(os.path.join(keep, f"{device}-{name}-{file_name}.txt"), "w") as f:
                        f.write(text)
            print(f"  {device} {name} {time.perf_counter() - start:.0f} s", file=sys.stderr,
                  flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return out


def all_hashes(args):
    result = {}
    devices = [("cpu", contextlib.nullcontext),
               ("cuda", contextlib.nullcontext if args.gpu else emulated_device)]
    devices = [d for d in devices if args.path in (None, d[0])]
    for device, context in devices:
        with context():
            result[f"{device} golden"] = golden(device)
            result[f"{device} random"] = random_nets(device, args.random)
            if not args.no_runs:
                result[f"{device} runs"] = control_runs(device, args.keep,
                                                        args.gpu and device == "cuda",
                                                        args.files and args.files.split(","))
        print(f"{device} done", file=sys.stderr, flush=True)
    return result


def compare(now, before):
    """Print every item whose hash differs; items run on one side only are counted apart."""
    differences = compared = 0
    for group in sorted(set(now) | set(before)):
        a, b = now.get(group, {}), before.get(group, {})
        for item in sorted(set(a) & set(b)):
            compared += 1
            if a[item] != b[item]:
                differences += 1
                print(f"DIFFERS  {group}: {item}  {b[item]} -> {a[item]}")
    one_side = sum(len(set(now.get(g, {})) ^ set(before.get(g, {}))) for g in set(now) | set(before))
    print(f"{compared} hashes compared, {differences} differ ({one_side} on one side only)")
    return differences


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", help="write the hashes here (JSON)")
    parser.add_argument("--compare", help="hashes written earlier to compare with")
    parser.add_argument("--random", type=int, default=12, help="random architectures (12)")
    parser.add_argument("--no-runs", action="store_true", help="skip the control-file runs")
    parser.add_argument("--files", help="run only these control files (comma-separated names)")
    parser.add_argument("--path", choices=("cpu", "cuda"), help="only the host or the device path")
    parser.add_argument("--hashes", metavar="FILE",
                        help="compare the hashes written earlier with -o instead of computing them")
    parser.add_argument("--baseline-results", metavar="DIR",
                        help="with --compare: the baseline's results.json hashes made from its "
                             "normalised files kept in DIR, read through the current reader")
    parser.add_argument("--gpu", action="store_true", help="the real GPU instead of the emulation")
    parser.add_argument("--keep", help="keep the normalised logs and results in this folder")
    args = parser.parse_args()
    if args.hashes:
        with open(args.hashes) as f:
            hashes = json.load(f)
    else:
        hashes = all_hashes(args)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(hashes, f, indent=1, sort_keys=True)
    if args.compare:
        with open(args.compare) as f:
            before = json.load(f)
        if args.baseline_results:
            count = baseline_results(before, args.baseline_results, args.keep)
            print(f"{count} baseline results.json hashes made from {args.baseline_results}")
        sys.exit(1 if compare(hashes, before) else 0)


if __name__ == "__main__":
    main()
