"""What the program shows, one module per job.

- ``grids``: DISPLAY TRAINING / FILTER / ACTIVATION IMAGES, image grids drawn with Pillow;
- ``plots``: criterion curves, confusion heat maps and overlaid curves, drawn with matplotlib;
- ``progress``: the live progress line on a terminal, a batch's lines as its files start and
  end, and the note that the host kernels compile;
- ``commands``: the DISPLAY commands of a session (checks, drawing, recording).
"""
