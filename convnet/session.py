"""A session: executes control-file commands in order (data, parameters, layers, model, log).

Data, model and parameters carry over from command to command and from file to file. Every line is
echoed to CONVNET.LOG as it is reached, so the log shows exactly what ran up to any error or
interruption.

``check`` mode (``convnet check``) does everything except the expensive work: it parses, reads the
data (which validates every header and record), builds each architecture and reports it, and checks
that every command could run in its place (a TEST has a model whose shape matches the data, and so on).
"""

import os
import sys

import numpy as np

from ._version import __version__
from .architecture import Architecture
from .sweep import parse_control, values_text
from .errors import ConvnetError, Interrupted
from .logs.writer import LogWriter
from .runlock import RunLock
from .interrupt import Interrupt, signals
from .display import commands as display_commands
from .logs.record import MODEL, Artifact
from .params import DEFAULTS, FLOAT32, Params
from .session_data import DataCommands
from .session_images import ImageCommands, class_names_phrase
from . import memory

# The parameters that every TRAIN and TEST writes to CONVNET.LOG, in the book's dialog order.
LOGGED_PARAMETERS = ("MAX BATCH", "MAX HID GRAD", "MAX MEM GRAD", "ANNEAL ITERS", "ANNEAL RANGE",
                     "ANNEAL SCALE", "MAXITERS", "TOL", "WPEN")


class Session(DataCommands, ImageCommands):
    """Executes commands; holds the data, the layer list, the parameters and the model (the data
    commands: session_data.DataCommands; CLASSIFY, class names and a TEST's most wrong cases:
    session_images.ImageCommands)."""

    def __init__(self, out=".", device="auto", threads=None, seed=None, quiet=False,
                 check_only=False, echo=None, log_name="CONVNET.LOG", report=True,
                 gpus=None):
        self.out = out
        self.device_option = device              # the command line's --device
        self.gpus_option = gpus                  # the command line's --gpus (wins over CUDA DEVICES)
        self.threads_option = threads
        self.quiet = quiet
        self.check_only = check_only
        self.echo = echo                         # callable(line) for `convnet check` output
        # The parameters as control files set them, by phrase (the logs print phrases); everything
        # below the session receives them typed (settings(), params_in_force()).
        self.params = dict(DEFAULTS)
        if threads is not None:
            self.params["THREADS"] = threads
        self.seed = seed if seed is not None else int(np.random.SeedSequence().entropy % (2 ** 31))
        self.seed_given = seed is not None
        self.rng = np.random.default_rng(self.seed)
        self.series_settings = {}                # SERIES keyword settings (transform, target, ...)
        self.dataset = None
        self.layer_specs = []                    # the layer list being built
        self.layers_closed = False               # a TRAIN used the list; new layer lines start anew
        self.model = None                        # the last trained or loaded Model
        self.model_device = None                 # 'cpu' or 'cuda': where self.model computes
        self.model_arch = None                   # its architecture (also set in check mode)
        self.model_series = None                 # series scaling kept with the model
        self.model_class_names = None            # its class names (None: numbers only)
        self.results = []                        # TrainResult / TestResult objects in order
        self.interrupt = Interrupt()
        self.device_note_written = False
        self.precision_note_written = False      # CUDA PRECISION on the host, said once
        self.outcomes = []                       # (command, result) of every TRAIN and TEST
        self.pending_saves = {}                  # check mode: model files SAVE MODEL will write
        self.cuda_log = None                     # the session's CUDA.LOG, started by its first part
        self.cuda_uploads_before = 0             # weight copies before the current command
        self.outputs = []                        # files written under --out, in order
        self.log = LogWriter(None)
        self.lock = None
        if not check_only:
            if os.path.exists(out) and not os.path.isdir(out):
                raise ConvnetError(f"the output folder '{out}' is a file, not a folder")
            try:
                os.makedirs(out, exist_ok=True)
            except OSError as e:
                raise ConvnetError(f"cannot create the output folder '{out}': "
                                   f"{e.strerror or e}") from None
            self.lock = RunLock.acquire(out)
        try:
            if not check_only:
                self.log = LogWriter(os.path.join(out, log_name))
                self._wrote(self.log.path)
            self.record = self._make_record(report)
        except BaseException:
            self.close()
            raise

    def _make_record(self, report):
        """results.json (and, unless ``report`` is False, report.html) kept up to date as the
        session runs; a check records nothing."""
        from .devices import host_threads
        from .logs.record import SessionRecord
        info = {"seed": self.seed, "seed_given": self.seed_given, "device": self.device_option,
                "threads": self.threads_option, "host_threads": host_threads(),
                "out": os.path.abspath(self.out), "control_files": []}
        if self.check_only:
            return SessionRecord(None, info)
        live = None
        if report:
            from .report.live import LiveReport
            live = LiveReport(self.out)
        record = SessionRecord(self.out, info, live)
        self._wrote(record.path)
        if live is not None:
            self._wrote(live.path)
        return record

    # ------------------------------------------------------------------ running files
    def run(self, paths, sweep_run=None):
        """Parse every file first (a syntax error stops the run before any work), then execute
        (a sweep file: its combination ``sweep_run``). results.json ends with the session's
        status: done, interrupted or error."""
        try:
            self._run(paths, sweep_run)
        except ConvnetError as e:
            self.record.finish("error", e)
            raise
        except (Interrupted, KeyboardInterrupt) as e:
            self.record.finish("interrupted", e)
            raise
        except Exception as e:
            self.record.finish("error", e)
            raise
        self.record.finish("done")
        return self

    def _run(self, paths, sweep_run=None):
        parsed, swept = [], []
        for path in paths:
            commands, lines, sweep = parse_control(path, display_name=path, sweep_run=sweep_run)
            parsed.append((path, commands, lines))
            if sweep is not None:
                swept.append((path, sweep))
        self.log.write(f"Session: convnet {__version__}; control files: {' '.join(paths)}")
        for path, (sweep, values) in swept:
            self.log.write(f"Sweep run of {path}: {values_text(values)} (combination "
                           f"{sweep_run} of {sweep.combinations}), seed {self.seed}")
            self.record.sweep_run(path, sweep_run, sweep.combinations, values)
        self.log.write(f"Random seed = {self.seed}{'' if self.seed_given else ' (chosen at random)'}")
        self.record.start(paths)
        with signals(self.interrupt):
            for path, commands, lines in parsed:
                self.run_commands(path, commands, lines)
        return self

    def run_commands(self, path, commands, lines):
        self.log.write(f"Control file {path}")
        by_line = {c.line: c for c in commands}
        for number, text in enumerate(lines, start=1):
            if not text.strip():
                continue
            self.log.write(text.rstrip())
            cmd = by_line.get(number)
            if cmd is not None:
                try:
                    self.execute(cmd)
                except ConvnetError as e:
                    raise e.located(cmd.file, cmd.line)
                except Exception as e:
                    raise _as_user_error(e, cmd) from None

    def close(self):
        if self.log is not None:
            self.log.close()
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def _wrote(self, path):
        if path not in self.outputs:
            self.outputs.append(path)

    # ------------------------------------------------------------------ dispatch
    def execute(self, cmd):
        handler = self.HANDLERS.get(cmd.name)
        if handler is None:  # pragma: no cover - a registry command without a handler
            raise AssertionError(f"no handler for command {cmd.name}")
        return handler(self, cmd)

    def _series_flag(self, cmd):
        self.series_settings.update(cmd.args)

    def _layer(self, cmd):
        if self.layers_closed:
            self.layer_specs = []
            self.layers_closed = False
        self.layer_specs.append(cmd.args["spec"])

    def _set(self, cmd):
        name, value = cmd.args["name"], cmd.args["value"]
        self.params[name] = value
        if name == "RANDOM SEED":
            self.seed = value
            self.seed_given = True
            self.rng = np.random.default_rng(value)
        return None

    # ------------------------------------------------------------------ model
    def _need_model(self, cmd):
        if self.model_arch is None:
            raise cmd.error(f"{cmd.name} needs a model: TRAIN or LOAD MODEL first")

    def current_device(self):
        """The device the next TRAIN / TEST uses: the command line's --device, else CUDA =."""
        opt = (self.device_option or "auto").lower()
        if opt != "auto":
            return opt
        return {"YES": "cuda", "NO": "cpu", "AUTO": "auto"}[self.settings().cuda]

    def _resolve_device(self, cmd):
        """'cpu' or 'cuda'; AUTO falls back to the host path and says so in the log."""
        wanted = self.current_device()
        if wanted == "cpu":
            return "cpu"
        from .devices import cuda_status
        usable, reason = cuda_status()
        if wanted == "cuda":
            if not usable:
                raise cmd.error(f"CUDA was requested but is not usable: {reason}")
            return "cuda"
        if usable:
            return "cuda"
        if not self.device_note_written:
            self.log.write(f"   CUDA not usable ({reason}); using the host path")
            self.device_note_written = True
        return "cpu"

    # ------------------------------------------------------------------ typed parameters
    def settings(self):
        """The parameters as control files set them, typed (RANDOM SEED: None unless set)."""
        return Params.from_phrases(self.params)

    def params_in_force(self):
        """The parameters as the model, the device and CUDA.LOG see them: --gpus replaces CUDA
        DEVICES, and the seed is the session's (set or chosen at random)."""
        changes = {"RANDOM SEED": self.seed}
        if self.gpus_option is not None:
            changes["CUDA DEVICES"] = self.gpus_option
        return self.settings().replace(**changes)

    def _make_model(self, arch, device):
        from .model import Model
        params = self.params_in_force()
        if device == "cpu" and params.device.precision != FLOAT32 and not self.precision_note_written:
            self.log.write(f"   CUDA PRECISION = {params.device.precision} is for the GPU; the "
                           "host path computes in float64")
            self.precision_note_written = True
        return Model(arch, device=device, threads=params.threads, params=params.device)

    def _train(self, cmd):
        data = self._need_data(cmd)
        if not self.layer_specs:
            raise cmd.error("TRAIN needs at least one layer line before it")
        arch = Architecture(self.layer_specs, data.rows, data.cols, data.bands, data.n_classes)
        self.layers_closed = True
        self.log.write(arch.report())
        if self.echo:
            for line in arch.report():
                self.echo(line)
        self.model_arch = arch
        self.model_series = getattr(data, "series", None)
        self.model_class_names = data.class_names
        self._require_memory(arch, data, training=True)
        settings = self.settings()
        if settings.validation.needs_held_out_cases and data.held_out is None:
            raise cmd.error("KEEP BEST = YES and EARLY STOP need cases held out for validation: "
                            "VALIDATION CASES First Last before TRAIN")
        if self.check_only:
            return None
        device = self._resolve_device(cmd)
        self.model = self._make_model(arch, device)
        self.model_device = device
        self.cuda_uploads_before = 0
        self._log_parameters(device)
        from .train.trainer import train
        progress = self._progress()
        entry = self.record.begin("TRAIN", cmd, arch, settings.phrases(), device,
                                  self._used_threads(device), data.class_names)
        try:
            with self.interrupt.phase():
                result = train(self.model, data, settings.training, self.log, self.interrupt,
                               self.rng, progress=self.record.observer(entry, also=progress),
                               validation=settings.validation)
        finally:
            if progress is not None:
                progress.close()
        self.results.append(result)
        self.outcomes.append((cmd, result))
        from .display.figures import criterion_curve_later
        # asked for first, so that it is drawn beside the report's charts of this TRAIN
        curve = criterion_curve_later(result, os.path.join(self.out, "criterion.png"))
        self.record.end_train(entry, result)
        self._after_train(curve, device, cmd)
        return result

    def _host_threads(self):
        """THREADS, or every core when it is not set."""
        from .devices import host_threads
        return self.settings().threads or host_threads()

    def _used_threads(self, device):
        return None if device == "cuda" else self._host_threads()

    def _require_memory(self, arch, data, training):
        """Refuse a TRAIN or TEST whose model and work areas cannot fit in host (or device) memory."""
        device = self.settings().device
        memory.require_model(arch, data.n_cases, self._host_threads(), training,
                             self.current_device(), device.max_batch, device.cuda_devices)

    def _log_parameters(self, device, title="Training parameters"):
        """Every parameter in force (SPEC 2.4, the annealing scale and the seed), then the device
        and threads: written at each TRAIN and each TEST."""
        values = [(name, self.params.get(name)) for name in LOGGED_PARAMETERS]
        values.append(("RANDOM SEED", self.seed))
        shown = ", ".join(f"{name} = {'automatic' if value is None else value}"
                          for name, value in values)
        self.log.write(f"{title}: {shown}")
        if device == "cuda":
            from .device.multi import devices_phrase
            where = devices_phrase(self.params_in_force().device)
        else:
            where = f"host ({self._host_threads()} threads)"
        self.log.write(f"Computing on the {where}")

    def _progress(self):
        """A live progress line on a terminal, plain lines now and then without one, or None."""
        if self.quiet or self.check_only:
            return None
        from .display.progress import ProgressLine
        return ProgressLine(sys.stdout, plain=not sys.stdout.isatty())

    def _after_train(self, curve, device, cmd):
        """Pictures (``curve``: the criterion curve asked for) and the device log that follow a
        TRAIN."""
        self._record_made(Artifact(curve.write(), "criterion curve of TRAIN"), cmd)
        if device == "cpu":
            from .logs.timing import format_timing_table
            table = format_timing_table(self.model.backend.timings())
            if table:
                self.log.write(table)
        else:
            self._add_cuda_log(cmd)

    def _add_cuda_log(self, cmd):
        """Append this TRAIN's or TEST's part to the session's CUDA.LOG (the first part starts it)."""
        from .device.cuda_log import CudaLog
        if self.cuda_log is None:
            self.cuda_log = CudaLog(os.path.join(self.out, "CUDA.LOG"))
        heading = f"{cmd.name} ({cmd.file}, line {cmd.line}: {cmd.text})"
        self.cuda_log.add(heading, self.model.backend, self.model.arch, self.params_in_force(),
                          self.cuda_uploads_before)
        self._wrote(self.cuda_log.path)
        self.record.cuda_log(self.cuda_log.path, self.out)

    def _test(self, cmd):
        data = self._need_data(cmd)
        self._need_model(cmd)
        data.check_matches(self.model_arch.rows, self.model_arch.cols, self.model_arch.bands,
                           self.model_arch.n_classes)
        self._check_class_names(cmd, data)
        self._require_memory(self.model_arch, data, training=False)
        if self.check_only:
            return None
        device = self._resolve_device(cmd)
        if self.model_device != device:         # a trained model can be tested on either path
            weights = self.model.weights.copy()
            self.model = self._make_model(self.model_arch, device)
            self.model.weights = weights
            self.model_device = device
        self._log_parameters(device, "Parameters in force")
        if device == "cuda":                    # CUDA.LOG times this TEST alone
            self.model.backend.reset_timings()
            self.cuda_uploads_before = self.model.backend.weight_uploads
        from .train.trainer import test
        entry = self.record.begin("TEST", cmd, self.model_arch, self.settings().phrases(), device,
                                  self._used_threads(device),
                                  data.class_names or self.model_class_names)
        result = test(self.model, data, self.log)
        if device == "cuda":
            self._add_cuda_log(cmd)
        self.results.append(result)
        self.outcomes.append((cmd, result))
        self.record.end_test(entry, result, self._most_wrong(result, data, entry))
        return result

    def _print_weights(self, cmd):
        self._need_model(cmd)
        if self.check_only:
            return
        from .logs.weights import format_weights
        self.log.write(format_weights(self.model.arch, self.model.weights))

    def _output_path(self, name):
        return name if os.path.isabs(name) else os.path.join(self.out, name)

    def _save_model(self, cmd):
        self._need_model(cmd)
        if self.check_only:                     # a later LOAD MODEL of this file will find it
            where = os.path.abspath(self._output_path(cmd.args["filename"]))
            self.pending_saves[where] = (self.model_arch, self.model_series,
                                         self.model_class_names)
            return
        from .modelfile import save_model
        path = self._output_path(cmd.args["filename"])
        try:
            save_model(path, self.model, series_info=self.model_series,
                       class_names=self.model_class_names)
        except ConvnetError as e:        # it names the model file; the place is the control line
            raise cmd.error(f"{path}: {e.message}") from None
        self._wrote(path)
        self.log.write(f"   Model saved to {path}")
        self.record.artifact(Artifact(path, "saved", MODEL, self.model.arch), cmd, self.out)

    def _load_model(self, cmd):
        from .modelfile import read_model
        path, where = self._model_to_load(cmd)
        if self.check_only:
            for candidate in (cmd.args["path"], self._output_path(cmd.args["filename"])):
                pending = self.pending_saves.get(os.path.abspath(candidate))
                if pending is not None:         # saved earlier in this run: it will exist then
                    self.model_arch, self.model_series, self.model_class_names = pending
                    self.layers_closed = True
                    self.log.write(f"   Model to be loaded from {candidate} (saved earlier in this "
                                   "run)")
                    return
        try:
            size = os.path.getsize(path) if os.path.isfile(path) else 0
        except OSError:
            size = 0
        memory.require(2 * size, f"the model file '{path}' ({size:,} bytes, read and decoded)")
        try:
            loaded = read_model(path)
        except ConvnetError as e:               # it names the model file; the place is the control line
            model = e.file if e.file is not None else path
            raise cmd.error(f"model file '{model}': {e.message}") from None
        self.model_arch = loaded.arch
        self.model_series = loaded.series
        self.model_class_names = loaded.class_names
        self.layers_closed = True
        self.log.write(f"   Model loaded from {path} ({where})")
        self.log.write(loaded.arch.report())
        if loaded.class_names:
            self.log.write(f"   Classes: {class_names_phrase(loaded.class_names)}")
        if self.check_only:
            return
        self.model_device = self._resolve_device(cmd)
        self.model = self._make_model(loaded.arch, self.model_device)
        self.model.weights = loaded.weights
        self.record.artifact(Artifact(path, "loaded", MODEL, loaded.arch), cmd, self.out)

    def _export_onnx(self, cmd):
        self._need_model(cmd)
        from .export.onnx import export_onnx, require_onnx
        path = self._output_path(cmd.args["filename"])
        try:
            require_onnx()                      # a check says so too when the extra is missing
            if not self.check_only:
                export_onnx(path, self.model.arch, self.model.weights, self.model_class_names)
        except ConvnetError as e:               # one naming the file: it could not be written
            raise cmd.error(f"{path}: {e.message}" if e.file else e.message) from None
        if not self.check_only:
            self.log.write(f"   Model exported to ONNX: {path}")
            self._record_made(Artifact(path, "exported to ONNX", MODEL, self.model.arch), cmd)

    def _model_to_load(self, cmd):
        """Where LOAD MODEL finds its file and which place that is (modelfile.model_location)."""
        from .modelfile import model_location
        pending = self.check_only and any(
            os.path.abspath(p) in self.pending_saves
            for p in (cmd.args["path"], self._output_path(cmd.args["filename"])))
        try:
            return model_location(cmd.args["filename"], cmd.args["path"],
                                  self._output_path(cmd.args["filename"]), pending)
        except ConvnetError as e:
            raise cmd.error(e.message) from None

    # ------------------------------------------------------------------ pictures
    def _draw(self, cmd, draw, *args):
        """A DISPLAY command: ``draw`` writes its picture under --out (nothing under `convnet
        check`) and returns what it made, which is listed and recorded in results.json."""
        path = None if self.check_only else self._output_path(cmd.args["file"])
        self._record_made(draw(cmd, *args, path), cmd)

    def _record_made(self, made, cmd):
        """A file a command wrote under --out: listed among the outputs and in results.json."""
        if made is not None:                    # a check draws nothing
            self._wrote(made.path)
            self.record.artifact(made, cmd, self.out)

    def _display_training_images(self, cmd):
        self._draw(cmd, display_commands.display_training_images,
                   self._need_data(cmd, labels=False))

    def _display_filter_images(self, cmd):
        self._need_model(cmd)
        self._draw(cmd, display_commands.display_filter_images, self.model_arch, self.model)

    def _display_activation_images(self, cmd):
        self._need_model(cmd)
        self._draw(cmd, display_commands.display_activation_images, self.model_arch,
                   self._need_data(cmd, labels=False), self.model)

    # ------------------------------------------------------------------ the dispatch table
    # Every command name the parser produces (control.COMMANDS' command_name, plus SET for
    # ``NAME = value``) and the method that executes it.
    HANDLERS = {
        "SET": _set,
        "SERIES TRANSFORM": _series_flag,
        "SERIES TARGET": _series_flag,
        "SERIES CLASS": _series_flag,
        "SERIES HEADER": _series_flag,
        "LAYER": _layer,
        "MAKE IMAGE": DataCommands._make_image,
        "READ MNIST IMAGE": DataCommands._read_mnist_image,
        "READ MNIST LABELS": DataCommands._read_mnist_labels,
        "READ C10 IMAGE": DataCommands._read_c10_image,
        "READ SERIES": DataCommands._read_series,
        "READ IMAGES": DataCommands._read_images,
        "CLEAR": DataCommands._clear,
        "KEEP CASES": DataCommands._keep_cases,
        "VALIDATION CASES": DataCommands._validation_cases,
        "TRAIN": _train,
        "TEST": _test,
        "PRINT WEIGHTS": _print_weights,
        "SAVE MODEL": _save_model,
        "LOAD MODEL": _load_model,
        "CLASSIFY": ImageCommands._classify,
        "EXPORT ONNX": _export_onnx,
        "DISPLAY TRAINING IMAGES": _display_training_images,
        "DISPLAY FILTER IMAGES": _display_filter_images,
        "DISPLAY ACTIVATION IMAGES": _display_activation_images,
    }


def _as_user_error(error, cmd):
    """An allocation failure or an operating-system error while executing ``cmd``, as a ConvnetError
    at its line; anything else (a program error) is returned unchanged, to be raised as it is."""
    if memory.is_allocation_failure(error):
        return memory.allocation_error(error, cmd.name).located(cmd.file, cmd.line)
    if isinstance(error, OSError):
        name = f" '{error.filename}'" if error.filename else ""
        reason = error.strerror or str(error) or type(error).__name__
        return ConvnetError(f"{cmd.name}: cannot write or read{name}: {reason}", cmd.file, cmd.line)
    return error


def run(paths, out=".", device="auto", seed=None, threads=None, quiet=True, report=True,
        gpus=None, sweep_run=None):
    """Run control files like ``convnet run`` and return the finished Session (``report`` False:
    no report.html)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    session = Session(out=out, device=device, threads=threads, seed=seed, quiet=quiet,
                      report=report, gpus=gpus)
    try:
        session.run(paths, sweep_run)
    except ConvnetError as e:
        try:
            session.log.write(f"ERROR: {e}")
        except ConvnetError:        # the log itself cannot be written: e says so already
            pass
        raise
    finally:
        session.close()
    return session


def check(paths, echo=print, sweep_run=None):
    """Validate control files without training (``convnet check``; a sweep file: its combination
    ``sweep_run``); returns the Session."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    session = Session(check_only=True, echo=echo)
    session.run([os.fspath(p) for p in paths], sweep_run)
    return session

