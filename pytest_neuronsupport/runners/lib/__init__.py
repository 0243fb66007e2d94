"""The run side: the code ``run.py`` is made of.

Each module here imports only the standard library, torch and transformers, never the rest of
the plugin, and other modules of this package by ``from pytest_neuronsupport.runners.lib.<module>
import <name>``: the renderer (:mod:`pytest_neuronsupport.pipeline.render`) follows those imports
and copies into a run's script the definitions that run uses, and nothing else. The plugin
imports what it shares with the run side from here too (the results, the marks a run prints,
how a process ended), so nothing is written twice. :mod:`protocol` and :mod:`processes` import
only the standard library: the plugin imports them without paying for torch.
"""
