"""A library's warning is not the model's failure, whatever the user's warnings filters."""

from __future__ import annotations

import warnings

import pytest

from pytest_neuronsupport.runners.lib.warned import library_warnings, shown_not_raised


class LibraryWarning(UserWarning):
    pass


def test_a_filter_that_raises_shows_instead_and_the_others_are_kept() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.resetwarnings()
        warnings.filterwarnings("error", category=LibraryWarning)
        warnings.filterwarnings("ignore", message="quiet please", category=LibraryWarning)
        before = list(warnings.filters)
        with library_warnings():
            warnings.warn("zero-element tensors", LibraryWarning, stacklevel=1)  # shown, not raised
            warnings.warn("quiet please", LibraryWarning, stacklevel=1)  # still ignored
        assert [str(w.message) for w in seen] == ["zero-element tensors"]
        assert warnings.filters == before  # as they were afterwards
        with pytest.raises(LibraryWarning):
            warnings.warn("zero-element tensors", LibraryWarning, stacklevel=1)


def test_a_filter_of_one_module_and_message_keeps_its_scope() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.resetwarnings()
        warnings.simplefilter("ignore")
        warnings.filterwarnings("error", message="Initializing", module="torch.nn")
        shown_not_raised()
        (action, message, category, module, lineno), *_ = warnings.filters
        assert (action, category, lineno) == ("default", Warning, 0)
        assert message is not None and message.pattern == "Initializing"
        assert module is not None and module.pattern == "torch.nn"
        warnings.warn_explicit(
            "Initializing zero-element tensors", UserWarning, "x.py", 1, "torch.nn"
        )
        warnings.warn_explicit("Initializing zero-element tensors", UserWarning, "y.py", 1, "other")
        assert [w.filename for w in seen] == ["x.py"]  # the other module's stays ignored


def test_filters_that_never_raise_are_left_as_they_are() -> None:
    with warnings.catch_warnings():
        warnings.resetwarnings()
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        before = list(warnings.filters)
        shown_not_raised()
        assert warnings.filters == before
