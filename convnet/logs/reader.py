"""Reading CONVNET.LOG back: the one parser behind ``convnet log`` and ``convnet batch``.

A log is a sequence of *runs*, one for every TRAIN and every TEST it records, in order. A run holds
what the log says about it: the model's architecture report and total weights, the training
parameters and device, the annealing result, each refinement iteration's criterion, the final
criterion, the confusion matrix and misclassification, the elapsed time, and whether it was
interrupted or ended by an error.

The first line of a log names its format (``CONVNET.LOG format 1, convnet 0.1.0, <time>``); a log
without it, or of a format version this reader does not know, is refused with a ConvnetError.
Lines the reader does not know are skipped, so later additions to the log do not break it.
"""

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ..errors import ConvnetError
from .tables import compare_lines, pick_train, summary_lines  # noqa: F401 (re-exported)
from .writer import LOG_FORMAT_VERSION, VERSION_LINE_PREFIX

KNOWN_FORMATS = (LOG_FORMAT_VERSION,)

_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf|nan)"

_VERSION = re.compile(re.escape(VERSION_LINE_PREFIX) + r"\s+(\d+)\s*(?:,\s*convnet\s+([^,\s]+))?"
                      r"\s*(?:,\s*(\S+))?")
_SEED = re.compile(r"^Random seed = (\d+)")
_CONTROL_FILE = re.compile(r"^Control file (.+)$")
_INPUT = re.compile(r"^Input has (\d+) rows, (\d+) columns, and (\d+) bands")
_TOTAL_WEIGHTS = re.compile(r"^(\d+) Total weights for the entire model")
_OUTPUT_LAYER = re.compile(r"^Layer \d+ \(output\) is fully connected, with (\d+) slices")
_PARAMS = re.compile(r"^(?:Training parameters|Parameters in force):\s*(.*)$")
_PARAM = re.compile(r"([A-Z][A-Z ]*?)\s*=\s*(\S+?)(?:,|$)")
_DEVICE_HOST = re.compile(r"^Computing on the host(?: \((\d+|all cores) threads?\))?")
_DEVICE_CUDA = re.compile(r"^Computing on the CUDA device")
# a criterion: the book's 5 decimals, followed for tiny values by the exponent form in parentheses
_CRIT = _NUMBER + r"(?:\s*\(" + _NUMBER + r"\))?"
_ANNEAL_DONE = re.compile(r"^Simulated annealing for starting weights is complete with mean "
                          r"negative log likelihood = " + _CRIT)
_ANNEAL_VALUES = re.compile(r"^Annealing evaluations (\d+)-(\d+):\s*(.*)$")
_ANNEAL_STOPPED = re.compile(r"^Annealing ended by the user")
_ITERATION = re.compile(r"^Iteration (\d+) criterion = " + _NUMBER)
_REFINE_DONE = re.compile(r"^Refinement: (\d+) iterations.*ended because (.*)$")
_OPT_DONE = re.compile(r"^Optimization is complete with negative log likelihood = " + _CRIT)
_TEST_DONE = re.compile(r"^Test of (\d+) cases: mean negative log likelihood = " + _CRIT)
_ELAPSED = re.compile(r"^Elapsed time:\s*(.*)$")
_ELAPSED_PART = re.compile(r"([a-z][a-z ]*?)\s+" + _NUMBER + r"\s*s\b")
_RUN_ENDED = re.compile(r"^Run ended by the user")
_ESCAPE = re.compile(r"^WARNING\.\.\. User pressed ESCape")
_MISCLASS = re.compile(r"^Total misclassification = " + _NUMBER + r" percent")
_CONFUSION_HEAD = re.compile(r"^\t\d+(\t\d+)*\s*$")
_CONFUSION_COUNTS = re.compile(r"^(\d+)\t(\d+(?:\t\d+)*)\s*$")
_ERROR = re.compile(r"^ERROR: (.*)$")
_LAYER_FIELD = re.compile(r"^Layer (\d+) is (fully connected|locally connected|convolutional), "
                          r"with (\d+) slices, each (\d+) high and (\d+) wide")
_LAYER_POOL = re.compile(r"^Layer (\d+) is (\d+) by (\d+) pooling (max|average), with stride "
                         r"(\d+) by (\d+), (\d+) high, (\d+) wide, and (\d+) deep")
_LAYER_OUT = re.compile(r"^Layer (\d+) \(output\) is fully connected, with (\d+) slices")
_HALF = re.compile(r"^(Horz|Vert) half-width=(\d+), padding=(\d+), stride=(\d+)")
_GIVES = re.compile(r"gives (\d+) weights$")
_MODEL_LOADED = re.compile(r"^\s*Model loaded from (.+)$")


# The phases of the book's training method, whose lines the log has: name -> (title, unit, chart).
BOOK_PHASES = {"annealing": ("Simulated annealing", "evaluation", "scatter"),
               "refinement": ("Conjugate-gradient refinement", "iteration", "line")}


@dataclass
class LogPhase:
    """One phase of a TRAIN as a log (or results.json) records it: the fields of
    convnet.train's PhaseResult, those the log does not say left None."""

    name: str
    title: str = ""
    unit: str = "step"
    chart: str = "line"
    trace: List[Tuple[int, float]] = field(default_factory=list)     # (step, criterion)
    criterion: Optional[float] = None
    steps: Optional[int] = None
    limit: Optional[int] = None
    interrupted: Optional[bool] = None
    stop_reason: Optional[str] = None
    stop_words: Optional[str] = None
    seconds: Optional[float] = None
    evaluations: Dict[str, Optional[int]] = field(default_factory=dict)
    figures: Dict[str, list] = field(default_factory=dict)

    FIELDS = ("name", "title", "unit", "chart", "trace", "criterion", "steps", "limit",
              "interrupted", "stop_reason", "stop_words", "seconds", "evaluations", "figures")

    @property
    def last_step(self):
        """The steps taken: as recorded, else the last step of the trace (None when neither)."""
        if self.steps is not None:
            return self.steps
        return max(s for s, _ in self.trace) if self.trace else None


@dataclass
class Run:
    """One TRAIN or TEST as the log records it."""

    command: str                                # "TRAIN" or "TEST"
    index: int                                  # 1-based position among the log's runs
    control_file: Optional[str] = None
    rows: Optional[int] = None                  # the model's input image
    cols: Optional[int] = None
    bands: Optional[int] = None
    n_classes: Optional[int] = None
    weights: Optional[int] = None               # total weights of the model
    architecture: List[str] = field(default_factory=list)   # the report's lines
    layers: List[str] = field(default_factory=list)         # one short line per layer
    params: Dict[str, str] = field(default_factory=dict)    # training parameters as logged
    device: Optional[str] = None                # "cpu" or "cuda"
    threads: Optional[str] = None
    phases: List[LogPhase] = field(default_factory=list)  # a TRAIN's phases, in order
    final_criterion: Optional[float] = None     # TRAIN: after its phases; TEST: on the test set
    n_cases: Optional[int] = None
    confusion: List[List[int]] = field(default_factory=list)            # [true][predicted]
    misclassification: Optional[float] = None   # percent
    seconds: Optional[float] = None
    phase_seconds: Dict[str, float] = field(default_factory=dict)   # "annealing", ..., "total"
    interrupted: bool = False
    error: Optional[str] = None

    @property
    def complete(self):
        return self.misclassification is not None and self.error is None

    def phase(self, name):
        """The phase called ``name`` (None when there is none)."""
        return next((p for p in self.phases if p.name == name), None)

    def book_phase(self, name):
        """The book's phase ``name``, made when the log first speaks of it."""
        found = self.phase(name)
        if found is None:
            title, unit, chart = BOOK_PHASES[name]
            found = LogPhase(name, title, unit, chart)
            self.phases.append(found)
        return found


@dataclass
class LogFile:
    """A whole CONVNET.LOG."""

    path: str
    format_version: int
    convnet_version: Optional[str] = None
    timestamp: Optional[str] = None
    seed: Optional[int] = None
    control_files: List[str] = field(default_factory=list)
    runs: List[Run] = field(default_factory=list)
    error: Optional[str] = None                  # the error that ended the session, if any

    @property
    def trains(self):
        return [r for r in self.runs if r.command == "TRAIN"]

    @property
    def tests(self):
        return [r for r in self.runs if r.command == "TEST"]


def _float(text):
    return float(text)


def _crit(m, first=1):
    """A criterion from a _CRIT match: the exponent form when present (more digits), else the
    decimals."""
    exact = m.group(first + 1)
    return float(exact if exact is not None else m.group(first))


def compact_layers(report):
    """One short line per layer from an architecture report, e.g.
    ``1 convolutional 12x12x6, hw 1,1 pad 1,1 stride 1,1: 60 weights`` (sizes high x wide x deep,
    pairs vertical,horizontal)."""
    out = []
    geom = {}
    for line in report:
        line = line.strip()
        m = _LAYER_FIELD.match(line)
        if m:
            n, kind, d, h, w = m.groups()
            out.append([f"{n} {kind} {h}x{w}x{d}", None, None])
            continue
        m = _LAYER_POOL.match(line)
        if m:
            n, wv, wh, pooling, sv, sh, h, w, d = m.groups()
            out.append([f"{n} {pooling} pool {wv}x{wh} stride {sv},{sh} -> {h}x{w}x{d}", None, None])
            continue
        m = _LAYER_OUT.match(line)
        if m:
            out.append([f"{m.group(1)} output {m.group(2)} classes", None, None])
            continue
        m = _HALF.match(line)
        if m and out:
            geom[m.group(1)] = m.groups()[1:]
            if "Horz" in geom and "Vert" in geom:
                (hh, ph, sh), (hv, pv, sv) = geom["Horz"], geom["Vert"]
                out[-1][1] = f"hw {hv},{hh} pad {pv},{ph} stride {sv},{sh}"
                geom = {}
            continue
        m = _GIVES.search(line)
        if m and out:
            out[-1][2] = f"{m.group(1)} weights"
    lines = []
    for head, shape, weights in out:
        text = head + (f", {shape}" if shape else "") + (f": {weights}" if weights else "")
        lines.append(text)
    return lines


def _command_word(line):
    """'TRAIN' or 'TEST' when the line is that control command echoed, else None."""
    words = line.split()
    if len(words) == 1 and words[0].upper() in ("TRAIN", "TEST"):
        return words[0].upper()
    return None


class _Parser:
    def __init__(self, path):
        self.path = path
        self.log = None
        self.control_file = None
        self.run = None                 # the run lines are attributed to
        self.model = None               # architecture facts of the current model
        self.report = None              # an architecture report being read
        self.in_confusion = False

    # ---------------------------------------------------------------- helpers
    def fail(self, message, line=None):
        raise ConvnetError(message, self.path, line)

    def _start_report(self):
        self.report = {"architecture": [], "rows": None, "cols": None, "bands": None,
                       "n_classes": None, "weights": None}

    def _apply_model(self, run):
        if self.model is None:
            return
        run.architecture = list(self.model["architecture"])
        run.layers = compact_layers(run.architecture)
        run.rows, run.cols, run.bands = self.model["rows"], self.model["cols"], self.model["bands"]
        run.n_classes, run.weights = self.model["n_classes"], self.model["weights"]

    # ---------------------------------------------------------------- the lines
    def first_line(self, line):
        m = _VERSION.match(line)
        if not m:
            self.fail(f"not a CONVNET.LOG: the first line should begin '{VERSION_LINE_PREFIX}'", 1)
        version = int(m.group(1))
        if version not in KNOWN_FORMATS:
            known = ", ".join(str(v) for v in KNOWN_FORMATS)
            self.fail(f"CONVNET.LOG format {version} is not known to this convnet (it reads format "
                      f"{known}); use the convnet version that wrote it", 1)
        self.log = LogFile(self.path, version, m.group(2), m.group(3))

    def line(self, text, number):
        line = text.rstrip("\n").rstrip("\r")
        stripped = line.strip()
        # the architecture report (after TRAIN, or after LOAD MODEL)
        m = _INPUT.match(stripped)
        if m:
            self._start_report()
            self.report["rows"], self.report["cols"], self.report["bands"] = map(int, m.groups())
        if self.report is not None:
            self.report["architecture"].append(stripped)
            m = _OUTPUT_LAYER.match(stripped)
            if m:
                self.report["n_classes"] = int(m.group(1))
            m = _TOTAL_WEIGHTS.match(stripped)
            if m:
                self.report["weights"] = int(m.group(1))
                self.model = self.report
                self.report = None
                run = self.run
                if run is not None and run.command == "TRAIN" and run.weights is None:
                    self._apply_model(self.run)
            return
        if self.in_confusion:
            m = _CONFUSION_COUNTS.match(line)
            if m and self.run is not None:
                self.run.confusion.append([int(v) for v in m.group(2).split("\t")])
                return
            if line.startswith("\t") or not stripped:
                return
            self.in_confusion = False
        command = _command_word(stripped)
        if command is not None:
            self.run = Run(command, len(self.log.runs) + 1, control_file=self.control_file)
            if command == "TEST":
                self._apply_model(self.run)
            self.log.runs.append(self.run)
            return
        for pattern, handler in self.handlers:
            m = pattern.match(stripped) if pattern is not _CONFUSION_HEAD else pattern.match(line)
            if m:
                handler(self, m)
                return

    # ---------------------------------------------------------------- handlers
    def h_seed(self, m):
        self.log.seed = int(m.group(1))

    def h_control_file(self, m):
        self.control_file = m.group(1).strip()
        self.log.control_files.append(self.control_file)

    def h_params(self, m):
        if self.run is not None:
            self.run.params = {k.strip(): v for k, v in _PARAM.findall(m.group(1))}

    def h_host(self, m):
        if self.run is not None:
            self.run.device = "cpu"
            self.run.threads = m.group(1)

    def h_cuda(self, m):
        if self.run is not None:
            self.run.device = "cuda"

    def h_anneal(self, m):
        if self.run is not None:
            self.run.book_phase("annealing").criterion = _crit(m)

    def h_anneal_values(self, m):
        if self.run is None:
            return
        annealing = self.run.book_phase("annealing")
        first = int(m.group(1))
        values = m.group(3).split()
        for k, v in enumerate(values):
            try:
                annealing.trace.append((first + k, float(v)))
            except ValueError:
                pass
        annealing.steps = len(annealing.trace)

    def h_anneal_stopped(self, m):
        if self.run is not None:
            self.run.interrupted = True
            self.run.book_phase("annealing").interrupted = True

    def h_iteration(self, m):
        if self.run is None:
            return
        refinement = self.run.book_phase("refinement")
        annealing = self.run.phase("annealing")
        if not refinement.trace and annealing is not None and annealing.criterion is not None:
            # refinement starts from the annealing result: its iteration 0
            refinement.trace.append((0, annealing.criterion))
        refinement.trace.append((int(m.group(1)), _float(m.group(2))))
        refinement.criterion = refinement.trace[-1][1]

    def h_refine_done(self, m):
        if self.run is not None:
            refinement = self.run.book_phase("refinement")
            refinement.steps = int(m.group(1))
            refinement.stop_words = m.group(2).strip()

    def h_opt(self, m):
        if self.run is not None:
            self.run.final_criterion = _crit(m)

    def h_test(self, m):
        if self.run is not None:
            self.run.n_cases = int(m.group(1))
            self.run.final_criterion = _crit(m, 2)

    def h_elapsed(self, m):
        if self.run is None:
            return
        for name, value in _ELAPSED_PART.findall(m.group(1)):
            self.run.phase_seconds[name.strip()] = float(value)
        secs = self.run.phase_seconds
        for phase in self.run.phases:
            phase.seconds = secs.get(phase.name)
        self.run.seconds = secs.get("total", secs.get("test"))

    def h_run_ended(self, m):
        self.log.error = "run ended by the user (Ctrl-C)"
        if self.run is not None and not self.run.complete:
            self.run.error = self.log.error

    def h_escape(self, m):
        if self.run is not None:
            self.run.interrupted = True
            self.run.book_phase("refinement").interrupted = True

    def h_confusion(self, m):
        if self.run is not None:
            self.run.confusion = []
            self.in_confusion = True

    def h_misclass(self, m):
        if self.run is not None:
            self.run.misclassification = _float(m.group(1))
            if self.run.confusion:
                self.run.n_cases = sum(sum(r) for r in self.run.confusion)

    def h_error(self, m):
        self.log.error = m.group(1).strip()
        if self.run is not None and not self.run.complete:
            self.run.error = self.log.error

    def h_loaded(self, m):
        pass

    handlers = [
        (_SEED, h_seed),
        (_CONTROL_FILE, h_control_file),
        (_PARAMS, h_params),
        (_DEVICE_HOST, h_host),
        (_DEVICE_CUDA, h_cuda),
        (_ANNEAL_DONE, h_anneal),
        (_ANNEAL_VALUES, h_anneal_values),
        (_ANNEAL_STOPPED, h_anneal_stopped),
        (_ITERATION, h_iteration),
        (_REFINE_DONE, h_refine_done),
        (_OPT_DONE, h_opt),
        (_TEST_DONE, h_test),
        (_ELAPSED, h_elapsed),
        (_RUN_ENDED, h_run_ended),
        (_ESCAPE, h_escape),
        (_CONFUSION_HEAD, h_confusion),
        (_MISCLASS, h_misclass),
        (_ERROR, h_error),
        (_MODEL_LOADED, h_loaded),
    ]


def parse_log(text, path="CONVNET.LOG"):
    """Parse the text of a CONVNET.LOG (see the module docstring)."""
    lines = text.splitlines()
    if not lines:
        raise ConvnetError("the log is empty (not a CONVNET.LOG)", path)
    p = _Parser(path)
    p.first_line(lines[0])
    for number, line in enumerate(lines[1:], start=2):
        p.line(line, number)
    return p.log


def read_log(path):
    """Read and parse a CONVNET.LOG file."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise ConvnetError(f"cannot read the log: {e.strerror or e}", str(path)) from None
    return parse_log(text, str(path))
