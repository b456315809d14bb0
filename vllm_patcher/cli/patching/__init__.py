"""The commands that change or read what the patches do to an environment, a file each:
``status``, ``apply``, ``verify``, ``revert`` and ``list`` (``listing``); which patches they
work on (``choice``: NAMES, --model, pyproject's select, or the recorded choice)."""
