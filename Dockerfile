# Margin: one image for every role of the service.
#
#   docker build -t margin .
#   docker run --rm margin migrate      # upgrade the database named by DATABASE_URL
#   docker run -p 8000:8000 margin api  # the REST API (the default command)
#   docker run --rm margin worker       # training workers
#
# The build stage resolves the dependencies from pyproject.toml into a virtual environment; the
# runtime stage copies that environment, runs as an unprivileged user and compiles the solver
# kernels into a writable Numba cache, so the first training job starts without compile delay.

FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH

RUN python -m venv /opt/venv

WORKDIR /src

# Dependencies first, from pyproject.toml alone, so that a code change reuses this layer.
COPY pyproject.toml README.md ./
COPY scripts/requirements_from_pyproject.py scripts/
RUN python scripts/requirements_from_pyproject.py pyproject.toml service > requirements.txt \
    && pip install --requirement requirements.txt

COPY solvers ./solvers
COPY app ./app
COPY migrations ./migrations
COPY margin_client ./margin_client
# The commit the image is built from, for model lineage (docker build --build-arg COMMIT=...).
ARG COMMIT=""
RUN printf '%s' "$COMMIT" > app/BUILD_COMMIT && pip install --no-deps .


FROM python:3.11-slim AS runtime

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NUMBA_CACHE_DIR=/var/cache/margin/numba \
    DATA_DIR=/data \
    HOST=0.0.0.0 \
    PORT=8000

# A fixed uid/gid so that bind-mounted data directories can be prepared on the host.
RUN groupadd --gid 10001 margin \
    && useradd --uid 10001 --gid margin --home-dir /app --no-create-home \
       --shell /usr/sbin/nologin margin \
    && mkdir -p /data /var/cache/margin/numba \
    && chown margin:margin /data /var/cache/margin/numba

COPY --from=build /opt/venv /opt/venv

# The migrations are part of the installed package (`margin migrate` needs no alembic.ini).
WORKDIR /app
COPY scripts/warm_kernels.py scripts/healthcheck.py ./scripts/

# Compile as the runtime user, into the runtime cache directory, against the installed sources.
USER 10001:10001
RUN python scripts/warm_kernels.py

VOLUME ["/data"]
EXPOSE 8000

HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "/app/scripts/healthcheck.py"]

ENTRYPOINT ["margin"]
CMD ["api"]
