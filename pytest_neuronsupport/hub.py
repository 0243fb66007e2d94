"""The Hugging Face Hub as the plugin meets it: is its endpoint answering at all?

``huggingface_hub`` retries a refused connection with backoff (about 25 s for a listing or a
file download) before it says anything; a sweep would wait that long per model, twice (its
config, then its weights in ``run.py``). One request through the client's own session, without
retries, tells at once, and the error names the endpoint.
"""

from __future__ import annotations

from typing import Final

__all__ = ["HubUnreachableError", "check_reachable", "endpoint"]

TIMEOUT_S: Final = 10.0


class HubUnreachableError(Exception):
    """The Hub's endpoint gave no HTTP answer; the message names it."""


def endpoint() -> str:
    """The endpoint the client uses (``HF_ENDPOINT``, read when it was imported)."""
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def check_reachable(url: str | None = None, timeout_s: float = TIMEOUT_S) -> None:
    """Raise unless ``url`` (default: :func:`endpoint`) answers one request; any HTTP status
    is an answer. In offline mode (``HF_HUB_OFFLINE``) nothing is asked and nothing raised:
    the client reads its cache.

    Raises:
        HubUnreachableError: a connection error or a timeout.
    """
    from huggingface_hub import constants, get_session

    if constants.HF_HUB_OFFLINE:
        return
    url = url or endpoint()
    try:
        get_session().get(f"{url}/api/models", params={"limit": 1}, timeout=timeout_s)
    except Exception as exc:  # httpx's connection errors and timeouts, a malformed URL
        raise HubUnreachableError(
            f"the Hub at {url} is unreachable: {type(exc).__name__}: {exc}"
        ) from None
