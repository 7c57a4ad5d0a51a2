# The two commands of the README, and the code generator.
.PHONY: run test check gen

run:  ## start the whole mesh on this machine (Ctrl-C stops it)
	@scripts/run.sh

test:  ## run every check and test
	@scripts/test.sh

check:  ## the fast lane: the same checks, and only the tests that start no process
	@scripts/test.sh --fast

gen:  ## regenerate texera/lake/ from protos/
	@scripts/bootstrap.sh
	@.venv/bin/python scripts/gen_protos.py
