"""vLLM release wheels: ``index`` finds a release on the configured package indexes; ``fetch``
reads only the members needed (range requests, else one download); ``members`` checks each
against the wheel's RECORD; ``sources`` keeps the pristine trees extracted from them, in the
cache."""
