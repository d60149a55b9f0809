"""The command line: argument parsing and one handler per subcommand, on top of every other layer."""
