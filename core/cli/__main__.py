"""`python -m core.cli ...`: the same commands as `amp-console` without the GUI."""

import sys

from core.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
