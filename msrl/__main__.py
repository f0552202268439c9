"""``python -m msrl`` is the ``msrl`` command."""

import sys

from msrl.app import main

sys.exit(main())
