"""`python -m margin_client ...`: the client commands without the `margin` script."""

import sys

from margin_client.cli import main

sys.exit(main())
