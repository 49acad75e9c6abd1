"""The contract, ``paella.toml``: its model (``model``), reading and validating it (``loader``,
``validation``, ``sections``, ``toml_lines``, ``problems``), its command lines and placeholders
(``command_line``), and the template ``paella init`` writes (``template``)."""
