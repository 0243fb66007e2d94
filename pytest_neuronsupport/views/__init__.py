"""Answers read from a results dataset, for people: lookup, diff, the page, the card.

Each module reads the dataset through :mod:`pytest_neuronsupport.dataset.files` and writes text
or files; the ``neuronsupport`` command (:mod:`pytest_neuronsupport.cli`) calls them. None of
them imports torch.
"""
