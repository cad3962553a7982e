"""`python -m relayish_tools.cli ...`: the `relayish` command line without the installed console script."""
import sys

from .main import main

sys.exit(main())
