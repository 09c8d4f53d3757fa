from compat.extract.cli import run

run()
