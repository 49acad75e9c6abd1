"""The headless engine of paella-tui, one folder a room:

- ``base``: errors a person reads, durations, safe writes, owned locks, path globs;
- ``contract``: ``paella.toml``, its model, validation and template;
- ``store``: the git store (workspace, snapshots, checkpoints, steps, rollback, mirror);
- ``agent``: the agent's process tree, output, profiles, and how an attempt ended;
- ``watch``: which changes in the work tree matter, and when it has settled;
- ``judge``: gates, the evaluation of trees, drift, and where a gate broke;
- ``run``: the run loop, its events and ledger, the state folded from them, the handoff.

Every room uses ``base``; the run's record (``run.events``, ``run.ledger``, ``run.runs``) is the
vocabulary the store and the judge write in, and ``run.run_loop`` wires all the rooms together. The
engine never imports Textual (a test enforces it), so it runs headless in CI and behind any UI.
"""
