"""The `atelier` command line (serve, worker, run, notes, db); entry point `cli.main:main`."""
