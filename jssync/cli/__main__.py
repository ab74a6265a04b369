"""``python -m jssync.cli``: the same as ``python -m jssync`` and the ``jssync`` command."""

from __future__ import annotations

import sys

from .app import main

sys.exit(main())
