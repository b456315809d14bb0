"""Rendering, one module per command group (``patching``, ``authoring``, ``models``,
``cluster``, ``payoff`` with ``sweep``, its subcommand's table, ``rehearse``): each turns a command's result objects into what it shows
(``base.Shown``: the ``--json`` report and the text lines, from the same objects). No printing
here; ``Application.show`` prints."""
