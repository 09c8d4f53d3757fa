from compat.matrix.bisect import run

run()
