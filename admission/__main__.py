"""``python -m admission``: the ``quartermaster`` command."""

from admission.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
