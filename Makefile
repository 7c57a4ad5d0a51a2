# The two commands of the README, and the code generator.
.PHONY: run test test-all check gen fuzz-catalog

run:  ## start the whole mesh on this machine (Ctrl-C stops it; CATALOG_MODE=global-sql picks a mode)
	@scripts/run.sh $(if $(CATALOG_MODE),--catalog-mode $(CATALOG_MODE))

test:  ## run every check and every test but the slow ones (three test files at a time)
	@scripts/test.sh

test-all:  ## the same, with the slow tests too (outages, limits, the Spark cluster, fuzzing)
	@scripts/test.sh --all

check:  ## the fast lane: the same checks, and only the tests that start no process
	@scripts/test.sh --fast

gen:  ## regenerate texera/lake/ from protos/
	@scripts/bootstrap.sh
	@.venv/bin/python scripts/gen_protos.py

fuzz-catalog:  ## a long schemathesis run against the development catalog (EXAMPLES per operation)
	@CATALOG_FUZZ_EXAMPLES=$${EXAMPLES:-200} .venv/bin/pytest tests/integration/test_catalog_fuzz.py -q
