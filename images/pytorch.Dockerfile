# PyTorch training image: CUDA, Open MPI with UCX and NCCL for InfiniBand, Horovod built with NCCL by
# images/build_horovod.sh (the script `make setup` uses for .venv-torch), the training package inside.
# Built and pushed by `pulumi up` (infra/components/registry.py) with the build context at the repository root.
# Pins: training/requirements-torch.txt, the same file .venv-torch installs.
# The base is a build argument whose default is the real one; `make test-containers` builds on a local
# stand-in (devtools/docker_engine.py: Debian, no CUDA) because the real one cannot be fetched there.
ARG BASE_IMAGE=nvidia/cuda:13.0.0-cudnn-devel-ubuntu24.04
# Named stages, built in order as one: `system` (apt), `python` (the venv and the pins), then the image
# (Horovod with NCCL, the package). A build that cannot build Horovod (no CUDA) stops at `--target python`.
FROM ${BASE_IMAGE} AS system

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1

# Python, a compiler for Horovod, Open MPI (built with UCX on Ubuntu) and the RDMA user-space libraries
# that let UCX and NCCL use the InfiniBand NICs the HPC host image exposes.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      python3 python3-dev python3-venv g++ make cmake git openssh-client openssh-server \
      openmpi-bin libopenmpi-dev libucx0 ucx-utils \
      rdma-core ibverbs-providers libibverbs1 librdmacm1 infiniband-diags \
 && rm -rf /var/lib/apt/lists/*

FROM system AS python
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /opt/dltrain

COPY training/requirements-torch.txt training/requirements-stage.txt training/requirements-azureml.txt training/
RUN pip install --no-cache-dir -r training/requirements-torch.txt -r training/requirements-stage.txt \
    -r training/requirements-azureml.txt

FROM python AS image
COPY images/build_horovod.sh images/
RUN images/build_horovod.sh --python python --framework pytorch --ops nccl --cache /tmp/wheels \
 && rm -rf /tmp/wheels

COPY training/ training/
# NCCL's topology files of the InfiniBand sizes (infra/core/skus.py IMAGE_TOPOLOGY_DIR): Azure ML's containers do
# not see the host's /opt/microsoft, where the HPC image keeps them.
COPY images/nccl-topology/ nccl-topology/
# The package imports from any directory (a job's own copy, first on PYTHONPATH, shadows this one).
ENV PYTHONPATH=/opt/dltrain
# NCCL over InfiniBand; the job adds the per-run settings (hosts, interfaces). Open MPI's shared-memory transport
# copies between ranks without its single-copy mechanism (CMA's process_vm_readv): a container's ranks are not each
# other's ptrace descendants, which Ubuntu's Yama ptrace_scope=1 requires, so CMA fails with "Read -1, expected N,
# errno = 1" once a message passes the eager limit (https://github.com/open-mpi/ompi/issues/4948).
ENV NCCL_IB_DISABLE=0 \
    NCCL_DEBUG=WARN \
    UCX_TLS=rc,sm,self \
    OMPI_MCA_pml=ucx \
    OMPI_MCA_btl_vader_single_copy_mechanism=none
ENTRYPOINT []
CMD ["python", "-m", "training", "--help"]
