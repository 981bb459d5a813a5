"""The session's image commands: READ IMAGES, CLASSIFY, and what TRAIN, TEST and the model files
keep of class names and of a TEST's most wrong cases.

``ImageCommands`` is part of the Session (session.py inherits it): its methods use the session's
data, model, parameters, log and record, as the session's own handlers do. It lives here so that
session.py stays readable; it imports nothing above it.
"""

import os

from .data.dataset import class_label
from .errors import ConvnetError

# The folder of a run where the pictures of each TEST's most wrong cases go.
MOST_WRONG_FOLDER = "most_wrong"


def shown_path(path, cmd, written):
    """A file found from a control line's input, as its user would name it: relative to the
    control file's folder where the line named its input relatively, else absolute."""
    if os.path.isabs(written) or cmd.file is None:
        return path
    return os.path.relpath(path, os.path.dirname(os.path.abspath(cmd.file)))


def shown_message(message, cmd, written):
    """A reader's message with the files named as shown_path names them."""
    if os.path.isabs(written) or cmd.file is None:
        return message
    return message.replace(os.path.dirname(os.path.abspath(cmd.file)) + os.sep, "")


def class_names_phrase(names):
    """``1 = cat, 2 = dog``."""
    return ", ".join(f"{n + 1} = {name}" for n, name in enumerate(names))


class ImageCommands:
    """READ IMAGES, CLASSIFY, and the class names of the model (see the module notes)."""

    def _image_size(self, cmd):
        """(rows, cols) of IMAGE ROWS and IMAGE COLUMNS, or None when neither is set."""
        try:
            return self.settings().images.size
        except ValueError as e:
            raise cmd.error(str(e)) from None

    def _check_class_names(self, cmd, data):
        """A TEST of data whose classes have names other than the model's is refused."""
        mine, model = getattr(data, "class_names", None), self.model_class_names
        if mine and model and tuple(mine) != tuple(model):
            raise cmd.error(f"the data's classes ({class_names_phrase(mine)}) are not the "
                            f"model's ({class_names_phrase(model)})")

    def _classify(self, cmd):
        from .predict import classify, image_paths, write_predictions
        from .data.images import read_for_model
        self._need_model(cmd)
        arch, size = self.model_arch, self._image_size(cmd)
        if size is not None and tuple(size) != (arch.rows, arch.cols):
            raise cmd.error(f"IMAGE ROWS and IMAGE COLUMNS ({size[0]} x {size[1]}) differ from "
                            f"the model's images ({arch.rows} x {arch.cols})")
        written = cmd.args["images"]
        try:
            paths = image_paths([cmd.args["path"]])
            if self.check_only:                 # every image read: each is checked
                read_for_model(paths, arch.rows, arch.cols, arch.bands, size is not None)
                return
            outputs = classify(self.model, paths, resize=size is not None)
        except ConvnetError as e:
            raise cmd.error(shown_message(e.message, cmd, written)) from None
        target = self._output_path(cmd.args["predictions"])
        made = write_predictions(target, [shown_path(p, cmd, written) for p in paths], outputs,
                                 self.model_class_names, arch.n_classes)
        self._record_made(made, cmd)
        self.log.write(f"   {made.what.capitalize()} written to {target}")

    def _most_wrong(self, result, data, entry):
        """The pictures of a TEST's most wrong cases, under MOST_WRONG_FOLDER; their entries
        for results.json (1-based case numbers, class numbers and names, probabilities)."""
        from .display.cases import save_case
        names = getattr(data, "class_names", None) or self.model_class_names
        cases = getattr(data, "case_names", None)
        out = []
        for worst in result.worst:
            number = worst["case"] + 1
            file = os.path.join(MOST_WRONG_FOLDER, f"test{entry['index']}-case{number}.png")
            save_case(data.inputs[worst["case"]], os.path.join(self.out, file))
            out.append(dict(worst, case=number, file=file,
                            source=None if cases is None else cases[worst["case"]],
                            true_name=class_label(names, worst["true"]),
                            predicted_name=class_label(names, worst["predicted"])))
        if out:
            self._wrote(os.path.join(self.out, MOST_WRONG_FOLDER))
        return out
