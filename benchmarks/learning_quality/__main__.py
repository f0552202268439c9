"""``python -m benchmarks.learning_quality``."""

import sys

from benchmarks.learning_quality import main

sys.exit(main())
