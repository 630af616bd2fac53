# Margin: one image for every role of the service.
#
#   docker build -t margin .
#   docker run --rm margin migrate      # upgrade the database named by DATABASE_URL
#   docker run -p 8000:8000 margin api  # the REST API (the default command)
#   docker run --rm margin worker       # training workers
#
# Layers, from the one that changes least: the locked dependencies (requirements/service.txt,
# with hashes), the solver sources and their compiled kernels, then the service's code and a
# no-deps editable install of the project. A change to the service's code rebuilds only the last
# layers (seconds, a few hundred KB); a solver change recompiles the kernels; only a lock change
# reinstalls the dependencies. The base image is a build argument: pin it by digest where a
# registry is reachable, e.g. --build-arg PYTHON_IMAGE=python:3.11-slim@sha256:<digest>.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS deps

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

COPY requirements/service.txt requirements/build.in /tmp/requirements/
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --require-hashes --no-deps \
       --requirement /tmp/requirements/service.txt


FROM ${PYTHON_IMAGE} AS runtime

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NUMBA_CACHE_DIR=/var/cache/margin/numba \
    PYTHONPATH=/app \
    DATA_DIR=/data \
    HOST=0.0.0.0 \
    PORT=8000

# A fixed uid/gid so that bind-mounted data directories can be prepared on the host.
RUN groupadd --gid 10001 margin \
    && useradd --uid 10001 --gid margin --home-dir /app --no-create-home \
       --shell /usr/sbin/nologin margin \
    && mkdir -p /data /var/cache/margin/numba \
    && chown margin:margin /data /var/cache/margin/numba

COPY --from=deps /opt/venv /opt/venv

WORKDIR /app
# The solvers and their kernels, compiled as the runtime user into the runtime cache directory.
COPY solvers ./solvers
COPY app/warmup.py ./scripts/warm_kernels.py
USER 10001:10001
RUN python scripts/warm_kernels.py

# The service's code, then the project itself (no dependencies: they are all above).
USER 0:0
COPY pyproject.toml README.md ./
COPY app ./app
COPY migrations ./migrations
COPY margin_client ./margin_client
COPY scripts/healthcheck.py ./scripts/
# The commit the image is built from, for model lineage (docker build --build-arg COMMIT=...).
ARG COMMIT=""
RUN printf '%s' "$COMMIT" > app/BUILD_COMMIT \
    && pip install --no-deps --no-build-isolation --editable .
USER 10001:10001

VOLUME ["/data"]
EXPOSE 8000

# Each role's own check (the API: /healthz; a worker: its heartbeat; one-shots: none).
HEALTHCHECK --interval=15s --timeout=10s --start-period=60s --retries=3 \
    CMD ["python", "/app/scripts/healthcheck.py"]

ENTRYPOINT ["margin"]
CMD ["api"]
