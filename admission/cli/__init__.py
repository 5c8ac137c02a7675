"""The ``quartermaster`` command line: argument parsing and exit codes, nothing else."""
