"""`python -m demo VMI.yaml` (see the package docstring)."""

import sys

from demo.run import main

sys.exit(main())
