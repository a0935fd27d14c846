import sys

from gpusim.cli.commands import main

sys.exit(main())
