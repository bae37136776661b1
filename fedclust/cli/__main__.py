"""``python -m fedclust.cli`` is the ``fedclust`` command."""

import sys

from fedclust.cli import main

sys.exit(main())
