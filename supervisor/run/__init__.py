"""The run: the loop that supervises it, its events, its ledger, the state folded from them, and the handoff."""
