"""`python -m core.cli ...`: the same commands as `amp-console` without the GUI."""

from core.cli.main import main
from core.process import exit_process

if __name__ == "__main__":
    exit_process(main())
