# graywire host agent alone: graywire without its dependencies plus deploy/agent-requirements.txt
# (FastAPI, uvicorn, pyarrow, numpy and three small ones): no database, SNMP, Kubernetes or
# scikit-learn. Build from the repository root:
#   docker build -f deploy/agent.Dockerfile -t graywire-agent:0.1.0 .
# Run:  docker run --network host -v /sys:/host/sys:ro graywire-agent:0.1.0 agent --sysfs-root /host

FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# No pip or setuptools in the venv: the base image's pip installs into it.
RUN python -m venv --without-pip /opt/graywire
COPY pyproject.toml README.md /src/
COPY collectors /src/collectors
COPY detectors /src/detectors
COPY evaluation /src/evaluation
COPY service /src/service
COPY fabricsim /src/fabricsim
COPY migrations /src/migrations
COPY deploy/agent-requirements.txt /src/deploy/agent-requirements.txt
# The set first, then graywire without its dependencies (in this order pip has nothing to
# report missing: it does not check a --no-deps install against what is there).
RUN pip --python /opt/graywire/bin/python install -r /src/deploy/agent-requirements.txt \
 && pip --python /opt/graywire/bin/python install --no-deps /src

FROM python:3.11-slim-bookworm
# ethtool: the agent reads NIC, FEC and PFC counters with `ethtool -S` / `--show-fec`.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ethtool \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 graywire \
 && useradd --system --uid 10001 --gid graywire --no-create-home --shell /usr/sbin/nologin graywire
COPY --from=build /opt/graywire /opt/graywire
ENV PATH=/opt/graywire/bin:$PATH \
    PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 9470
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:9470/healthz', timeout=4).status != 200)"]
ENTRYPOINT ["graywire"]
CMD ["agent", "--sysfs-root", "/host"]
