"""Standalone run code: each module here is pasted into run.py (see script.RUNNER_MODULES).

They import only the standard library, torch and transformers, never the plugin.
"""
