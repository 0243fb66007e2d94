"""Root conftest: no Hugging Face Hub for the plugin's own tests (pytester is enabled by
``-p pytester`` in pyproject's addopts, so that this file holds no ``pytest_plugins`` and stays
harmless when a sweep from another folder collects the bundled lists beside it).

The sweep never needs the Hub here: the tiny zoo is built locally. With HF_HUB_OFFLINE=1 a
Hub id fails in ~2 s instead of retrying for ~46 s.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
