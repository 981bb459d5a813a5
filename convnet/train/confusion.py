"""The confusion matrix and its CONVNET.LOG layout (book p.168).

Rows are the true class, columns the predicted class (the class with the largest SoftMax output; the
first one on a tie). In the log every true class takes three tab-separated rows: the counts, the
percent of that true class (the row sums to 100 unless the class has no cases), and the percent of
all cases (the whole matrix sums to 100). Classes are numbered from 1 in the log; where the
classes have names (an image folder's), a line after the matrix says which name each number is.
"""

import numpy as np


def confusion_matrix(outputs, classes, n_classes):
    """Counts, shape (n_classes, n_classes), int64: [true class, predicted class].

    outputs: (n_cases, n_classes) model outputs (probabilities or anything whose largest entry is the
    predicted class); classes: (n_cases,) true classes, 0-based.
    """
    outputs = np.asarray(outputs)
    classes = np.asarray(classes, dtype=np.int64)
    if outputs.ndim != 2 or outputs.shape[1] != n_classes or outputs.shape[0] != classes.shape[0]:
        raise ValueError(f"outputs {outputs.shape} do not fit {classes.shape[0]} cases of "
                         f"{n_classes} classes")
    predicted = np.argmax(outputs, axis=1) if outputs.shape[0] else np.zeros(0, dtype=np.int64)
    matrix = np.zeros((n_classes, n_classes), dtype=np.int64)
    np.add.at(matrix, (classes, predicted), 1)
    return matrix


def mean_nll(outputs, classes):
    """The likelihood part of the criterion from SoftMax outputs (Equation 1-13): the mean
    negative log likelihood per case and class."""
    n, k = outputs.shape
    if n == 0:
        return 0.0
    p = outputs[np.arange(n), classes]
    return float(-np.sum(np.log(p + 1e-30)) / (n * k))


def misclassification(matrix):
    """Percent of cases off the diagonal (0.0 for an empty matrix)."""
    matrix = np.asarray(matrix)
    total = int(matrix.sum())
    if total == 0:
        return 0.0
    return 100.0 * (total - int(np.trace(matrix))) / total


def format_confusion(matrix, class_names=None):
    """The book's layout as a list of lines: a header of predicted classes, three rows per true class
    (count, row percent, total percent; percents with 2 decimals), a blank line, and
    ``Total misclassification = x percent`` with 4 decimals."""
    matrix = np.asarray(matrix, dtype=np.int64)
    k = matrix.shape[0]
    total = int(matrix.sum())
    lines = ["\t" + "\t".join(str(j + 1) for j in range(k))]
    for i in range(k):
        row = matrix[i]
        row_total = int(row.sum())
        row_pct = 100.0 * row / row_total if row_total else np.zeros(k)
        all_pct = 100.0 * row / total if total else np.zeros(k)
        lines.append(f"{i + 1}\t" + "\t".join(str(int(c)) for c in row))
        lines.append("\t" + "\t".join(f"{p:.2f}" for p in row_pct))
        lines.append("\t" + "\t".join(f"{p:.2f}" for p in all_pct))
    lines.append("")
    lines.append(f"Total misclassification = {misclassification(matrix):.4f} percent")
    if class_names:
        lines.append("Classes: " + ", ".join(f"{n + 1} = {name}"
                                             for n, name in enumerate(class_names)))
    return lines


# How many of its most wrong cases a TEST keeps for the report.
MOST_WRONG = 16


def most_wrong(outputs, classes, count=MOST_WRONG):
    """The ``count`` cases with the largest negative log likelihood -ln p(true class), worst
    first (the lower case first on a tie): a list of dicts with the 0-based ``case``, ``true``
    and ``predicted`` classes, ``p_true``, ``p_predicted`` and ``nll``."""
    outputs = np.asarray(outputs, dtype=np.float64)
    classes = np.asarray(classes, dtype=np.int64)
    if outputs.shape[0] == 0:
        return []
    p_true = outputs[np.arange(outputs.shape[0]), classes]
    nll = -np.log(np.maximum(p_true, 1e-300))
    order = np.lexsort((np.arange(nll.size), -nll))[:count]
    predicted = np.argmax(outputs, axis=1)
    return [{"case": int(i), "true": int(classes[i]), "predicted": int(predicted[i]),
             "p_true": float(p_true[i]), "p_predicted": float(outputs[i, predicted[i]]),
             "nll": float(nll[i])} for i in order]
