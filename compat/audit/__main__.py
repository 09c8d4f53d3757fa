from compat.audit.cli import run

run()
