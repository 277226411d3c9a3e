"""`python -m ch_launcher.demo VMI.yaml` (see the package docstring)."""

import sys

from ch_launcher.demo.run import main

sys.exit(main())
