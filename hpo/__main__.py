"""`python -m hpo`: the same as the `hpo` command."""

import sys

from hpo.app.cli import main

sys.exit(main())
