"""`python -m tfr_torch` is the `tfr-torch` command line."""

import sys

from tfr_torch.tools.cli import main

sys.exit(main())
