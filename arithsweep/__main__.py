"""`python -m arithsweep …` is the same as the `arithsweep` console script."""

from arithsweep.cli.app import main

if __name__ == "__main__":
    main()
