"""``python -m msrl`` is the ``msrl`` command."""

import sys

from msrl._cli import main

sys.exit(main())
