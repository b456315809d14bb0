"""Start and stop every vLLM process the tool runs: the user's own vLLM servers (``payoff
sweep``, ``rehearse``) and the load client (``payoff bench``, ``payoff sweep``). ``args`` reads
the ``vllm serve`` arguments the user gives, ``server`` starts each server in its own process
group on 127.0.0.1 and a free port and stops it on every way out, with what it started that left
its group (``process_tree``), and a ``watchdog`` process that stops the group when the tool is gone,
whatever killed it; ``client`` runs vLLM's own benchmark client (``scripts/bench_client``) in
the target interpreter, in a process group of its own killed whole on every way out, and counts
the requests it has out to a server (``connections``)."""
