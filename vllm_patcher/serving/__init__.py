"""Start and stop the user's own vLLM servers (``payoff sweep``): each in its own process group,
on 127.0.0.1, stopped on every way out."""
