"""Thin shim so `python cli.py …` runs the same Typer app as the `arithsweep` command."""

from arithsweep.cli.app import main

if __name__ == "__main__":
    main()
