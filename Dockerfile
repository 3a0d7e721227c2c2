# parallel_rl: one image for every role (coordinator, learner, collector).
#   docker build -t parallel-rl .
#   docker run --rm parallel-rl --help
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /app

# CPU-only torch from PyTorch's CPU wheel index, pinned by constraints.txt (no CUDA packages)
COPY constraints.txt ./
RUN pip install --index-url https://download.pytorch.org/whl/cpu -c constraints.txt torch==2.13.0

COPY setup.cfg pyproject.toml README.md ./
COPY parallel_rl ./parallel_rl
COPY coordinator_app ./coordinator_app
COPY configs ./configs
RUN pip install -c constraints.txt . \
 && useradd --create-home --uid 10001 rl \
 && mkdir -p /shared \
 && chown rl:rl /shared

USER rl
VOLUME ["/shared"]
EXPOSE 8000 9000
ENTRYPOINT ["parallel-rl"]
CMD ["--help"]
