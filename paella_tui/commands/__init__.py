"""One module per group of ``paella`` commands; each function takes the parsed arguments and returns an exit status."""
