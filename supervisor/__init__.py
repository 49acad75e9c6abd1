"""The headless engine of paella-tui: contract, ledger, snapshots, gates, the agent process, drift and the run loop.

It never imports Textual (a test enforces it), so it runs headless in CI and behind any UI.
"""
