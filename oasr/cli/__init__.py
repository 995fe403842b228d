"""The ``oasr`` command line (``oasr.cli.main:main``); one module per subcommand."""
