"""`python -m cli ...`, as the `atelier` script."""

from cli.main import main

main()
