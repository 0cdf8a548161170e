"""Thin shim so `python cli.py …` runs the same Typer app as the `arithsweep` command."""

from arithsweep.cli import main

if __name__ == "__main__":
    main()
