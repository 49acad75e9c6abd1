"""The contract, ``paella.toml``: its model and validation, and the template ``paella init`` writes."""
