# The cbt-mover image: the engine CLI (mover pods) and the Prefect flows (flow-run Jobs of the
# Kubernetes work pool, configs/k8s-job-template.json, which overrides the entrypoint to run
# `prefect flow-run execute`). The Prefect worker that polls the Kubernetes work pool and creates
# those Jobs is not this image: it needs the prefect-kubernetes package (the prefect-worker Helm
# chart's `prefecthq/prefect:<version>-python3.11-kubernetes` image has it; docs/real-cluster.md).
#
#   docker build -t registry.example.com/cbt-mover:0.1.0 .
#   docker run --rm registry.example.com/cbt-mover:0.1.0 --help
#
# Block devices: a mover pod opens the snapshot's device from volumeDevices (read for backup,
# write for restore). The device node is usually root:disk 0660, so the non-root user below is in
# the group "disk" (gid 6); the pod should also say `securityContext.supplementalGroups: [6]`.
# Where a runtime creates the node with another group or mode, the mover pod must run as root
# (runAsUser: 0); it never needs privileged mode or extra capabilities.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    UV_NO_CACHE=1 \
    HOME=/home/cbt-mover

LABEL org.opencontainers.image.title="cbt-mover" \
      org.opencontainers.image.description="Backup data mover for Kubernetes block volumes (CSI changed block tracking), Prefect flows" \
      org.opencontainers.image.licenses="Apache-2.0"

WORKDIR /opt/app

# Runtime dependencies only, pinned by the lock (which also pins the dev extras; they are not
# installed). A separate layer: it changes only with the lock or the dependency list. Compiled to
# bytecode here, as is the project below: with PYTHONDONTWRITEBYTECODE nothing is cached at run time,
# so every mover pod would otherwise compile its imports from source before it starts (a restore's
# recovery time pays that).
# libfuse 3 for `cbt-mover mount` (a read-only FUSE view of a backup; the pod needs /dev/fuse, which only a
# privileged or device-plugin pod gets: restore-files does not mount, it reads files without FUSE)
RUN apt-get update && apt-get install -y --no-install-recommends fuse3 && rm -rf /var/lib/apt/lists/*
RUN pip install uv==0.13.9
COPY requirements.lock pyproject.toml ./
RUN uv pip install --system --compile-bytecode --constraint requirements.lock --requirement pyproject.toml

# The project itself (the `cbt-mover` console script), then the flow code the worker runs from
# /opt/app (prefect.yaml's pull step sets this working directory).
COPY README.md ./
COPY movers/ movers/
RUN pip install --no-deps --compile . && rm -rf build *.egg-info
COPY flows/ flows/
COPY tasks/ tasks/
COPY reporting/ reporting/
COPY deploy/ deploy/
COPY configs/ configs/
COPY prefect.yaml ./

RUN useradd --uid 10001 --gid 0 --groups disk --home-dir /home/cbt-mover --create-home --shell /usr/sbin/nologin \
        cbt-mover \
    && chmod -R g=u /opt/app /home/cbt-mover
USER 10001

ENTRYPOINT ["cbt-mover"]
CMD ["--help"]
