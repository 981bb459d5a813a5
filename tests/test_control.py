"""The control-file language: every command and parameter, and every error path."""

import pytest

from convnet.architecture import CONV, FC, LOCAL, POOLAVG, POOLMAX
from convnet.control import (COMMANDS, DEFAULT_PARAMETERS, PARAMETERS, parse_file, parse_line,
                             tokenize)
from convnet.errors import ConvnetError


def parse(text):
    return parse_line(text, "t.ctl", 7)


COMMAND_CASES = [
    ("MAKE IMAGE 12 12 1 6 1024", "MAKE IMAGE",
     {"rows": 12, "columns": 12, "bands": 1, "classes": 6, "cases": 1024}),
    ('READ MNIST IMAGE "a b.gz"', "READ MNIST IMAGE", {"filename": "a b.gz"}),
    ('read mnist labels "l.gz"', "READ MNIST LABELS", {"filename": "l.gz"}),
    ('READ C10 IMAGE "d.bin"', "READ C10 IMAGE", {"filename": "d.bin"}),
    ('Read Series "s.csv"', "READ SERIES", {"filename": "s.csv"}),
    ('READ IMAGES "pictures"', "READ IMAGES", {"filename": "pictures"}),
    ('classify "new/*.png" "p.csv"', "CLASSIFY", {"images": "new/*.png", "predictions": "p.csv"}),
    ("CLEAR", "CLEAR", {}),
    ("KEEP CASES 1 2000", "KEEP CASES", {"first": 1, "last": 2000}),
    ("VALIDATION CASES 1801 2000", "VALIDATION CASES", {"first": 1801, "last": 2000}),
    ("SWEEP SEEDS = 3", "SWEEP SEEDS", {"count": 3}),
    ("SWEEP WPEN = 0, 0.1", "SWEEP", {"name": "WPEN", "values": ["0", "0.1"], "parameter": True}),
    ("SERIES RAWDATA", "SERIES TRANSFORM", {"transform": "RAWDATA"}),
    ("SERIES RAWLOG", "SERIES TRANSFORM", {"transform": "RAWLOG"}),
    ("SERIES DIFFDATA", "SERIES TRANSFORM", {"transform": "DIFFDATA"}),
    ("series difflog", "SERIES TRANSFORM", {"transform": "DIFFLOG"}),
    ("SERIES TARGET NO DIFF", "SERIES TARGET", {"target_diff": False}),
    ("SERIES TARGET DIFF", "SERIES TARGET", {"target_diff": True}),
    ("SERIES CLASS ZERO", "SERIES CLASS", {"class_mode": "ZERO"}),
    ("SERIES CLASS MEDIAN", "SERIES CLASS", {"class_mode": "MEDIAN"}),
    ("SERIES CLASS THIRDS", "SERIES CLASS", {"class_mode": "THIRDS"}),
    ("SERIES NO HEADER", "SERIES HEADER", {"header": False}),
    ("SERIES HEADER", "SERIES HEADER", {"header": True}),
    ("TRAIN", "TRAIN", {}),
    ("test", "TEST", {}),
    ("PRINT WEIGHTS", "PRINT WEIGHTS", {}),
    ('SAVE MODEL "m.cnm"', "SAVE MODEL", {"filename": "m.cnm"}),
    ('LOAD MODEL "m.cnm"', "LOAD MODEL", {"filename": "m.cnm"}),
    ('EXPORT ONNX "m.onnx"', "EXPORT ONNX", {"filename": "m.onnx"}),
    ('DISPLAY TRAINING IMAGES 1 2 3 "t.png"', "DISPLAY TRAINING IMAGES",
     {"first": 1, "rows": 2, "columns": 3, "file": "t.png"}),
    ('DISPLAY FILTER IMAGES 1 2 4 "f.png"', "DISPLAY FILTER IMAGES",
     {"first": 1, "rows": 2, "columns": 4, "file": "f.png", "individual": False}),
    ('DISPLAY FILTER IMAGES 1 2 4 individual "f.png"', "DISPLAY FILTER IMAGES",
     {"first": 1, "rows": 2, "columns": 4, "file": "f.png", "individual": True}),
    ('DISPLAY ACTIVATION IMAGES 2 2 4 9 "a.png"', "DISPLAY ACTIVATION IMAGES",
     {"first": 2, "rows": 2, "columns": 4, "case": 9, "file": "a.png"}),
]
LAYER_CASES = []


@pytest.mark.parametrize("text,name,args", COMMAND_CASES)
def test_every_command_parses(text, name, args):
    cmd = parse(text)
    assert cmd.name == name and cmd.args == args
    assert (cmd.file, cmd.line) == ("t.ctl", 7)


def _int_arguments():
    """(a line with every other whole number at its maximum and {} for this one, the argument)."""
    for spec in COMMANDS:
        ints = [a for a in spec.args if a.value_type == "int"]
        for arg in ints:
            words = [spec.phrase] + ["{}" if a is arg else str(a.maximum) if a.value_type == "int"
                                     else '"f.png"' for a in spec.args]
            yield pytest.param(" ".join(words), arg, id=f"{spec.phrase}-{arg.name}")
    for p in PARAMETERS:
        if p.arg.value_type == "int":
            yield pytest.param(f"{p.name} = {{}}", p.arg, id=p.name)


@pytest.mark.parametrize("template,arg", _int_arguments())
def test_every_whole_number_has_a_maximum_and_a_located_error_beyond_it(template, arg):
    """A size, count or stride out of all proportion is refused at its line by `check`, not an
    overflow in numpy or Numba during the run."""
    assert arg.maximum is not None and arg.maximum < 2**63
    assert parse(template.format(arg.maximum)) is not None
    for beyond in (arg.maximum + 1, 10**22):
        with pytest.raises(ConvnetError) as info:
            parse(template.format(beyond))
        assert str(info.value).startswith("t.ctl:7: ")
        assert f"must be at most {arg.maximum}, not {beyond}" in str(info.value)


@pytest.mark.parametrize("lines,message", [
    ("MAKE IMAGE 12 12 1 99999999999999999999999 1024\n",
     "1: MAKE IMAGE: Classes must be at most 1000, not 99999999999999999999999"),
    ("MAKE IMAGE 12 12 1 2 16\nPOOLED MAX LAYER 2 2 2 99999999999999999999999\nTRAIN\n",
     "2: POOLED MAX LAYER: strideH must be at most 65535, not 99999999999999999999999"),
])
def test_check_refuses_huge_numbers_with_one_line(tmp_path, lines, message):
    from click.testing import CliRunner
    from convnet.cli import main
    ctl = tmp_path / "huge.ctl"
    ctl.write_text(lines)
    result = CliRunner().invoke(main, ["check", str(ctl)])
    assert result.exit_code == 2 and result.exception is None or \
        isinstance(result.exception, SystemExit), result.output
    assert result.output.strip().splitlines()[-1] == f"convnet: error: {ctl}:{message}"


def test_every_registry_entry_is_exercised_here():
    written = {" ".join(t.split()).upper() for t, _, _ in COMMAND_CASES + LAYER_CASES}
    for spec in COMMANDS:
        assert any(w.startswith(spec.phrase) for w in written), spec.phrase
    assert set(DEFAULT_PARAMETERS) == {p.name for p in PARAMETERS}
    tested = {name for _, name, _ in PARAMETER_CASES}
    assert tested == {p.name for p in PARAMETERS}


LAYER_CASES += [
    ("FULLY CONNECTED LAYER 4", FC, {"slices": 4}),
    ("LOCAL LAYER 3 1 2 1 0 1 2", LOCAL,
     {"slices": 3, "hw_v": 1, "hw_h": 2, "pad_v": 1, "pad_h": 0, "stride_v": 1, "stride_h": 2}),
    ("CONVOLUTIONAL LAYER 6 1 1 1 1 1 1", CONV, {"slices": 6, "hw_v": 1, "pad_h": 1}),
    ("POOLED AVERAGE LAYER 3 2 2 1", POOLAVG, {"width_v": 3, "width_h": 2, "stride_v": 2, "stride_h": 1}),
    ("pooled   max layer 2 2 2 2", POOLMAX, {"width_v": 2, "stride_h": 2}),
]


@pytest.mark.parametrize("text,kind,fields", LAYER_CASES)
def test_layer_lines(text, kind, fields):
    spec = parse(text).args["spec"]
    assert spec.kind == kind
    for k, v in fields.items():
        assert getattr(spec, k) == v


PARAMETER_CASES = [
    ("MAX BATCH = 50", "MAX BATCH", 50),
    ("MAX HID GRAD = 1000", "MAX HID GRAD", 1000),
    ("MAX MEM GRAD = 512", "MAX MEM GRAD", 512),
    ("ANNEAL ITERS = 30", "ANNEAL ITERS", 30),
    ("ANNEAL RANGE = 0.5", "ANNEAL RANGE", 0.5),
    ("ANNEAL SCALE = fanin", "ANNEAL SCALE", "FANIN"),
    ("ANNEAL SCALE = FLAT", "ANNEAL SCALE", "FLAT"),
    ("TRAIN METHOD = anneal  cg", "TRAIN METHOD", "ANNEAL CG"),
    ("TRAIN METHOD = Adam", "TRAIN METHOD", "ADAM"),
    ("BATCH SIZE = 128", "BATCH SIZE", 128),
    ("EPOCHS = 12", "EPOCHS", 12),
    ("LEARNING RATE = 0.05", "LEARNING RATE", 0.05),
    ("LR SCHEDULE = one cycle", "LR SCHEDULE", "ONE CYCLE"),
    ("LR STEP EPOCHS = 3", "LR STEP EPOCHS", 3),
    ("LR STEP FACTOR = 0.5", "LR STEP FACTOR", 0.5),
    ("AVERAGE EPOCHS = 5", "AVERAGE EPOCHS", 5),
    ("AUGMENT SHIFT = 2", "AUGMENT SHIFT", 2),
    ("MOMENTUM = 0", "MOMENTUM", 0.0),
    ("NESTEROV = yes", "NESTEROV", "YES"),
    ("ADAM BETA1 = 0.8", "ADAM BETA1", 0.8),
    ("ADAM BETA2 = 0.99", "ADAM BETA2", 0.99),
    ("ADAM EPSILON = 1e-7", "ADAM EPSILON", 1e-7),
    ("MAXITERS = 200", "MAXITERS", 200),
    ("MAX ITERS = 200", "MAXITERS", 200),
    ("TOL = 1e-6", "TOL", 1e-6),
    ("WPEN=0.001", "WPEN", 0.001),
    ("wpen =0", "WPEN", 0.0),
    ("CUDA = yes", "CUDA", "YES"),
    ("CUDA = NO", "CUDA", "NO"),
    ("CUDA= AUTO", "CUDA", "AUTO"),
    ("CUDA DEVICES = 0,1", "CUDA DEVICES", "0,1"),
    ("VALIDATION INTERVAL = 5", "VALIDATION INTERVAL", 5),
    ("keep best = yes", "KEEP BEST", "YES"),
    ("EARLY STOP = 0", "EARLY STOP", 0),
    ("TARGET ERROR = 2.5", "TARGET ERROR", 2.5),
    ("cuda devices = 1, 0 ,2", "CUDA DEVICES", "1,0,2"),
    ("CUDA DEVICES = all", "CUDA DEVICES", "ALL"),
    ("CUDA PRECISION = tf32", "CUDA PRECISION", "TF32"),
    ("CUDA PRECISION = FLOAT32", "CUDA PRECISION", "FLOAT32"),
    ("THREADS = 2", "THREADS", 2),
    ("RANDOM SEED = 17", "RANDOM SEED", 17),
    ("SERIES COLUMN = 5", "SERIES COLUMN", 5),
    ("SERIES WINDOW = 20", "SERIES WINDOW", 20),
    ("SERIES RESOLUTION = 12", "SERIES RESOLUTION", 12),
    ("SERIES SHIFT = 3", "SERIES SHIFT", 3),
    ("SERIES FRAC FULL = 0", "SERIES FRAC FULL", 0.0),
    ("SERIES FRAC FULL = 1", "SERIES FRAC FULL", 1.0),
    ("IMAGE ROWS = 28", "IMAGE ROWS", 28),
    ("image columns=32", "IMAGE COLUMNS", 32),
]


@pytest.mark.parametrize("text,name,value", PARAMETER_CASES)
def test_every_parameter(text, name, value):
    cmd = parse(text)
    assert cmd.name == "SET" and cmd.args == {"name": name, "value": value}


@pytest.mark.parametrize("text,message", [
    ("TRIAN", "unknown command 'TRIAN' (did you mean TRAIN?)"),
    ("CONVOLUTION LAYER 6 1 1 1 1 1 1", "did you mean CONVOLUTIONAL LAYER?"),
    ("READ MINST IMAGE \"x\"", "did you mean READ MNIST IMAGE?"),
    ("WPNE = 0.1", "unknown parameter 'WPNE' (did you mean WPEN?)"),
    ("MAKE IMAGE 12 12 1 6", "MAKE IMAGE takes 5 arguments, got 4"),
    ("MAKE IMAGE 12 12 1 6 10 3", "takes 5 arguments, got 6"),
    ("MAKE IMAGE 12 x 1 6 10", "Columns must be a whole number, not 'x'"),
    ("MAKE IMAGE 12 12 1 1 10", "Classes must be at least 2"),
    ("TRAIN NOW", "TRAIN takes no arguments"),
    ("READ MNIST IMAGE file.gz", "must be in double quotes"),
    ('READ MNIST IMAGE "file.gz', "missing its closing double quote"),
    ('READ MNIST IMAGE ""', "file name is empty"),
    ("READ MNIST IMAGE", "takes 1 argument, got nothing"),
    ("CONVOLUTIONAL LAYER -2 1 1 1 1 1 1", "Slices must be at least 1, not -2"),
    ("CONVOLUTIONAL LAYER 0 1 1 1 1 1 1", "Slices must be at least 1, not 0"),
    ("LOCAL LAYER 2 1 1 1 1 0 1", "strideV must be at least 1, not 0"),
    ("LOCAL LAYER 2 1 1 2 1 1 1", "vertical padding 2 exceeds the vertical half-width 1"),
    ("CONVOLUTIONAL LAYER 2 1 2 1 3 1 1", "horizontal padding 3 exceeds the horizontal half-width 2"),
    ("CONVOLUTIONAL LAYER 2 -1 1 0 0 1 1", "hwV must be at least 0, not -1"),
    ("POOLED MAX LAYER 0 2 2 2", "widthV must be at least 1, not 0"),
    ("POOLED MAX LAYER 2 2 2", "takes 4 arguments"),
    ("FULLY CONNECTED LAYER 2.5", "Slices must be a whole number"),
    ("TOL = 0", "TOL must be greater than 0.0"),
    ("TOL = -1", "TOL must be greater than 0.0"),
    ("WPEN = -0.1", "WPEN must be at least 0.0"),
    ("ANNEAL RANGE = 0", "ANNEAL RANGE must be greater than 0.0"),
    ("SERIES FRAC FULL = 1.5", "SERIES FRAC FULL must be at most 1.0"),
    ("SERIES FRAC FULL = -0.2", "SERIES FRAC FULL must be at least 0.0"),
    ("IMAGE ROWS = 0", "IMAGE ROWS must be at least 1"),
    ("MAX HID GRAD = 70000", "at most 65535"),
    ("MAX MEM GRAD = 4000", "at most 2047"),
    ("MAX BATCH = 0", "MAX BATCH must be at least 1"),
    ("THREADS = 0", "THREADS must be at least 1"),
    ("CUDA = MAYBE", "CUDA must be YES or NO or AUTO, not 'MAYBE'"),
    ("CUDA PRECISION = BF16", "CUDA PRECISION must be FLOAT32 or TF32, not 'BF16'"),
    ("TOL = abc", "TOL must be a number, not 'abc'"),
    ("TOL = nan", "TOL must be a finite number"),
    ("TOL =", "TOL needs exactly one value"),
    ("TOL = 1 2", "TOL needs exactly one value"),
    ("KEEP CASES 10 5", "Last (5) is before First (10)"),
    ("VALIDATION CASES 10 5", "Last (5) is before First (10)"),
    ("TARGET ERROR = 100", "TARGET ERROR must be less than 100"),
    ("KEEP CASES 0 5", "First must be at least 1, not 0"),
    ("SERIES WINDOW = 1", "SERIES WINDOW must be at least 2"),
    ('DISPLAY FILTER IMAGES 1 2 4 ALL "f.png"', "expected INDIVIDUAL or the file name"),
    ('DISPLAY TRAINING IMAGES 1 2 3 t.png', "must be in double quotes"),
    ('MAXITERS = "10"', "MAXITERS must be a whole number, not a quoted name"),
])
def test_errors_name_file_line_and_problem(text, message):
    with pytest.raises(ConvnetError) as info:
        parse(text)
    assert str(info.value).startswith("t.ctl:7: ")
    assert message in str(info.value)


def test_comments_blank_lines_and_spacing():
    assert parse("") is None
    assert parse("   ") is None
    assert parse("// TRAIN") is None
    assert parse("   // a comment") is None
    cmd = parse("   make   IMAGE    4 4 1 2 10   ")
    assert cmd.name == "MAKE IMAGE" and cmd.args["cases"] == 10


def test_tokenizer_keeps_quoted_blanks_and_splits_equals():
    toks = tokenize('WPEN=0.5 "a = b"')
    assert [(t.text, t.quoted) for t in toks] == [("WPEN", False), ("=", False), ("0.5", False),
                                                  ("a = b", True)]


def test_parse_file_resolves_input_names_against_the_control_folder(tmp_path):
    sub = tmp_path / "exp"
    sub.mkdir()
    ctl = sub / "a.ctl"
    ctl.write_text('// comment\n\nREAD MNIST IMAGE "../data/x.gz"\nSAVE MODEL "m.cnm"\nTRAIN\n')
    commands, lines = parse_file(str(ctl))
    assert [c.line for c in commands] == [3, 4, 5]
    assert commands[0].args["path"] == str(tmp_path / "data" / "x.gz")
    assert "path" not in commands[1].args        # outputs resolve against --out, not here
    assert len(lines) == 5


def test_parse_file_errors(tmp_path):
    with pytest.raises(ConvnetError, match="control file not found"):
        parse_file(str(tmp_path / "missing.ctl"))
    with pytest.raises(ConvnetError, match="is a folder"):
        parse_file(str(tmp_path))
    bad = tmp_path / "bad.ctl"
    bad.write_text("MAKE IMAGE 4 4 1 2 10\n\nTRAIN X\n")
    with pytest.raises(ConvnetError) as info:
        parse_file(str(bad))
    assert str(info.value).startswith(f"{bad}:3: ")


def test_parse_file_accepts_a_utf8_byte_order_mark(tmp_path):
    ctl = tmp_path / "notepad.ctl"
    ctl.write_bytes("\ufeff// written by Notepad\r\nMAKE IMAGE 4 4 1 2 10\r\n".encode("utf-8"))
    commands, lines = parse_file(str(ctl))
    assert [c.name for c in commands] == ["MAKE IMAGE"]
    assert lines[0] == "// written by Notepad"
    ctl.write_bytes("\ufeffMAKE IMAGE 4 4 1 2 10\n".encode("utf-8"))   # a command on line 1
    assert [c.line for c in parse_file(str(ctl))[0]] == [1]


def test_docs_reference_is_made_from_the_registry():
    from pathlib import Path
    from convnet.control import keyword_reference
    doc = Path(__file__).resolve().parents[1] / "docs" / "control-language.md"
    assert doc.read_text() == keyword_reference(), "regenerate: python -m convnet.control > docs/control-language.md"
