"""Start and stop the user's own vLLM servers (``payoff sweep``, ``rehearse``): ``args`` reads
the ``vllm serve`` arguments the user gives, ``server`` starts each in its own process group on
127.0.0.1 and a free port and stops it on every way out, with what it started that left its group
(``family``)."""
