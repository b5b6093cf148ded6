"""`python -m tilefit ...`: the same as the `tilefit` command (for a source tree not installed)."""

import sys

from tilefit.cli.main import main

sys.exit(main())
