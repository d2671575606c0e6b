# Two commands matter: `make demo` (the main job, locally) and `make test`. Both run `make setup` first,
# which builds each environment only when it is missing or its requirements changed.
PYTHON ?= python3
.DEFAULT_GOAL := help
.PHONY: help setup demo demo-local test plan clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 12

AZURITE_VERSION := 3.37.0
DEBS := .cache/debs
setup: .venv/.installed .venv-torch/.installed .venv-tf/.installed .cache/azurite/.installed-$(AZURITE_VERSION) $(DEBS)/.installed  ## make the environments (.venv: deployer + tests, .venv-torch: PyTorch, .venv-tf: TensorFlow/Keras, Azurite, Debian's cloud-init and OpenSSH unpacked)

# Azurite, the Azure Storage emulator (npm), for the demo and the data-path tests.
.cache/azurite/.installed-$(AZURITE_VERSION):
	mkdir -p .cache/azurite
	@# The registry sometimes fails a request: three tries, 10 s apart, then its own error.
	for try in 1 2 3; do \
	    npm install --prefix .cache/azurite --no-audit --no-fund --loglevel=error azurite@$(AZURITE_VERSION) && break; \
	    [ $$try = 3 ] && exit 1; echo "npm install failed (try $$try of 3); retrying in 10 s"; sleep 10; \
	done
	touch $@

# Debian's own cloud-init (its code checks the NFS server's user data) and OpenSSH (the job's sshd, run for real
# in the tests), unpacked into .cache without installing anything (apt-get download + dpkg -x).
DEB_PACKAGES := cloud-init openssh-server openssh-client openssh-sftp-server libwrap0
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

# PyTorch training: torch + torchvision pinned in training/requirements-torch.txt (the image installs the same
# file), Horovod built from source by the script the image uses too; the wheel is cached in .cache/wheels.
.venv-torch/.installed: training/requirements-torch.txt requirements-dev.txt images/build_horovod.sh
	$(PYTHON) -m venv .venv-torch
	.venv-torch/bin/pip install --quiet --disable-pip-version-check -r training/requirements-torch.txt -r requirements-dev.txt
	bash images/build_horovod.sh --python .venv-torch/bin/python --framework pytorch --ops gloo
	touch $@

# TensorFlow/Keras training: tensorflow-cpu 2.15.1 (Keras 2; the GPU image reads requirements-tf-gpu.txt) and
# Horovod built for TensorFlow by the same script.
.venv-tf/.installed: training/requirements-tf.txt training/requirements-tf-cpu.txt requirements-dev.txt images/build_horovod.sh
	$(PYTHON) -m venv .venv-tf
	.venv-tf/bin/pip install --quiet --disable-pip-version-check -r training/requirements-tf-cpu.txt -r requirements-dev.txt
	bash images/build_horovod.sh --python .venv-tf/bin/python --framework tensorflow --ops gloo
	touch $@

DEMO := demo-out
FRAMEWORK ?= pytorch
TRAIN_VENV := $(if $(filter pytorch,$(FRAMEWORK)),.venv-torch,.venv-tf)
demo: .venv/.installed $(TRAIN_VENV)/.installed .cache/azurite/.installed-$(AZURITE_VERSION) $(DEBS)/.installed  ## the main job, locally: plan the dev stack, then rehearse its job as Azure would run it on 2 local nodes (FRAMEWORK=pytorch|tensorflow|keras)
	.venv/bin/python -m infra plan --stack dev
	@if [ "$$(id -u)" = 0 ]; then \
	    .venv/bin/python -m infra rehearse --stack dev --nodes 2 --framework $(FRAMEWORK); \
	else \
	    echo "not root: the rehearsal's nodes need root (network namespaces, the job's sshd); run \`sudo make demo\`." ; \
	    echo "Instead: the data path on Azurite and 2 Horovod ranks on this machine."; \
	    $(MAKE) --no-print-directory demo-local FRAMEWORK=$(FRAMEWORK); \
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

test: setup  ## the whole test suite: infra, data and images in .venv; training in .venv-torch and .venv-tf (real Horovod ranks)
	.venv/bin/python -m pytest tests/infra tests/data_path tests/images tests/frameworks tests/rehearsal
	.venv-torch/bin/python -m pytest tests/train_pytorch
	.venv-tf/bin/python -m pytest tests/train_tensorflow

clean:  ## remove the environments and caches (the Horovod wheel cache in .cache/ is kept)
	rm -rf .venv .venv-torch .venv-tf .pytest_cache
