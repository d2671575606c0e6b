# Two commands matter: `make demo` (the main job, locally) and `make test`. Both run `make setup` first,
# which builds each environment only when it is missing or its requirements changed.
PYTHON ?= python3
.DEFAULT_GOAL := help
.PHONY: help setup demo demo-local demo-container test test-images test-containers test-faults plan clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/; s/\{frameworks\}/$(subst $(space),|,$(FRAMEWORKS))/' \
	    | expand -t 12

# The training frameworks and their environments come from one table, training/frameworks.py (stdlib only, so
# the system Python reads it), as make variables: FRAMEWORKS, TRAIN_VENVS, VENV_<framework>, and per environment
# REQUIREMENTS_<venv> (what it installs), REQUIREMENT_FILES_<venv> (with the files that includes), IMAGE_<venv>.
define newline


endef
space := $(subst ,, )
$(eval $(subst |,$(newline),$(shell $(PYTHON) -m training.frameworks --make | tr '\n' '|')))

AZURITE_VERSION := 3.37.0
DEBS := .cache/debs
setup: .venv/.installed $(TRAIN_VENVS:=/.installed) .cache/azurite/.installed-$(AZURITE_VERSION) $(DEBS)/.installed  ## make the environments (.venv: deployer + tests, .venv-torch: PyTorch, .venv-tf: TensorFlow/Keras, Azurite, Debian's cloud-init and OpenSSH unpacked)

# Azurite, the Azure Storage emulator (npm), for the demo and the data-path tests.
.cache/azurite/.installed-$(AZURITE_VERSION):
	mkdir -p .cache/azurite
	@# The registry sometimes fails a request: three tries, 10 s apart, then its own error.
	for try in 1 2 3; do \
	    npm install --prefix .cache/azurite --no-audit --no-fund --loglevel=error azurite@$(AZURITE_VERSION) && break; \
	    [ $$try = 3 ] && exit 1; echo "npm install failed (try $$try of 3); retrying in 10 s"; sleep 10; \
	done
	touch $@

# Debian's own cloud-init (its code checks the NFS server's user data), OpenSSH (the job's sshd, run for real
# in the tests), and a Docker engine (docker.io 20.10 with its containerd, runc and tini: devtools/docker_engine.py
# starts it per run) with debootstrap (the local stand-in base image), unpacked into .cache without installing
# anything (apt-get download + dpkg -x).
DEB_PACKAGES := cloud-init openssh-server openssh-client openssh-sftp-server libwrap0 \
    docker.io containerd runc tini debootstrap
$(DEBS)/.installed: Makefile
	rm -rf $(DEBS) && mkdir -p $(DEBS)
	cd $(DEBS) && (apt-get download $(DEB_PACKAGES) 2>/dev/null || (apt-get update -qq && apt-get download $(DEB_PACKAGES)))
	for deb in $(DEBS)/*.deb; do dpkg -x "$$deb" $(DEBS)/root; done
	touch $@

# The deployer: Pulumi program, infra CLI, data upload/stage, test tools. No ML framework.
.venv/.installed: requirements.txt training/requirements-stage.txt requirements-dev.txt requirements-infra-test.txt
	$(PYTHON) -m venv .venv
	.venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt -r requirements-dev.txt -r requirements-infra-test.txt
	touch $@

# A training environment per image of the frameworks table: .venv-torch (PyTorch: torch + torchvision pinned in
# training/requirements-torch.txt, the file the image installs) and .venv-tf (TensorFlow/Keras: tensorflow-cpu
# 2.15.1, Keras 2; the GPU image reads requirements-tf-gpu.txt). Horovod is built from source for the image's
# framework by the script the image uses too; the wheel is cached in .cache/wheels.
define TRAIN_VENV_RULE
$(1)/.installed: $(REQUIREMENT_FILES_$(1)) requirements-dev.txt images/build_horovod.sh
	$(PYTHON) -m venv $(1)
	$(1)/bin/pip install --quiet --disable-pip-version-check -r $(REQUIREMENTS_$(1)) -r requirements-dev.txt
	bash images/build_horovod.sh --python $(1)/bin/python --framework $(IMAGE_$(1)) --ops gloo
	touch $$@
endef
$(foreach venv,$(TRAIN_VENVS),$(eval $(call TRAIN_VENV_RULE,$(venv))))

DEMO := demo-out
FRAMEWORK ?= pytorch
TRAIN_VENV := $(VENV_$(FRAMEWORK))
ifneq ($(filter demo demo-local,$(MAKECMDGOALS)),)
ifeq ($(TRAIN_VENV),)
$(error FRAMEWORK=$(FRAMEWORK) is not a training framework; use one of $(FRAMEWORKS) (training/frameworks.py))
endif
endif
demo: .venv/.installed $(TRAIN_VENV)/.installed .cache/azurite/.installed-$(AZURITE_VERSION) $(DEBS)/.installed  ## the main job, locally: plan the dev stack, then rehearse its job as Azure would run it on 2 local nodes (FRAMEWORK={frameworks}; DIST=native for tensorflow/keras without Horovod)
	.venv/bin/python -m infra plan --stack dev
	@if [ "$$(id -u)" = 0 ]; then \
	    .venv/bin/python -m infra rehearse --stack dev --nodes 2 --framework $(FRAMEWORK) $(if $(DIST),--dist $(DIST)); \
	else \
	    echo "not root: the rehearsal's nodes need root (network namespaces, the job's sshd); run \`sudo make demo\`." ; \
	    echo "Instead: the data path on Azurite and 2 Horovod ranks on this machine."; \
	    $(MAKE) --no-print-directory demo-local FRAMEWORK=$(FRAMEWORK); \
	fi

# The same rehearsal with the job's commands in the PyTorch image (devtools/rehearsal/containers.py): a real Docker
# engine, the image built on a local stand-in base (minutes the first time; make test-containers keeps its layers).
demo-container: .venv/.installed $(VENV_pytorch)/.installed .cache/azurite/.installed-$(AZURITE_VERSION) $(DEBS)/.installed  ## the main job rehearsed in its PyTorch image: each node's commands in containers as Batch starts them (root)
	@if [ "$$(id -u)" = 0 ]; then \
	    .venv/bin/python -m infra rehearse --stack dev --nodes 2 --framework pytorch --container; \
	else \
	    echo "not root: the container rehearsal needs root (a Docker engine, the nodes' namespaces); run \`sudo make demo-container\`."; \
	fi

demo-local: .venv/.installed $(TRAIN_VENV)/.installed .cache/azurite/.installed-$(AZURITE_VERSION)  ## without root: JPEG dataset -> Azurite (write SAS) -> staged copy (read-only SAS) -> 2-rank Horovod -> ONNX
	rm -rf $(DEMO)
	$(TRAIN_VENV)/bin/python -m devtools synth-data --out $(DEMO)/dataset --classes 4 --per-class 32 --val-per-class 8 --size 64
	.venv/bin/python -m devtools data-demo $(DEMO)/dataset $(DEMO)/nfs
	$(TRAIN_VENV)/bin/horovodrun --gloo -np 2 -H localhost:2 $(TRAIN_VENV)/bin/python -m training train \
	    --framework $(FRAMEWORK) --data $(DEMO)/nfs --num-classes 4 --image-size 64 --batch-size 8 --steps 40 \
	    --log-every 5 --checkpoint-every 20 --workers 1 --output-dir $(DEMO)/run
	@echo; echo "Summary ($(DEMO)/run/summary.json):"; cat $(DEMO)/run/summary.json
	@echo; echo "Outputs in $(DEMO)/run: metrics.jsonl, summary.json, report.png, tensorboard/, checkpoints/, model.onnx (checked with onnxruntime)"

plan: .venv/.installed  ## offline plan of one stack (needs only .venv): make plan STACK=vision
	.venv/bin/python -m infra plan --stack $(or $(STACK),dev)

# The three suites share nothing (each its own environment, temporary folders and free ports) and none keeps both
# cores busy alone (the .venv suite mostly waits on Azurite, sshd and the rehearsal's nodes), so they run at once:
# make holds each suite's output and prints it whole when that suite ends (--output-sync), -k lets the others
# finish, and `make test` fails if any suite failed. pip's resolution of the images' pins against PyPI runs apart,
# in `make test-images` (.ci/run runs it after `make test`).
# Each suite ends with a line of its wall and CPU time ("suite NAME: M:SS wall, N s of CPU"), its processes
# included (horovodrun's ranks, the nodes' processes; not a daemon that detached, as Azurite's node does): the
# suites share the cores, so a wall time depends on the others, and the CPU is each suite's own share.
TEST_SUITES := test-venv test-torch test-tf
test: setup  ## the whole test suite: infra, data and images in .venv; training in .venv-torch and .venv-tf (real Horovod ranks), the three at once
	@echo "make test: $(TEST_SUITES) at once; each suite's output follows when it ends"
	@$(MAKE) --no-print-directory -k -j3 --output-sync=target $(TEST_SUITES)

# The images' containers on a real Docker engine (devtools/docker_engine.py: Debian's docker.io unpacked by setup,
# started per run, root only): the engine's own lifecycle, the job's containerRunOptions parsed by Docker, the
# Dockerfiles built on the stand-in base (tests/images/test_containers*.py), then the rehearsal's Batch job on 2 nodes
# of 2 ranks under `horovodrun --mpi`, in the PyTorch image (DDP; Horovod under a killed rank and a lost sshd) and in
# the TensorFlow image (Keras) (tests/devtools/rehearsal/test_rehearsal_container.py: `rehearse --container`; the
# rehearsal reads each framework's local environment for its host side).
# Minutes: apart from make test. Without root each test skips with one line saying what is not played.
test-containers: .venv/.installed $(TRAIN_VENVS:=/.installed) .cache/azurite/.installed-$(AZURITE_VERSION) $(DEBS)/.installed  ## a real Docker engine: the Batch task's container options, both Dockerfiles built on a local stand-in base, the rehearsal's job in the image (root; not part of make test)
	@$(call timed,.venv/bin/python -m pytest tests/images/test_containers.py tests/images/test_containers_build.py \
	    tests/devtools/rehearsal/test_rehearsal_container.py)

# The rehearsal's faults (root; each file's rehearsals take minutes of wall): a hung rank, a code fault, a Spot eviction
# and a node that dies, taken out of scheduling with the retry on a spare node (test_rehearsal_node_faults.py; the
# eviction and node loss alone took 7:44 of make test's wall on 2026-11-26, ~150 s of CPU), and a partial
# allocation ended at its deadline, then the late nodes train (test_rehearsal_scarce_run.py, ~40 s of CPU). Apart
# from make test, whose CPU is at its floor on 2 cores; .ci/run runs it after make test.
FAULT_REHEARSALS := tests/devtools/rehearsal/test_rehearsal_node_faults.py tests/devtools/rehearsal/test_rehearsal_scarce_run.py
test-faults: setup  ## the rehearsal's faults: a hung rank, a node kept out of the retry, a partial allocation at its deadline (root; not part of make test)
	@$(call timed,.venv/bin/python -m pytest -n 2 --dist loadfile $(FAULT_REHEARSALS))

test-images: .venv/.installed  ## pip resolves each training image's pins for the image's own Python (asks PyPI; not part of make test)
	@$(call timed,.venv/bin/python -m pytest tests/images/test_image_pins_resolve.py)

TIMED = $(PYTHON) -c 'import resource, subprocess, sys, time; start = time.monotonic(); \
    code = subprocess.call(sys.argv[2:]); minutes, seconds = divmod(round(time.monotonic() - start), 60); \
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN); \
    print(f"suite {sys.argv[1]}: {minutes}:{seconds:02} wall, {cpu.ru_utime + cpu.ru_stime:.0f} s of CPU " \
          f"({cpu.ru_utime:.0f} user, {cpu.ru_stime:.0f} system)", flush=True); sys.exit(code)'
timed = echo '$(1)' && $(TIMED) $@ $(1)

.PHONY: test-images $(TEST_SUITES)
# test-venv: two processes, each running a whole test file at a time (a file's tests keep their order and its fixtures),
# so its rehearsals run beside the other files rather than after them.
test-venv:  # all of tests/ but tests/training/pytorch and tensorflow (tests/conftest.py leaves them to their environments) and the images' pip resolution (make test-images)
	@$(call timed,.venv/bin/python -m pytest -n 2 --dist loadfile tests --ignore=tests/images/test_image_pins_resolve.py --ignore-glob='tests/images/test_containers*' \
	    --ignore-glob='tests/devtools/rehearsal/test_rehearsal_container*' $(addprefix --ignore=,$(FAULT_REHEARSALS)))
test-torch:
	@$(call timed,.venv-torch/bin/python -m pytest tests/training/pytorch)
test-tf:
	@$(call timed,.venv-tf/bin/python -m pytest tests/training/tensorflow)

clean:  ## remove the environments and caches (the Horovod wheel cache in .cache/ is kept)
	rm -rf .venv $(TRAIN_VENVS) .pytest_cache
