"""`python -m lincorr`: the `lincorr` command."""

import sys

from lincorr.cli import main

sys.exit(main())
