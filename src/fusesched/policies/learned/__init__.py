"""Learned scheduling policies: a priority function trained in the simulator.

:mod:`.model` holds the model, its features and its file format (read by the queue-order
registry as ``learned`` and ``learned:PATH``); :mod:`.train` trains one on SWF traces. See
docs/LEARNED_POLICY.md.
"""
