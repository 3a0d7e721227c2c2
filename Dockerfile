# parallel_rl: one image for every role (coordinator, learner, collector).
#   docker build -t parallel-rl .
#   docker run --rm parallel-rl --help
# CPU-only torch comes from PyTorch's CPU wheel index. Where that index (or a registry's TLS) is out of
# reach, two build arguments name files in the build context instead (docs/docker.md, "Air-gapped builds"):
#   --build-arg TORCH_WHEELHOUSE=wheels      a directory (or one .whl) holding torch 2.13.0's CPU wheel
#   --build-arg EXTRA_CA_CERTS=proxy-ca.pem  a PEM bundle pip trusts while building (e.g. a TLS proxy's)
# (docker compose passes both from the environment of the same names.)

# ---- build: a virtualenv with torch and the dependencies --------------------------------
FROM python:3.11-slim AS build

ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_WHEELHOUSE=""
ARG EXTRA_CA_CERTS=""

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /build
COPY constraints.txt ./
# the optional inputs: where an argument is empty, constraints.txt stands in for the file it names
COPY constraints.txt ${TORCH_WHEELHOUSE:-constraints.txt} ./wheels/
COPY ${EXTRA_CA_CERTS:-constraints.txt} ./extra-ca/

# CPU-only torch pinned by constraints.txt (no CUDA packages): from the wheelhouse when one is given (its
# +cpu local version ranks above the index's build; torch's own dependencies come from the index)
RUN if [ -n "$EXTRA_CA_CERTS" ]; then \
      cat /etc/ssl/certs/ca-certificates.crt ./extra-ca/* > /build/ca.pem && export PIP_CERT=/build/ca.pem; \
    fi \
 && if [ -n "$TORCH_WHEELHOUSE" ]; then \
      pip install --find-links ./wheels -c constraints.txt torch==2.13.0; \
    else \
      pip install --index-url "$TORCH_INDEX_URL" -c constraints.txt torch==2.13.0; \
    fi

# the dependencies (setup.cfg's list and its [video] extra, so that eval --video and the cluster's record_every
# work in the image; pinned by constraints.txt) in a layer of their own: it stays cached while only the project's
# code changes
COPY setup.cfg ./
RUN if [ -n "$EXTRA_CA_CERTS" ]; then export PIP_CERT=/build/ca.pem; fi \
 && python -c "import configparser; c = configparser.ConfigParser(); c.read('setup.cfg'); \
print(c['options']['install_requires'] + c['options.extras_require']['video'])" > requirements.txt \
 && pip install -c constraints.txt -r requirements.txt

# ---- project: the package alone under /opt/app (a code change rebuilds and ships only this small layer) ---
FROM build AS project
COPY pyproject.toml README.md ./
COPY parallel_rl ./parallel_rl
COPY coordinator_app ./coordinator_app
RUN if [ -n "$EXTRA_CA_CERTS" ]; then export PIP_CERT=/build/ca.pem; fi \
 && pip install -c constraints.txt --no-deps --prefix /opt/app .

# ---- the virtualenv without pip and setuptools (cached with the dependencies) ---------------------------
FROM build AS venv
RUN pip uninstall -y -q pip setuptools

# ---- runtime: the virtualenv and the project on a clean base, a non-root user ----------------------------
FROM python:3.11-slim

ENV PATH=/opt/app/bin:/opt/venv/bin:$PATH \
    PYTHONPATH=/opt/app/lib/python3.11/site-packages \
    PYTHONUNBUFFERED=1

RUN useradd --create-home --uid 10001 rl \
 && mkdir -p /shared \
 && chown rl:rl /shared
COPY --from=venv /opt/venv /opt/venv
COPY --from=project /opt/app /opt/app
WORKDIR /app
COPY configs ./configs

USER rl
VOLUME ["/shared"]
EXPOSE 8000 9000
ENTRYPOINT ["parallel-rl"]
CMD ["--help"]
