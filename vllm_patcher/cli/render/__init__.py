"""Rendering, one module per command group (``patching``, ``authoring``, ``models``,
``cluster``, ``payoff`` with ``payoff_report``, payoff's own report, and ``sweep``, its
subcommand's table, ``rehearse`` with ``rehearsal``, the rehearsal's report, ``events``, the
words of every progress event (a sweep's, a load's, a rehearsal's, a wheel fetch's), and ``notes``, the words of every kind of
judgement ``Note`` the load, judge and sweep libraries return): each turns a command's result
objects into what it shows (``base.Shown``: the ``--json`` report and the text lines, from the
same objects); ``plot`` draws payoff's ``--plot`` pictures (matplotlib, imported lazily). No
printing here; ``Application.show`` prints."""
