"""``rehearse``: the user's own ``vllm serve`` started with ``--load-format dummy`` (the real model
classes, random weights, no checkpoint read), asked a few short completions, its ``/metrics`` read
and stopped: what only a start of the real engine shows, in minutes instead of a full load.

``device`` asks the venv's vLLM, before anything starts, whether it sees a device to run on;
``phases`` reads the server log for the steps it reached, ``failures`` names a failure's cause and
fix from the real engine's own messages, and ``run`` drives one rehearsal through ``serving`` (the command line renders the result:
``cli/render/rehearsal``)."""
