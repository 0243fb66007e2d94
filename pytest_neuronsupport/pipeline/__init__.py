"""The test of one model, one module per step (:mod:`pytest_neuronsupport.modes` puts them in
order):

1. :mod:`.plan`: the checkpoint, its config, the runner, or an exclusion;
2. :mod:`.sizing`: how many cores it gets (or ``too-large``);
3. :mod:`.render`: its standalone ``run.py``, made of the definitions of the run code it uses
   (:mod:`.runcode`), and :mod:`.reference`: where its CPU reference is kept; a model whose
   ``run.py`` is the one recorded is not run again;
4. :mod:`.prefetch`: a Hub checkpoint's files in the cache (the next models' fetched ahead);
   :mod:`.leases`: the cores, leased from the machine's;
5. :mod:`.isolate`: the run in a process of its own, watched (and :mod:`.budget`:
   ``--neuron-limit``);
6. :mod:`.classify`: the result and the row's fields, decided in one place.
"""
