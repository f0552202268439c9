"""``python -m benchmarks.training_speed``."""

import sys

from benchmarks.training_speed import main

sys.exit(main())
