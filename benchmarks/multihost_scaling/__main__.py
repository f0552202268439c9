"""``python -m benchmarks.multihost_scaling``."""

import sys

from benchmarks.multihost_scaling import main

sys.exit(main())
