import sys

from compat.gate.cli import main

sys.exit(main())
