"""vLLM release wheels: ``fetch`` finds a release on the configured index and reads only the
members needed (range requests); ``members`` checks each against the wheel's RECORD; ``sources``
keeps the pristine trees extracted from them, in the cache."""
