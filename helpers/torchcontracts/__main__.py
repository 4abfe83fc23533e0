"""``python -m torchcontracts`` is the same as the ``torchcontracts`` command."""

import sys

from torchcontracts.cli import main

sys.exit(main())
