"""``python -m msrl.app.gate``: the learning gate's command line."""

import sys

from msrl.app.gate import main

sys.exit(main())
