"""Training: simulated annealing (anneal.py), conjugate gradients (conjgrad.py), the confusion matrix
(confusion.py), and TRAIN / TEST with their log lines and Ctrl-C handling (trainer.py)."""

from .confusion import confusion_matrix, format_confusion, misclassification
from .trainer import TestResult, TrainResult, test, train

__all__ = ["train", "test", "TrainResult", "TestResult", "confusion_matrix", "format_confusion",
           "misclassification"]
