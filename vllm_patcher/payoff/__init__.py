"""``payoff``: does speculative decoding pay on this deployment, and what would pay better.

Order of work: ``scrape`` reads a server's Prometheus counters (prometheus_client's parser) or a
saved scrape, ``logline`` reads vLLM's SpecDecoding log lines instead; ``window`` takes the
difference of two readings; ``measure`` takes the server's window and the baseline's, each read
one way (a URL, saved scrapes or a log); ``analysis`` turns a window (and a baseline server's
window, when given) into acceptance figures, both measured speed ratios and a verdict, judged by
``judge`` (one class for every figure, or ``unknown``; a shorter draft only a range between two
cost models); ``run`` drives it, ``--watch`` too (the command line renders it:
``cli/render/payoff_report``, and draws its ``--plot``: ``cli/render/plot``). ``notes`` holds
what a judgement or a report says beyond its figures, one class per kind, for every package that
judges. Driving a load with vLLM's own benchmark client (``payoff bench``) is a folder of its own
(``vllm_patcher.load``), and so is the sweep over k (``vllm_patcher.sweep``); both read and
judge their servers' counters here.
"""
