"""``python -m loadtests <command>``: the command line lives in ``loadtests.cli.commands``."""

from loadtests.cli.commands import main

if __name__ == "__main__":
    main()
