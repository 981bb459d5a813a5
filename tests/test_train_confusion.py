"""The confusion matrix and its log layout (book p.168)."""

import numpy as np
import pytest

from convnet.train.confusion import confusion_matrix, format_confusion, misclassification

# The book's example matrix (p.168) and its printed total.
BOOK = np.array([[168, 0, 2, 0, 2, 0],
                 [1, 127, 18, 0, 1, 31],
                 [1, 12, 120, 2, 4, 11],
                 [8, 0, 1, 124, 48, 1],
                 [6, 1, 0, 11, 178, 0],
                 [0, 20, 1, 0, 1, 124]])


def test_book_example_layout():
    lines = format_confusion(BOOK)
    assert lines[0] == "\t1\t2\t3\t4\t5\t6"
    assert lines[1] == "1\t168\t0\t2\t0\t2\t0"
    assert lines[2] == "\t97.67\t0.00\t1.16\t0.00\t1.16\t0.00"
    assert lines[3] == "\t16.41\t0.00\t0.20\t0.00\t0.20\t0.00"
    assert lines[4] == "2\t1\t127\t18\t0\t1\t31"
    assert lines[5] == "\t0.56\t71.35\t10.11\t0.00\t0.56\t17.42"
    assert lines[6] == "\t0.10\t12.40\t1.76\t0.00\t0.10\t3.03"
    assert lines[16] == "6\t0\t20\t1\t0\t1\t124"
    assert lines[17] == "\t0.00\t13.70\t0.68\t0.00\t0.68\t84.93"
    assert lines[18] == "\t0.00\t1.95\t0.10\t0.00\t0.10\t12.11"
    assert lines[-1] == "Total misclassification = 17.8711 percent"
    assert len(lines) == 1 + 3 * 6 + 2


def test_matrix_sums_and_percentages():
    rng = np.random.default_rng(0)
    n, k = 257, 4
    outputs = rng.random((n, k))
    classes = rng.integers(0, k, n)
    m = confusion_matrix(outputs, classes, k)
    assert m.dtype == np.int64 and m.shape == (k, k)
    assert m.sum() == n
    assert np.array_equal(m.sum(axis=1), np.bincount(classes, minlength=k))
    assert np.array_equal(m.sum(axis=0), np.bincount(outputs.argmax(1), minlength=k))
    lines = format_confusion(m)
    rows = [lines[1 + 3 * i: 4 + 3 * i] for i in range(k)]
    total_pct = 0.0
    for counts, row_pct, all_pct in rows:
        rp = [float(v) for v in row_pct.split("\t")[1:]]
        ap = [float(v) for v in all_pct.split("\t")[1:]]
        assert sum(rp) == pytest.approx(100.0, abs=0.01 * k)
        total_pct += sum(ap)
    assert total_pct == pytest.approx(100.0, abs=0.01 * k * k)
    wrong = np.sum(outputs.argmax(1) != classes)
    assert misclassification(m) == pytest.approx(100.0 * wrong / n)


def test_ties_go_to_first_class_and_empty_rows():
    outputs = np.array([[0.5, 0.5, 0.0], [0.2, 0.4, 0.4]])
    m = confusion_matrix(outputs, np.array([1, 1]), 3)
    assert m.tolist() == [[0, 0, 0], [1, 1, 0], [0, 0, 0]]
    lines = format_confusion(m)
    assert lines[2] == "\t0.00\t0.00\t0.00"          # class 1 has no cases: no division by zero
    assert lines[-1] == "Total misclassification = 50.0000 percent"


def test_empty_and_bad_shapes():
    m = confusion_matrix(np.zeros((0, 2)), np.zeros(0, dtype=np.int64), 2)
    assert m.sum() == 0 and misclassification(m) == 0.0
    assert format_confusion(m)[-1] == "Total misclassification = 0.0000 percent"
    with pytest.raises(ValueError):
        confusion_matrix(np.zeros((3, 2)), np.zeros(3, dtype=np.int64), 3)
