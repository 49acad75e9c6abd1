"""A tiny event ledger: ingest each event once, keep e-mail addresses private, export, summarise."""
