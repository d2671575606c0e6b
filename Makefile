# Two commands matter: `make demo` (the main job, locally) and `make test`. Both run `make setup` first,
# which builds each environment only when it is missing or its requirements changed.
PYTHON ?= python3
.DEFAULT_GOAL := help
.PHONY: help setup demo test plan clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 12

setup: .venv/.installed  ## make the environments (.venv: deployer + tests)

# The deployer: Pulumi program, infra CLI, data upload/stage, test tools. No ML framework.
.venv/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv .venv
	.venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt -r requirements-dev.txt
	touch $@

demo: setup  ## the main job, locally: plan the dev stack offline
	.venv/bin/python -m infra plan --stack dev

plan: setup  ## offline plan of one stack: make plan STACK=vision
	.venv/bin/python -m infra plan --stack $(or $(STACK),dev)

test: setup  ## the whole test suite
	.venv/bin/python -m pytest tests

clean:  ## remove the environments and caches (the Horovod wheel cache in .cache/ is kept)
	rm -rf .venv .venv-torch .venv-tf .pytest_cache
