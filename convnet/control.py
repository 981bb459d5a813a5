"""The control-file language: lines -> typed commands that carry their file and line.

One registry (``COMMANDS`` and ``PARAMETERS``) holds every keyword and its arguments, so parsing,
``convnet check``, the suggestions in error messages and the keyword list in the docs all come from
the same table. The registry's parts, the words of a line and the arguments' types, are in
``control_args.py``.

Syntax: one command per line, keywords case-insensitive, extra blanks ignored, ``//`` starts a
comment, blank lines ignored, file names in double quotes, ``NAME = value`` with or without blanks.
"""

import difflib
import glob
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .architecture import KINDS, LayerSpec
from .control_args import Arg, Token, file_arg, int_arg, tokenize  # noqa: F401 (re-exported)
from .errors import MAX_DIGITS, SHOWN_CHARS, ConvnetError, shown  # noqa: F401 (re-exported)
from .params import (ALL_DEVICES, DEFAULTS, MAX_CLASSES, MAX_COUNT, MAX_GRID,  # noqa: F401
                     MAX_SIDE, PARAMETER_DEFS, parse_devices)


@dataclass
class Command:
    """One parsed control line.

    name: the canonical keyword phrase (``"TRAIN"``, ``"READ MNIST IMAGE"``, ``"LAYER"``, ``"SET"``,
    ``"SERIES MODE"`` ...); args: a dict of typed arguments; text: the line as written.
    """

    name: str
    args: Dict[str, Any] = field(default_factory=dict)
    file: Optional[str] = None
    line: Optional[int] = None
    text: str = ""

    def error(self, message):
        return ConvnetError(message, self.file, self.line)


# Suggestions compare at most this many words of this many characters each, so a huge line costs
# no more than a short one.
SUGGEST_WORDS, SUGGEST_CHARS = 6, 40
# Longest control file read (far beyond any real one).
MAX_CONTROL_CHARS = 16 << 20


# ---------------------------------------------------------------------------------- the registry
@dataclass
class CommandSpec:
    """A command keyword phrase, its arguments, and a one-line description for the docs."""

    phrase: str
    args: Tuple[Arg, ...]
    help: str
    name: Optional[str] = None        # canonical command name (default: the phrase)
    fixed: Dict[str, Any] = field(default_factory=dict)   # arguments implied by the phrase
    flag_before_last: Optional[str] = None                 # optional keyword before the last argument

    @property
    def words(self):
        return tuple(self.phrase.split())

    @property
    def command_name(self):
        return self.name or self.phrase

    def usage(self):
        parts = [self.phrase] + [a.describe() for a in self.args]
        if self.flag_before_last:
            parts.insert(len(parts) - 1, f"[{self.flag_before_last}]")
        return " ".join(parts)


@dataclass
class ParamSpec:
    """A ``NAME = value`` parameter and its default: the one table the parser, the keyword
    reference, training and the device read (:data:`DEFAULT_PARAMETERS`)."""

    name: str                 # canonical name
    arg: Arg
    meaning: str
    default: Any = None       # None: decided at run time (see default_note) or no default
    default_note: str = ""    # what a None default means, for the reference
    aliases: Tuple[str, ...] = ()

    @property
    def help(self):
        if self.default is not None:
            return f"{self.meaning} (default {_show_default(self.default)})"
        if self.default_note:
            return f"{self.meaning} (default: {self.default_note})"
        return self.meaning


def _show_default(value):
    if isinstance(value, float):
        return f"{value:.10f}".rstrip("0").rstrip(".")
    return str(value)


# DISPLAY ... First Rows Columns: the first picture and the grid's shape
_DISPLAY_GRID = (int_arg("First", 1, MAX_COUNT), int_arg("Rows", 1, MAX_GRID),
                 int_arg("Columns", 1, MAX_GRID))

COMMANDS: List[CommandSpec] = [
    # data (book p.151-155)
    CommandSpec("MAKE IMAGE", (int_arg("Rows", 1, MAX_SIDE), int_arg("Columns", 1, MAX_SIDE),
                               int_arg("Bands", 1, MAX_SIDE), int_arg("Classes", 2, MAX_CLASSES),
                               int_arg("Cases", 1, MAX_COUNT)),
                "random-tone test images, classes assigned at random"),
    CommandSpec("READ MNIST IMAGE", (file_arg(),), "an MNIST (IDX) image file, plain or gzip"),
    CommandSpec("READ MNIST LABELS", (file_arg(),), "the MNIST (IDX) label file for the images just read"),
    CommandSpec("READ C10 IMAGE", (file_arg(),), "a CIFAR-10 binary batch; repeat to concatenate"),
    CommandSpec("READ SERIES", (file_arg(),), "a time series turned into images by a moving window"),
    CommandSpec("READ IMAGES", (file_arg("Folder"),),
                "PNG, JPEG, BMP or GIF images, one subfolder per class named after it"),
    CommandSpec("CLEAR", (), "erase the data, keep the trained model"),
    CommandSpec("KEEP CASES", (int_arg("First", 1, MAX_COUNT), int_arg("Last", 1, MAX_COUNT)),
                "keep cases First..Last (1-based, inclusive) of the current data"),
    CommandSpec("VALIDATION CASES", (int_arg("First", 1, MAX_COUNT), int_arg("Last", 1, MAX_COUNT)),
                "hold out cases First..Last (1-based, inclusive) of the current data: TRAIN does "
                "not train on them and checks the model on them (VALIDATION INTERVAL); new data, "
                "CLEAR or KEEP CASES ends the hold-out"),
    # series settings that are keywords rather than NAME = value
    CommandSpec("SERIES RAWDATA", (), "use the values as read (default)", "SERIES TRANSFORM",
                {"transform": "RAWDATA"}),
    CommandSpec("SERIES RAWLOG", (), "use the log of the values", "SERIES TRANSFORM",
                {"transform": "RAWLOG"}),
    CommandSpec("SERIES DIFFDATA", (), "use differences of the values", "SERIES TRANSFORM",
                {"transform": "DIFFDATA"}),
    CommandSpec("SERIES DIFFLOG", (), "use differences of the logs", "SERIES TRANSFORM",
                {"transform": "DIFFLOG"}),
    CommandSpec("SERIES TARGET NO DIFF", (), "the target is the next value (default)",
                "SERIES TARGET", {"target_diff": False}),
    CommandSpec("SERIES TARGET DIFF", (), "the target is the next value minus the window's last",
                "SERIES TARGET", {"target_diff": True}),
    CommandSpec("SERIES CLASS ZERO", (), "2 classes split at zero (default)", "SERIES CLASS",
                {"class_mode": "ZERO"}),
    CommandSpec("SERIES CLASS MEDIAN", (), "2 classes split at the training median", "SERIES CLASS",
                {"class_mode": "MEDIAN"}),
    CommandSpec("SERIES CLASS THIRDS", (), "3 classes split at the training terciles", "SERIES CLASS",
                {"class_mode": "THIRDS"}),
    CommandSpec("SERIES NO HEADER", (), "the series file has no header line (default)",
                "SERIES HEADER", {"header": False}),
    CommandSpec("SERIES HEADER", (), "skip the first line of the series file", "SERIES HEADER",
                {"header": True}),
    # architecture (book p.155)
    *(CommandSpec(k.keyword, tuple(int_arg(name, low, high) for name, low, high in k.arg_names),
                  k.summary, "LAYER", {"kind": k}) for k in KINDS),
    # operations (book p.158-159) and ours
    CommandSpec("TRAIN", (), "anneal, refine by conjugate gradients, report the confusion matrix"),
    CommandSpec("TEST", (), "criterion and confusion matrix of the trained model on the current data"),
    CommandSpec("PRINT WEIGHTS", (), "write every weight of the model to CONVNET.LOG"),
    CommandSpec("SAVE MODEL", (file_arg(),), "save the trained model"),
    CommandSpec("LOAD MODEL", (file_arg(),), "load a saved model"),
    CommandSpec("CLASSIFY", (file_arg("Images"), file_arg("Predictions.csv")),
                "the model's class and class probabilities for every image of a folder or file "
                "pattern (* ? [), one CSV row per image"),
    CommandSpec("EXPORT ONNX", (file_arg(),),
                "write the current model as an ONNX model giving the class probabilities"),
    CommandSpec("DISPLAY TRAINING IMAGES",
                (*_DISPLAY_GRID, file_arg("File.png")),
                "a grid of training images as a PNG"),
    CommandSpec("DISPLAY FILTER IMAGES",
                (*_DISPLAY_GRID, file_arg("File.png")),
                "the first layer's convolution filters as a PNG", flag_before_last="INDIVIDUAL"),
    CommandSpec("DISPLAY ACTIVATION IMAGES",
                (*_DISPLAY_GRID, int_arg("Case", 1, MAX_COUNT),
                 file_arg("File.png")),
                "the first hidden layer's activations for one case as a PNG"),
    # sweeps (convnet batch runs every combination; see convnet/sweep.py)
    CommandSpec("SWEEP SEEDS", (Arg("= n", "sweep"),),
                "runs per combination of the swept values, with seeds 1..n (--seed s: s..s+n-1)"),
    CommandSpec("SWEEP", (Arg("NAME = value, value, ...", "sweep"),),
                "try each value: a parameter's NAME sets that parameter, any other NAME is a "
                "placeholder that $NAME in later lines takes"),
]

# SWEEP SEEDS = n: at most this many seeds per combination
MAX_SWEEP_SEEDS = 10_000

def _param_arg(definition):
    """The argument of a ``NAME = value`` line, from its definition in params.py."""
    if definition.value_type == "choice":
        return Arg(definition.phrase, "choice", choices=definition.choices,
                   joined=any(" " in choice for choice in definition.choices))
    if definition.value_type == "devices":
        return Arg(definition.phrase, "devices", joined=True)
    return Arg(definition.phrase, definition.value_type, definition.minimum, definition.maximum,
               exclusive_min=definition.exclusive_min, exclusive_max=definition.exclusive_max)


# The NAME = value entries, made from the one table of parameters (params.PARAMETER_DEFS).
PARAMETERS: List[ParamSpec] = [
    ParamSpec(definition.phrase, _param_arg(definition), definition.meaning, definition.default,
              definition.default_note, definition.aliases)
    for definition in PARAMETER_DEFS
]

# Every parameter's value before a control file sets it (None: decided at run time).
DEFAULT_PARAMETERS = DEFAULTS

_PARAM_BY_NAME: Dict[Tuple[str, ...], ParamSpec] = {}
for _p in PARAMETERS:
    for _n in (_p.name,) + _p.aliases:
        _PARAM_BY_NAME[tuple(_n.split())] = _p
# Longest phrases first so "SERIES TARGET NO DIFF" wins over "SERIES TARGET DIFF" style prefixes.
_COMMANDS_BY_LENGTH = sorted(COMMANDS, key=lambda c: -len(c.words))


def all_keywords():
    """Every command phrase and parameter name, for suggestions and docs."""
    return [c.phrase for c in COMMANDS] + [f"{p.name} =" for p in PARAMETERS] + \
        [f"{a} =" for p in PARAMETERS for a in p.aliases]


# ---------------------------------------------------------------------------------- the parser
def _suggest(words):
    """The registry phrase closest to what was written, or None."""
    words = [w[:SUGGEST_CHARS] for w in words[:SUGGEST_WORDS]]
    written = " ".join(words).upper()
    phrases = [c.phrase for c in COMMANDS] + [p.name for p in PARAMETERS]
    phrases += [a for p in PARAMETERS for a in p.aliases]
    best = difflib.get_close_matches(written, phrases, n=1, cutoff=0.5)
    if not best:
        # compare with the same number of leading words as each phrase has
        scored = []
        for phrase in phrases:
            leading = " ".join(words[:len(phrase.split())]).upper()
            scored.append((difflib.SequenceMatcher(None, leading, phrase).ratio(), phrase))
        ratio, phrase = max(scored)
        if ratio >= 0.6:
            best = [phrase]
    return best[0] if best else None


def parse_line(text, file=None, line=None):
    """Parse one control line. Returns a Command, or None for a blank or comment line."""
    stripped = text.strip()
    if not stripped or stripped.startswith("//"):
        return None

    def err(msg):
        return ConvnetError(msg, file, line)

    try:
        tokens = tokenize(stripped)
    except ValueError as e:
        raise err(str(e)) from None
    if not tokens:
        return None
    if not tokens[0].quoted and tokens[0].text.upper() == "SWEEP":
        return _parse_sweep(tokens[1:], file, line, stripped)

    # NAME = value
    if any(t.text == "=" and not t.quoted for t in tokens):
        eq = next(i for i, t in enumerate(tokens) if t.text == "=" and not t.quoted)
        name_words = tuple(t.text.upper() for t in tokens[:eq])
        spec = _PARAM_BY_NAME.get(name_words)
        if spec is None:
            hint = _suggest([t.text for t in tokens[:eq]][:SUGGEST_WORDS])
            msg = f"unknown parameter '{shown(' '.join(t.text for t in tokens[:eq]))}'"
            raise err(msg + (f" (did you mean {hint}?)" if hint else ""))
        values = tokens[eq + 1:]
        if spec.arg.joined and len(values) > 1 and not any(t.quoted for t in values):
            values = [Token(" ".join(t.text for t in values))]
        if len(values) != 1:
            raise err(f"{spec.name} needs exactly one value: {spec.name} = {spec.arg.describe()}")
        try:
            value = spec.arg.convert(values[0], spec.name)
        except ValueError as e:
            raise err(str(e)) from None
        return Command("SET", {"name": spec.name, "value": value}, file, line, stripped)

    upper = [t.text.upper() if not t.quoted else None for t in tokens]
    for spec in _COMMANDS_BY_LENGTH:
        length = len(spec.words)
        if tuple(upper[:length]) == spec.words:
            return _parse_args(spec, tokens[length:], file, line, stripped)
    hint = _suggest([t.text for t in tokens if not t.quoted][:SUGGEST_WORDS])
    msg = f"unknown command '{shown(stripped)}'"
    raise err(msg + (f" (did you mean {hint}?)" if hint else ""))


def swept_parameter(text):
    """The canonical parameter a ``NAME = value`` line sets (None for any other line)."""
    try:
        tokens = tokenize(text.strip())
    except ValueError:
        return None
    words = [t.text.upper() for t in tokens]
    if "=" not in words or (tokens and tokens[0].text.upper() == "SWEEP"):
        return None
    spec = _PARAM_BY_NAME.get(tuple(words[:words.index("=")]))
    return spec.name if spec else None


def _parse_sweep(tokens, file, line, text):
    """``SWEEP NAME = v1, v2, ...`` (a parameter or a placeholder) or ``SWEEP SEEDS = n``."""
    def err(msg):
        return ConvnetError(msg, file, line)

    usage = "SWEEP NAME = value, value, ... or SWEEP SEEDS = n"
    eq = next((i for i, t in enumerate(tokens) if t.text == "=" and not t.quoted), None)
    if eq is None or eq == 0:
        raise err(f"SWEEP needs a name, '=' and values ({usage})")
    words = tuple(t.text.upper() for t in tokens[:eq])
    joined = " ".join(t.text for t in tokens[eq + 1:])
    values = [v.strip() for v in joined.split(",")]
    name = " ".join(words)
    if not joined.strip():
        raise err(f"SWEEP {shown(name)}: the list of values is empty")
    if "" in values:
        raise err(f"SWEEP {shown(name)}: an empty value between commas")
    if any(t.quoted for t in tokens[eq + 1:]):
        raise err(f"SWEEP {shown(name)}: values are written without double quotes")
    if words == ("SEEDS",):
        if len(values) != 1:
            raise err("SWEEP SEEDS takes one number: how many seeds each combination runs")
        try:
            count = int_arg("SEEDS", 1, MAX_SWEEP_SEEDS).convert(Token(values[0]), "SWEEP SEEDS")
        except ValueError as e:
            raise err(str(e)) from None
        return Command("SWEEP SEEDS", {"count": count}, file, line, text)
    spec = _PARAM_BY_NAME.get(words)
    if spec is not None:
        for value in values:
            try:
                spec.arg.convert(Token(value), f"SWEEP {spec.name}")
            except ValueError as e:
                raise err(str(e)) from None
        return Command("SWEEP", {"name": spec.name, "values": values, "parameter": True},
                       file, line, text)
    if len(words) != 1 or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", words[0]):
        hint = _suggest([t.text for t in tokens[:eq]][:SUGGEST_WORDS])
        raise err(f"SWEEP: '{shown(name)}' is neither a parameter nor a placeholder name "
                  "(one word of letters, digits and _)" + (f" (did you mean {hint}?)" if hint else ""))
    for value in values:
        if "$" in value or "//" in value:
            raise err(f"SWEEP {name}: a value cannot hold '$' or '//': '{shown(value)}'")
    return Command("SWEEP", {"name": words[0], "values": values, "parameter": False},
                   file, line, text)


def _parse_args(spec, tokens, file, line, text):
    def err(msg):
        return ConvnetError(msg, file, line)

    args = dict(spec.fixed)
    if spec.flag_before_last and len(tokens) == len(spec.args) + 1:
        flag = tokens[-2]
        if flag.quoted or flag.text.upper() != spec.flag_before_last:
            raise err(f"{spec.phrase}: expected {spec.flag_before_last} or the file name, "
                      f"not '{shown(flag.text)}' (usage: {spec.usage()})")
        args[spec.flag_before_last.lower()] = True
        tokens = tokens[:-2] + tokens[-1:]
    elif spec.flag_before_last:
        args[spec.flag_before_last.lower()] = False
    if len(tokens) != len(spec.args):
        if spec.args:
            got = "nothing" if not tokens else f"{len(tokens)}"
            raise err(f"{spec.phrase} takes {len(spec.args)} argument"
                      f"{'s' if len(spec.args) != 1 else ''}, got {got} (usage: {spec.usage()})")
        raise err(f"{spec.phrase} takes no arguments, got '{shown(' '.join(t.text for t in tokens))}'")
    for arg, tok in zip(spec.args, tokens):
        try:
            args[_arg_key(arg.name)] = arg.convert(tok, spec.phrase)
        except ValueError as e:
            raise err(str(e)) from None
    if spec.command_name == "LAYER":
        kind = args.pop("kind")
        numbers = [args[a.name.lower()] for a in spec.args]
        args = {"spec": LayerSpec.from_words(kind, numbers, file, line)}
    elif spec.phrase in ("KEEP CASES", "VALIDATION CASES") and args["last"] < args["first"]:
        raise err(f"{spec.phrase}: Last ({args['last']}) is before First ({args['first']})")
    return Command(spec.command_name, args, file, line, text)


def _arg_key(name):
    """The key of an argument in Command.args: its name in lower case, without a file suffix
    (``File.png`` -> ``file``); a folder is read like a file (``filename``)."""
    key = name.lower().split(".")[0]
    return "filename" if key == "folder" else key


def parse_layer_line(text, file=None, line=None):
    """Parse one layer line into a LayerSpec (raises ConvnetError for anything else)."""
    cmd = parse_line(text, file, line)
    if cmd is None or cmd.name != "LAYER":
        raise ConvnetError(f"not a layer line: '{text.strip()}'", file, line)
    return cmd.args["spec"]


# A folder that mirrors another machine's paths (a cluster worker's copy of the client's files,
# see cluster.py): an absolute input name found under it is read there.
INPUT_ROOT_ENV = "CONVNET_INPUT_ROOT"


def resolve_input(path, control_path):
    """Input file names resolve against the control file's own folder."""
    if os.path.isabs(path) or control_path is None:
        root = os.environ.get(INPUT_ROOT_ENV)
        if root and os.path.isabs(path):
            mirrored = os.path.join(root, path.lstrip(os.sep))
            if os.path.lexists(mirrored) or (any(c in path for c in "*?[")
                                             and glob.glob(mirrored)):   # CLASSIFY's patterns
                return mirrored
        return path
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(control_path)), path))


def read_control_lines(path, display_name=None):
    """The lines of a control file (a user error when it cannot be read)."""
    name = display_name or path
    try:
        # utf-8-sig: a byte-order mark (what Notepad writes) is not part of the first line
        with open(path, "r", encoding="utf-8-sig", errors="replace") as f:
            text = f.read(MAX_CONTROL_CHARS + 1)      # bounded: /dev/zero is a "file" too
        if len(text) > MAX_CONTROL_CHARS:
            raise ConvnetError(f"the control file is longer than {MAX_CONTROL_CHARS:,} characters",
                               name)
        return text.splitlines()
    except FileNotFoundError:
        raise ConvnetError("control file not found", name) from None
    except IsADirectoryError:
        raise ConvnetError("is a folder, not a control file", name) from None
    except OSError as e:
        raise ConvnetError(f"cannot read control file: {e.strerror}", name) from None


def parse_lines(lines, path, display_name=None):
    """Commands of a control file's lines; input names resolve against ``path``'s folder."""
    name = display_name or path
    commands = []
    for number, text in enumerate(lines, start=1):
        cmd = parse_line(text, name, number)
        if cmd is not None:
            if "filename" in cmd.args and cmd.name not in ("SAVE MODEL", "EXPORT ONNX"):
                cmd.args["path"] = resolve_input(cmd.args["filename"], path)
            elif "images" in cmd.args:              # CLASSIFY: a folder or a file pattern
                cmd.args["path"] = resolve_input(cmd.args["images"], path)
            commands.append(cmd)
    return commands


def parse_file(path, display_name=None):
    """Parse a whole control file; every syntax error is found before anything runs."""
    lines = read_control_lines(path, display_name)
    return parse_lines(lines, path, display_name), lines


def keyword_reference():
    """The control-language reference in Markdown, made from the registry (docs/control-language.md)."""
    out = ["# Control-file language", "",
           "Made from the keyword registry in `convnet/control.py` "
           "(`python -m convnet.control > docs/control-language.md`).", "",
           "One command per line; keywords are case-insensitive; `//` starts a comment; file names "
           "are in double quotes. Input files resolve against the control file's folder, output "
           "files (pictures, saved models) against `--out`.", "",
           "## Commands", "", "| line | meaning |", "|---|---|"]
    for spec in COMMANDS:
        out.append(f"| `{spec.usage()}` | {spec.help} |")
    out += ["", "## Parameters (`NAME = value`)", "", "| parameter | value | meaning |",
            "|---|---|---|"]
    for p in PARAMETERS:
        value = p.arg.placeholder().replace("|", "\\|")   # a bare | would end the table cell
        names = " or ".join(f"`{n} = {value}`" for n in (p.name,) + p.aliases)
        out.append(f"| {names} | {p.arg.value_words()} | {p.help} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(keyword_reference(), end="")
