"""The commands that write patches into a patches folder, a file each: ``capture``,
``import`` (``importing``), ``port`` and ``pin``; ``_shared`` holds what they share."""
