"""The command line: ``convnet run | check | batch | log | devices``."""

import sys

import click

from . import __version__
from .errors import ConvnetError, Interrupted


def fail(error):
    """Print a user error as one line and exit with status 2."""
    click.echo(f"convnet: error: {error}", err=True)
    sys.exit(2)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="convnet")
def main():
    """Train convolutional nets from plain-text control files."""


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--out", default=".", show_default=True, type=click.Path(file_okay=False),
              help="Folder for CONVNET.LOG, CUDA.LOG and every output file.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              show_default=True, help="auto: CUDA when PyCUDA and a GPU are usable.")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="Host threads (default: all cores).")
@click.option("--seed", type=click.IntRange(min=0), default=None, help="Random seed.")
@click.option("--quiet", is_flag=True, help="No progress line.")
def run(files, out, device, threads, seed, quiet):
    """Execute control FILES in order, as one session."""
    from .session import Session
    session = Session(out=out, device=device, threads=threads, seed=seed, quiet=quiet)
    try:
        session.run(list(files))
    except ConvnetError as e:
        session.log.write(f"ERROR: {e}")
        session.close()
        fail(e)
    except Interrupted as e:
        session.log.write(f"Run ended by the user (Ctrl-C); the log is complete up to here")
        session.close()
        click.echo(f"convnet: {e}", err=True)
        sys.exit(130)
    session.close()
    if not quiet:
        click.echo(f"convnet: finished; see {session.log.path}")


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
def check(files):
    """Validate control FILES without training: syntax, data headers, architectures."""
    from .session import check as check_files
    try:
        check_files(list(files), echo=click.echo)
    except ConvnetError as e:
        fail(e)
    except Interrupted as e:
        click.echo(f"convnet: {e}", err=True)
        sys.exit(130)
    click.echo(f"convnet: {' '.join(files)}: OK")


@main.command()
def devices():
    """List CUDA devices (or why none) and the host thread count."""
    from .devices import report
    for line in report():
        click.echo(line)


if __name__ == "__main__":  # pragma: no cover
    main()
