"""`python -m rfthpc` is the `rfthpc` command."""

import sys

from rfthpc.cli import main

sys.exit(main())
