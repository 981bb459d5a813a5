"""Fuzz `convnet check` with mutated control files and bad data files.

    python tools/fuzz_controlfiles.py                    # 10,000 cases, seed 1
    python tools/fuzz_controlfiles.py --cases 500 --seed 7 --show 5

Every case is an example control file from controlfiles/ (data paths pointed at small copies of the
sample data) changed by a few random mutations: lines dropped, doubled, swapped or cut; numbers
replaced by edge values (0, -1, 2**31, 2**32 + 1, 10**23, 1e308, nan, words); keywords misspelled;
NUL bytes, quotes, '=' and long runs inserted; registry commands with random arguments inserted;
file names replaced by bad data files (truncated and garbage gzip, wrong IDX magic, headers that
promise more images than present, bad labels, text and NaN in series files, truncated and
mislabelled CIFAR records, damaged model files, empty files, a folder, /dev/null, names that do not
exist). Each case runs `convnet check FILE` in this process with a time limit, and is counted as

    exit 0          the file checks
    clean error     exit status 2 and exactly one line `convnet: error: ...` (under 400 characters)
    traceback       an exception escaped
    unclean         no exception, but not the clean form (several lines, a longer line, another
                    exit status)
    hang            the time limit passed

The host memory `check` may plan for is capped (--memory-mib, default 256) so that sizes which fit
are still cheap to read, and larger ones exercise the refusal. The script prints the counts, and
the first few control files of each failing kind.

The same corpus and mutator drive tests/test_fuzz_controlfiles.py (a few hundred cases in the suite).
"""

import argparse
import gzip
import os
import random
import re
import shutil
import signal
import struct
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from click.testing import CliRunner  # noqa: E402

from convnet import memory  # noqa: E402
from convnet.cli import main as cli_main  # noqa: E402
from convnet.control import COMMANDS, PARAMETERS  # noqa: E402

EDGE_NUMBERS = ["0", "-1", "1", "2", "3", "7", "16", "255", "65535", "65536", "2147483647",
                "2147483648", "4294967297", "99999999999999999999999", "1e308", "-1e308",
                "nan", "inf", "0.5", "-0.0", "1e-300", "x", "0x10", "1,5", "+3", "--2",
                "9" * 120]
SNIPPETS = ["\0", '"', "=", "//", "\t", "\xff", "\u00e9", " = ", "LAYER", '""', "\r", "\\"]


class Hang(BaseException):
    """The time limit of one case passed (a BaseException, so nothing inside catches it)."""


# ---------------------------------------------------------------------------------- the corpus
class Corpus:
    """The example control files (their data pointed at small copies) and a set of bad data files."""

    def __init__(self, workdir):
        self.workdir = Path(workdir)
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        self.good = self._small_data(data)
        self.bad = self._bad_data(data)
        self.bases = []
        for path in sorted((ROOT / "controlfiles").glob("*.ctl")):
            text = path.read_text()
            for name, small in self.good.items():
                text = text.replace(f'"../data/{name}"', f'"{small}"')
            self.bases.append((path.name, text))
        self.files = list(self.good.values()) + list(self.bad)

    @staticmethod
    def _small_data(data):
        """Small copies of the sample data, so that a case costs milliseconds."""
        src = ROOT / "data"
        out = {}
        images = gzip.decompress((src / "mnist-3000-images-idx3-ubyte.gz").read_bytes())
        labels = gzip.decompress((src / "mnist-3000-labels-idx1-ubyte.gz").read_bytes())
        n = 300
        small_images = struct.pack(">IIII", 0x803, n, 28, 28) + images[16:16 + n * 784]
        small_labels = struct.pack(">II", 0x801, n) + labels[8:8 + n]
        for name in ("t10k-images-idx3-ubyte.gz", "mnist-3000-images-idx3-ubyte.gz"):
            (data / name).write_bytes(gzip.compress(small_images, compresslevel=1))
            out[name] = data / name
        for name in ("t10k-labels-idx1-ubyte.gz", "mnist-3000-labels-idx1-ubyte.gz"):
            (data / name).write_bytes(gzip.compress(small_labels, compresslevel=1))
            out[name] = data / name
        lines = (src / "sp500-daily-1927-2020.csv").read_text().splitlines()
        (data / "sp500-daily-1927-2020.csv").write_text("\n".join(lines[:400]) + "\n")
        out["sp500-daily-1927-2020.csv"] = data / "sp500-daily-1927-2020.csv"
        shutil.copy(src / "cifar-format-sample.bin", data / "cifar-format-sample.bin")
        out["cifar-format-sample.bin"] = data / "cifar-format-sample.bin"
        return out

    @staticmethod
    def _bad_data(data):
        """Damaged data and model files of every kind the program reads."""
        rng = random.Random(0)
        mnist = gzip.decompress((data / "mnist-3000-images-idx3-ubyte.gz").read_bytes())
        labels = gzip.decompress((data / "mnist-3000-labels-idx1-ubyte.gz").read_bytes())
        cifar = (data / "cifar-format-sample.bin").read_bytes()
        packed = gzip.compress(mnist)
        files = {
            "truncated.gz": packed[:len(packed) // 2],
            "garbage.gz": b"\x1f\x8b" + bytes(rng.randrange(256) for _ in range(500)),
            "wrong-magic.idx": struct.pack(">I", 0x804) + mnist[4:],
            "labels-as-images.idx": labels,
            "promises-more.idx": struct.pack(">IIII", 0x803, 10 ** 6, 28, 28) + mnist[16:],
            "huge-header.idx": struct.pack(">IIII", 0x803, 2 ** 32 - 1, 2 ** 16, 2 ** 16),
            "bad-labels.idx": labels[:8] + bytes([200]) * (len(labels) - 8),
            "short-labels.idx": struct.pack(">II", 0x801, 5) + labels[8:13],
            "extra-bytes.idx": mnist + b"\0" * 10,
            "header-only.idx": mnist[:10],
            "text.csv": "Date,Open\nabc,def\n1,2\n",
            "nan.csv": "\n".join(["1.0", "nan", "2.0"] * 30) + "\n",
            "negative.csv": "\n".join(str(v) for v in range(-20, 40)) + "\n",
            "one-value.csv": "5\n",
            "columns.csv": "\n".join("1,2" if i % 7 else "3" for i in range(60)) + "\n",
            "truncated-cifar.bin": cifar[:3073 * 3 + 100],
            "bad-label-cifar.bin": bytes([99]) + cifar[1:3073],
            "empty.bin": b"",
            "random.bin": bytes(rng.randrange(256) for _ in range(5000)),
            "model-truncated.cnm": b"CONVNETM" + struct.pack("<II", 1, 40) + b"{",
            "model-garbage.cnm": b"CONVNETM" + bytes(rng.randrange(256) for _ in range(300)),
            "not-a-model.cnm": b"hello",
        }
        paths = []
        for name, content in files.items():
            p = data / name
            if isinstance(content, str):
                p.write_text(content)
            else:
                p.write_bytes(content)
            paths.append(p)
        paths += Corpus._models(data)
        folder = data / "a-folder"
        folder.mkdir(exist_ok=True)
        paths += [folder, Path("/dev/null"), data / "does-not-exist.gz"]
        return paths


    @staticmethod
    def _models(data):
        """A good model file for the manual's net (12 x 12 images, 6 classes) and a damaged copy."""
        import numpy as np
        from convnet.architecture import Architecture
        from convnet.modelfile import encode_model
        arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 6 1 1 1 1 1 1", "POOLED MAX LAYER 3 3 2 2",
                                        "FULLY CONNECTED LAYER 4"], rows=12, cols=12, bands=1,
                                       n_classes=6)
        weights = np.random.default_rng(0).uniform(-0.1, 0.1, arch.n_weights)
        good = encode_model(arch, weights)
        (data / "model-good.cnm").write_bytes(good)
        damaged = bytearray(good)
        damaged[len(good) // 2] ^= 0xFF
        (data / "model-damaged.cnm").write_bytes(bytes(damaged))
        return [data / "model-good.cnm", data / "model-damaged.cnm"]


# ---------------------------------------------------------------------------------- mutations
def _random_command(rng, corpus):
    """A registry command or parameter line with random arguments."""
    if rng.random() < 0.3:
        p = rng.choice(PARAMETERS)
        value = rng.choice(p.arg.choices) if p.arg.choices else rng.choice(EDGE_NUMBERS)
        return f"{p.name} = {value}"
    spec = rng.choice(COMMANDS)
    words = [spec.phrase]
    for arg in spec.args:
        if arg.value_type == "file":
            words.append(f'"{rng.choice(corpus.files)}"')
        else:
            words.append(rng.choice(EDGE_NUMBERS[:14]))
    return " ".join(words)


def _mutate_line(rng, line, corpus):
    tokens = line.split(" ")
    choice = rng.randrange(8)
    if choice == 0:                          # a number becomes an edge value
        spots = [i for i, t in enumerate(tokens) if re.fullmatch(r"[-+0-9.e]+", t)]
        if spots:
            tokens[rng.choice(spots)] = rng.choice(EDGE_NUMBERS)
    elif choice == 1:                        # a file name becomes a bad or other data file
        if '"' in line:
            return re.sub(r'"[^"]*"', lambda m: f'"{rng.choice(corpus.files)}"', line, count=1)
    elif choice == 2:                        # a keyword misspelled or cased oddly
        i = rng.randrange(len(tokens))
        word = tokens[i]
        if word:
            k = rng.randrange(len(word))
            word = word[:k] + rng.choice("AEIOUXQZ_ ") + word[k + 1:]
            tokens[i] = word.lower() if rng.random() < 0.3 else word
    elif choice == 3:                        # a snippet inserted
        k = rng.randrange(len(line) + 1)
        return line[:k] + rng.choice(SNIPPETS) + line[k:]
    elif choice == 4:                        # cut short
        return line[:rng.randrange(len(line) + 1)]
    elif choice == 5:                        # a token dropped or repeated
        i = rng.randrange(len(tokens))
        if rng.random() < 0.5:
            del tokens[i]
        else:
            tokens.insert(i, tokens[i])
    elif choice == 6:                        # a long run
        k = rng.randrange(len(line) + 1)
        return line[:k] + rng.choice(["9", "A", " ", "x"]) * rng.choice([100, 5000, 200_000]) + line[k:]
    else:                                    # a NUL byte inside a quoted name
        return line.replace('"', '"\0', 1) if '"' in line else line + "\0"
    return " ".join(tokens)


def mutate(rng, corpus):
    """A mutated example control file: (base name, text)."""
    name, text = rng.choice(corpus.bases)
    lines = text.splitlines()
    for _ in range(rng.choice([1, 1, 2, 3, 5])):
        kind = rng.randrange(6)
        if kind == 0 and lines:
            del lines[rng.randrange(len(lines))]
        elif kind == 1 and lines:
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
        elif kind == 2 and len(lines) > 1:
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == 3:
            lines.insert(rng.randrange(len(lines) + 1), _random_command(rng, corpus))
        elif lines:
            i = rng.randrange(len(lines))
            lines[i] = _mutate_line(rng, lines[i], corpus)
    return name, "\n".join(lines) + ("\n" if rng.random() < 0.9 else "")


# ---------------------------------------------------------------------------------- one case
def _alarm(signum, frame):
    raise Hang()


_TRAINING_LENGTH = re.compile(r"^\s*(ANNEAL\s+ITERS|MAX\s*ITERS)\s*=.*$", re.I | re.M)
_OUTPUT_NAME = re.compile(r'^(\s*(?:SAVE\s+MODEL|DISPLAY\s+\w+\s+IMAGES)\b[^"]*)"([^"]*)"', re.I | re.M)


def tiny_run_text(text):
    """``text`` made cheap and harmless to run: training cut to a few evaluations, and every output
    file name reduced to its last part so that it lands in the run's --out folder."""
    text = _TRAINING_LENGTH.sub("", text)
    text = _OUTPUT_NAME.sub(lambda m: f'{m.group(1)}"{os.path.basename(m.group(2)) or "x"}"', text)
    return "ANNEAL ITERS = 2\nMAXITERS = 2\n" + text


def check_case(text, workdir, timeout=10.0, run=False):
    """Run `convnet check` (or with ``run``, `convnet run` of tiny_run_text) on ``text``; returns
    (outcome, detail) with outcome one of "ok", "clean", "traceback", "unclean", "hang"."""
    path = Path(workdir) / "case.ctl"
    if run:
        text = tiny_run_text(text)
        out = Path(workdir) / "out"
        shutil.rmtree(out, ignore_errors=True)
        args = ["run", str(path), "--out", str(out), "--quiet", "--seed", "1", "--threads", "1",
                "--device", "cpu"]
    else:
        args = ["check", str(path)]
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        result = CliRunner().invoke(cli_main, args)
    except Hang:
        return "hang", f"more than {timeout} s"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if result.exit_code == 0 and result.exception is None:
        return "ok", ""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        detail = "".join(traceback.format_exception(type(result.exception), result.exception,
                                                    result.exception.__traceback__))
        return "traceback", detail
    errors = [line for line in result.output.splitlines() if line.startswith("convnet: ")
              and not line.endswith(": OK")]
    if result.exit_code == 2 and len(errors) == 1 and errors[0].startswith("convnet: error: ") \
            and len(errors[0]) < 400:
        return "clean", errors[0]
    return "unclean", f"exit status {result.exit_code}: {result.output[-2000:]}"


class MemoryCap:
    """Cap the host memory `check` may plan for (restored on exit)."""

    def __init__(self, mib):
        self.cap = int(mib) << 20

    def __enter__(self):
        self.real = memory.host_available
        cap, real = self.cap, self.real
        memory.host_available = lambda: min(cap, real() or cap)
        return self

    def __exit__(self, *exc):
        memory.host_available = self.real


# ---------------------------------------------------------------------------------- the script
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per case")
    ap.add_argument("--memory-mib", type=int, default=256)
    ap.add_argument("--show", type=int, default=3, help="failing cases shown per kind")
    ap.add_argument("--runs", type=int, default=0,
                    help="also `convnet run` this many of the cases that check (training cut to "
                         "two annealing evaluations and two iterations), counted separately")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    counts = {"ok": 0, "clean": 0, "traceback": 0, "unclean": 0, "hang": 0}
    run_counts = dict.fromkeys(counts, 0)
    shown = {"traceback": [], "unclean": [], "hang": []}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="convnet-fuzz-") as workdir, MemoryCap(args.memory_mib):
        corpus = Corpus(workdir)
        for k in range(args.cases):
            base, text = mutate(rng, corpus)
            outcome, detail = check_case(text, workdir, args.timeout)
            counts[outcome] += 1
            if outcome in shown and len(shown[outcome]) < args.show:
                shown[outcome].append((k, base, text, detail))
            if outcome == "ok" and sum(run_counts.values()) < args.runs:
                outcome, detail = check_case(text, workdir, 6 * args.timeout, run=True)
                run_counts[outcome] += 1
                if outcome in shown and len(shown[outcome]) < args.show:
                    shown[outcome].append((k, base + ", run", tiny_run_text(text), detail))
            if (k + 1) % 1000 == 0:
                print(f"  {k + 1} cases, {time.monotonic() - started:.0f} s: {counts}", flush=True)
    for outcome, cases in shown.items():
        for k, base, text, detail in cases:
            print(f"\n--- case {k} ({outcome}, from {base}) ---\n{text[:3000]!r}\n{detail[-3000:]}")
    print(f"\nseed {args.seed}: {args.cases} inputs, {counts['ok']} exit 0, {counts['clean']} clean "
          f"errors, {counts['traceback']} tracebacks, {counts['unclean']} unclean, "
          f"{counts['hang']} hangs ({time.monotonic() - started:.0f} s)")
    if args.runs:
        print(f"runs: {sum(run_counts.values())} inputs, {run_counts['ok']} exit 0, "
              f"{run_counts['clean']} clean errors, {run_counts['traceback']} tracebacks, "
              f"{run_counts['unclean']} unclean, {run_counts['hang']} hangs")
    bad = ("traceback", "unclean", "hang")
    return 1 if any(counts[b] or run_counts[b] for b in bad) else 0


if __name__ == "__main__":
    sys.exit(main())
