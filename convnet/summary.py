"""The few lines ``convnet run`` prints when it ends: each TRAIN and TEST's result and the files."""

import os

from .logs.results import target_words

REPORT_NAME = "report.html"


def result_line(cmd, result):
    """``TRAIN at exp.ctl:8: criterion 0.0123, 1.25 % misclassified, 18.2 s``."""
    seconds = result.seconds.get("total") if isinstance(result.seconds, dict) else result.seconds
    cut_short = [p.name for p in getattr(result, "phases", []) if p.interrupted]
    interrupted = (f" ({', '.join(cut_short)} interrupted by the user)" if cut_short else
                   " (interrupted)" if getattr(result, "interrupted", False) else "")
    timing = f", {seconds:.1f} s" if seconds is not None else ""
    return (f"{result.command} at {cmd.file}:{cmd.line}: criterion {result.final_criterion:.6g}, "
            f"{result.misclassification:.2f} % misclassified{_validation_words(result)}{timing}"
            f"{interrupted}")


def _validation_words(result):
    """``, validation 3.10 % (lowest 2.90 %), target 5 % reached in 4.2 s (120 evaluations)``
    for a TRAIN that made validation checks; empty otherwise. With KEEP BEST the TRAIN ends
    with the best check's weights, so their error comes first: ``validation 2.90 % (the best
    check's weights, kept; last check 3.10 %)``."""
    summary = getattr(result, "validation_summary", None) or {}
    words = []
    if summary.get("cases") == "validation" and summary.get("final"):
        final, best = summary["final"]["error"], summary["best"]["error"]
        words.append(f"validation {best:.2f} % (the best check's weights, kept; last check "
                     f"{final:.2f} %)" if summary.get("kept_best")
                     else f"validation {final:.2f} % (lowest {best:.2f} %)")
    target = target_words(summary)
    if target:
        words.append(target)
    return "".join(f", {w}" for w in words)


def summary_lines(session):
    """One line per TRAIN and TEST, then where the output files went and the report's full path."""
    lines = []
    for cmd, result in session.outcomes:
        lines.append(result_line(cmd, result))
        lines += [f"   warning: {warning}" for warning in getattr(result, "warnings", [])]
    out = os.path.abspath(session.out)
    inside = [os.path.relpath(p, out) for p in session.outputs
              if os.path.abspath(p).startswith(out + os.sep)]
    outside = [p for p in session.outputs if not os.path.abspath(p).startswith(out + os.sep)]
    if inside:
        lines.append(f"Wrote in {out}: {', '.join(inside)}")
    if outside:
        lines.append(f"Wrote also: {', '.join(outside)}")
    reports = [os.path.abspath(p) for p in session.outputs if os.path.basename(p) == REPORT_NAME]
    if reports:
        lines.append(f"Open the report in a browser: {reports[0]}")
    return lines
