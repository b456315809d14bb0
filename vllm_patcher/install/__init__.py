"""The vLLM install: find it (``locate``, reading its metadata folder through ``dist``), read
its RECORD (``record``, a leaf), judge its files against a reference (``reference``); ``target`` is
the ``Target`` they describe."""
