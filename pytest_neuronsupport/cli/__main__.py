"""``python -m pytest_neuronsupport.cli``: the ``neuronsupport`` command."""

from pytest_neuronsupport.cli import main

raise SystemExit(main())
