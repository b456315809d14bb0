"""The commands that change or read what the patches do to an environment, a file each:
``status``, ``apply``, ``verify``, ``revert`` and ``list`` (``listing``)."""
