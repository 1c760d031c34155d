"""``python -m contrastlab`` is the ``contrastlab`` command."""

import sys

from contrastlab.cli import main

sys.exit(main())
