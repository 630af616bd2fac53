"""Compile every solver kernel into Numba's on-disk cache (the same as `margin warm`)."""

import sys

from app.warmup import main

if __name__ == "__main__":
    sys.exit(main())
