"""The agent: its process tree and cage, its output, its profiles, how an attempt ended and when to retry."""
