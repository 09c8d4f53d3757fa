from compat.fix.cli import run

run()
