"""Rendering, one module per command group (``patching``, ``authoring``, ``models``,
``cluster``, ``payoff`` with ``payoff_report``, payoff's own report, and ``sweep``, its
subcommand's table, ``rehearse`` with ``rehearsal``, the rehearsal's report, and ``reached``,
the words of a sweep's and a rehearsal's progress): each turns a command's result objects into what it shows
(``base.Shown``: the ``--json`` report and the text lines, from the same objects); ``plot`` draws
payoff's ``--plot`` pictures (matplotlib, imported lazily). No printing here;
``Application.show`` prints."""
