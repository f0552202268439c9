"""``python -m testbed up|exec|shape|down``: see ``testbed/_cli.py``."""

import sys

from testbed._cli import main

sys.exit(main())
