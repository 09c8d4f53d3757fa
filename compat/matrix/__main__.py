from compat.matrix.cli import run

run()
