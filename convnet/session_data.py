"""The session's data commands: MAKE IMAGE, the readers (MNIST, CIFAR-10, series, image
folders), CLEAR and KEEP CASES.

``DataCommands`` is part of the Session (session.py inherits it): its handlers set the session's
data set and write their log lines, as the session's own handlers do. It imports nothing above
it.
"""

from . import memory
from .errors import ConvnetError
from .session_images import class_names_phrase, shown_message, shown_path


class DataCommands:
    """The handlers that make, read, clear or cut the session's data set."""

    def _need_no_data(self, cmd):
        if self.dataset is not None:
            raise cmd.error(f"{cmd.name}: data is already present (use CLEAR first)")

    def _make_image(self, cmd):
        from .data.synthetic import make_image
        self._need_no_data(cmd)
        args = cmd.args
        memory.require(memory.images_bytes(args["cases"], args["bands"], args["rows"],
                                           args["columns"]),
                       f"MAKE IMAGE's {args['cases']} images of {args['rows']} x "
                       f"{args['columns']} x {args['bands']} bands")
        self.dataset = make_image(args["rows"], args["columns"], args["bands"], args["classes"],
                                  args["cases"], self.rng)
        self._data_note(cmd)

    def _read_mnist_image(self, cmd):
        from .data import mnist
        self._need_no_data(cmd)
        self.dataset = mnist.read_images(cmd.args["path"])
        self._data_note(cmd)

    def _read_mnist_labels(self, cmd):
        from .data import mnist
        if self.dataset is None or self.dataset.source != "MNIST":
            raise cmd.error("READ MNIST LABELS must follow READ MNIST IMAGE")
        if self.dataset.classes is not None:
            raise cmd.error("MNIST labels were already read for these images (use CLEAR first)")
        self.dataset = mnist.read_labels(cmd.args["path"], self.dataset)
        self._data_note(cmd)

    def _read_c10_image(self, cmd):
        from .data import cifar
        if self.dataset is not None and self.dataset.source != "C10":
            raise cmd.error("READ C10 IMAGE: other data is already present (use CLEAR first)")
        self.dataset = cifar.read_c10(cmd.args["path"], existing=self.dataset)
        self._data_note(cmd)

    def _read_series(self, cmd):
        from .data import series
        self._need_no_data(cmd)
        imaging = self.settings().series
        settings = series.SeriesSettings(
            column=imaging.column, window=imaging.window, resolution=imaging.resolution,
            shift=imaging.shift, frac_full=imaging.frac_full, **self.series_settings)
        self.dataset = series.read_series(cmd.args["path"], settings, scaling=self.model_series)
        self._data_note(cmd)
        if self.model_series is not None:
            self.log.write("   (imaged and classed with the trained model's series scale and thresholds)")

    def _clear(self, cmd):
        self.dataset = None

    def _keep_cases(self, cmd):
        self._need_data(cmd, labels=False)
        self.dataset = self.dataset.keep_cases(cmd.args["first"], cmd.args["last"])
        self._data_note(cmd)

    def _validation_cases(self, cmd):
        self.dataset = self._need_data(cmd).hold_out(cmd.args["first"], cmd.args["last"])
        first, last = self.dataset.held_out
        self.log.write(f"   Validation: cases {first}-{last} held out of training, "
                       f"{self.dataset.n_cases - (last - first + 1)} left to train on")

    def _data_note(self, cmd):
        data = self.dataset
        labels = "" if data.classes is not None else " (labels not read yet)"
        self.log.write(f"   Data: {data.n_cases} cases of {data.rows} rows, {data.cols} columns and "
                       f"{data.bands} bands, {data.n_classes} classes{labels}")

    def _need_data(self, cmd, labels=True):
        if self.dataset is None:
            raise cmd.error(f"{cmd.name} needs data: read or make data first")
        if labels and self.dataset.classes is None:
            raise cmd.error(f"{cmd.name}: the MNIST labels have not been read (READ MNIST LABELS)")
        return self.dataset

    def _read_images(self, cmd):
        from .data.images import read_folder
        self._need_no_data(cmd)
        written = cmd.args["filename"]
        try:
            dataset, skipped = read_folder(cmd.args["path"], self._image_size(cmd))
        except ConvnetError as e:           # name the files as the control line names them
            raise cmd.error(shown_message(e.message, cmd, written)) from None
        self.dataset = _renamed_cases(dataset, [shown_path(p, cmd, written)
                                                for p in dataset.case_names])
        self._data_note(cmd)
        self.log.write(f"   Classes: {class_names_phrase(dataset.class_names)}")
        if skipped:
            self.log.write(f"   ({skipped} file{'s' if skipped != 1 else ''} without an image "
                           "suffix skipped)")


def _renamed_cases(dataset, case_names):
    """The data set with other case names."""
    return type(dataset)(dataset.inputs, dataset.classes, dataset.n_classes, dataset.source,
                         class_names=dataset.class_names, case_names=case_names)
