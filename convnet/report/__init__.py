"""HTML reports: one self-contained page per run (``run_page``, kept live by ``live``), one per
batch (``batch_page``), and ``convnet report`` for runs made earlier (``build``)."""
