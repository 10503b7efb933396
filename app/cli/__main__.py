"""``python -m app.cli``: the ``enverif`` command without its console script."""

import sys

from app.cli import main

sys.exit(main())
