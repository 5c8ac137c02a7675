# syntax=docker/dockerfile:1
#
# Quartermaster container image.
#   docker build -t quartermaster:0.1.0 .
#
# Stage 1 builds the project wheel and installs it with its dependencies into a
# virtual environment; stage 2 copies only that environment onto a clean slim Python
# image: no compiler, no pip/setuptools, no sources, running as uid 65532.
# Pin the base image by digest in production (PYTHON_IMAGE=python:3.11-slim@sha256:...).
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
# Dependencies must come as binary wheels (aiohttp, cryptography, pydantic-core,
# matplotlib all publish manylinux wheels), so the build needs no compiler either.
COPY pyproject.toml README.md ./
COPY queues/ queues/
COPY admission/ admission/
COPY webhooks/ webhooks/
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv --without-pip /opt/venv \
 && python -m pip --python /opt/venv/bin/python install --only-binary=:all: /wheels/*.whl \
 && /opt/venv/bin/quartermaster --help > /dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="quartermaster" \
      org.opencontainers.image.description="Kueue-compatible job-queueing admission service for GPU clusters" \
      org.opencontainers.image.licenses="Apache-2.0"
# The image's own pip/setuptools/wheel are not needed at run time.
RUN PIP_ROOT_USER_ACTION=ignore python -m pip uninstall --yes pip setuptools wheel \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin nonroot
COPY --from=builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib
# The Deployment runs with a read-only root filesystem; /tmp is an emptyDir there.
WORKDIR /tmp
USER 65532:65532
EXPOSE 8080 8081 9443
ENTRYPOINT ["quartermaster"]
CMD ["serve"]
