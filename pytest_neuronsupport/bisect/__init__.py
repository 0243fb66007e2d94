"""Which release broke a model, or where inside the compiler: bisections.

Across a package's releases (:mod:`.release`): the ends from the dataset (:mod:`.ends`), the
releases from pip's index (:mod:`.versions`), a candidate environment for each
(:mod:`.environments`), the model's ``run.py`` run there (:mod:`.trial`) and judged
(:mod:`.outcomes`), a binary search over them (:mod:`.search`), the answer as text, JSON and a
row of the ``bisect/`` table (:mod:`.report`). Inside the compiler: :mod:`.compiler` (PyTorch's
CompilerBisector through :mod:`.step`, or the minifier). ``neuronsupport bisect`` is
:mod:`.command`; ``--neuron-bisect`` after a sweep is :mod:`.aftersweep`. None of it imports
torch: the runs do, in their own processes.
"""
