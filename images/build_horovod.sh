#!/usr/bin/env bash
# Build and install Horovod 0.28.1 from the PyPI sdist, for one framework.
#
# One script for both places Horovod is built: the local training environments
# (`make setup`, Gloo on CPU) and the GPU images (NCCL + MPI). Why a source build:
# Horovod 0.28.1 (its last release) compiles with C++14/17, while torch 2.14 needs
# C++20, so for PyTorch every `set(CMAKE_CXX_STANDARD ..)` is raised to 20 before
# building. TensorFlow 2.15 builds with the sdist's own standard (C++17).
#
# Usage:
#   images/build_horovod.sh --python .venv-torch/bin/python --framework pytorch --ops gloo
#   images/build_horovod.sh --python python3 --framework tensorflow --ops nccl
#   images/build_horovod.sh --python python --framework pytorch --ops mpi    # the images' stand-in (no CUDA)
# Options:
#   --python PY        interpreter of the environment to install into (the framework must be installed there)
#   --framework NAME   pytorch | tensorflow
#   --ops NAME         gloo (CPU, local) | nccl (GPU image: NCCL allreduce, MPI + Gloo controllers)
#                      | mpi (the nccl build without NCCL: MPI + Gloo controllers, CPU operations; the
#                        container rehearsal's stand-in image, which has Open MPI but no CUDA)
#   --cache DIR        where built wheels are kept, so a second setup does not rebuild (default .cache/wheels)
set -euo pipefail

HOROVOD_VERSION=0.28.1
python=""; framework=""; ops="gloo"; cache=".cache/wheels"
while [ $# -gt 0 ]; do
  case "$1" in
    --python) python="$2"; shift 2 ;;
    --framework) framework="$2"; shift 2 ;;
    --ops) ops="$2"; shift 2 ;;
    --cache) cache="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build_horovod: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$python" ] || { echo "build_horovod: --python is required (see --help)" >&2; exit 2; }
case "$framework" in
  pytorch) fw_module=torch; fw_flags=(HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1) ;;
  tensorflow) fw_module=tensorflow; fw_flags=(HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1) ;;
  *) echo "build_horovod: --framework must be pytorch or tensorflow, got '$framework'" >&2; exit 2 ;;
esac
case "$ops" in
  gloo) ops_flags=(HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_CPU_OPERATIONS=GLOO) ;;
  nccl) ops_flags=(HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 HOROVOD_GPU_OPERATIONS=NCCL) ;;
  # CPU operations as the nccl build has them for CPU tensors (Horovod's default with MPI built: MPI); builds
  # without CUDA (docs/architecture.md), so `horovodrun --mpi` runs where only Open MPI is installed.
  mpi) ops_flags=(HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1) ;;
  *) echo "build_horovod: --ops must be gloo, nccl or mpi, got '$ops'" >&2; exit 2 ;;
esac

if [ "$ops" != gloo ] && ! command -v mpirun >/dev/null; then
  echo "build_horovod: --ops $ops builds Horovod with MPI: install Open MPI (openmpi-bin libopenmpi-dev) first" >&2
  exit 2
fi

fw_version=$("$python" -c "import $fw_module; print($fw_module.__version__.split('+')[0])") || {
  echo "build_horovod: $fw_module is not importable with $python; install the framework first" >&2; exit 2; }

if "$python" -c "import horovod, sys; sys.exit(horovod.__version__ != '$HOROVOD_VERSION')" 2>/dev/null \
   && "$python" -c "import horovod.${fw_module/pytorch/torch}" 2>/dev/null; then
  echo "build_horovod: Horovod $HOROVOD_VERSION already installed for $framework"; exit 0
fi

# The wheel is specific to the framework version and the collective ops it was built with.
wheel_dir="$cache/horovod-$HOROVOD_VERSION-$framework-$fw_version-$ops"
mkdir -p "$wheel_dir"
if ! ls "$wheel_dir"/horovod-*.whl >/dev/null 2>&1; then
  echo "build_horovod: building Horovod $HOROVOD_VERSION for $framework $fw_version ($ops); ~7 minutes on 2 cores"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "$python" -m pip download --quiet --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$work"
  tar -xzf "$work"/horovod-$HOROVOD_VERSION.tar.gz -C "$work"
  src="$work/horovod-$HOROVOD_VERSION"
  # The build fix: C++20 everywhere the sdist pins a standard (torch >= 2.14 headers need it).
  if [ "$framework" = pytorch ]; then
    grep -rl --include=CMakeLists.txt 'set(CMAKE_CXX_STANDARD' "$src" \
      | xargs sed -i -E 's/set\(CMAKE_CXX_STANDARD [0-9]+\)/set(CMAKE_CXX_STANDARD 20)/'
  fi
  cuda_root=${CUDA_HOME:-/usr/local/cuda}
  # Horovod builds its PyTorch ops as a CUDA extension whenever torch is a CUDA build and torch finds a CUDA_HOME
  # (cmake/Modules/FindPytorch.cmake: torch.version.cuda and torch.utils.cpp_extension.CUDA_HOME), which then needs
  # the toolkit's nvcc. Without a toolkit (the container rehearsal's stand-in base: --ops mpi) CUDA_HOME stays unset,
  # so the ops build for CPU tensors only; --ops nccl needs the toolkit.
  cuda_env=()
  if [ -d "$cuda_root" ]; then
    cuda_env=(CUDA_HOME="$cuda_root" CUDAToolkit_ROOT="$cuda_root")
  elif [ "$ops" = nccl ]; then
    echo "build_horovod: --ops nccl needs the CUDA toolkit: $cuda_root is missing (set CUDA_HOME)" >&2; exit 2
  fi
  # One NCCL in the process: PyTorch's Horovod links the NCCL that torch itself loads (its wheel's nvidia-nccl,
  # shared), not the CUDA devel image's static one, which Horovod's default (HOROVOD_NCCL_LINK=STATIC, found
  # under CUDA_HOME) would link: the build docs/architecture.md calls tested. A caller's HOROVOD_NCCL_* win.
  nccl_flags=()
  if [ "$ops" = nccl ] && [ "$framework" = pytorch ] && [ -z "${HOROVOD_NCCL_LIB:-}${HOROVOD_NCCL_HOME:-}" ]; then
    nccl=$("$python" -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null) || {
      echo "build_horovod: torch's NCCL (nvidia-nccl) is not installed with $python; install torch's CUDA wheel" >&2
      exit 2; }
    mkdir -p "$work/nccl-lib" && ln -sf "$nccl/lib/libnccl.so.2" "$work/nccl-lib/libnccl.so"
    nccl_flags=(HOROVOD_NCCL_INCLUDE="$nccl/include" HOROVOD_NCCL_LIB="$work/nccl-lib" HOROVOD_NCCL_LINK=SHARED)
  fi
  env "${cuda_env[@]}" MAKEFLAGS="-j$(nproc)" \
      "${fw_flags[@]}" "${ops_flags[@]}" "${nccl_flags[@]}" \
      "$python" -m pip wheel --quiet --no-deps --no-build-isolation -w "$wheel_dir" "$src"
fi
"$python" -m pip install --quiet "$wheel_dir"/horovod-*.whl
"$python" -c "import horovod; print('build_horovod: installed Horovod', horovod.__version__, 'for $framework')"
