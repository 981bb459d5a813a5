"""Training: a method is a sequence of phases (phase.py); the book's is simulated annealing
(anneal.py) then conjugate-gradient refinement (conjgrad.py). trainer.py drives the phases of a
TRAIN and adds the final pass and the confusion matrix (confusion.py), and runs TEST."""

from .confusion import confusion_matrix, format_confusion, misclassification
from .phase import PhaseResult
from .trainer import BOOK_METHOD, TestResult, TrainResult, test, train

__all__ = ["train", "test", "TrainResult", "TestResult", "PhaseResult", "BOOK_METHOD",
           "confusion_matrix", "format_confusion", "misclassification"]
