# The one image every Python service of compose.yaml runs (controller, agent,
# projector, the acls, dataset, query and cli jobs): runledger installed once,
# at build time, so a container starts in seconds. `docker compose build`
# after changing the code; only the last layers are rebuilt.
FROM python:3.11-slim

# torch from the CPU wheel index by default: the CUDA wheels add gigabytes a
# laptop stack never uses. Pass --build-arg TORCH_INDEX_URL=https://pypi.org/simple
# (or a CUDA index) for GPU nodes.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A user of its own: nothing in the stack needs root. The directories the
# compose volumes mount are created here, owned by that user, because Docker
# copies their ownership into a named volume the first time it is mounted.
RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin runledger \
    && mkdir -p /state /datasets /checkpoints /run/runledger \
        /keys/admin /keys/controller /keys/operator /keys/agent \
    && chown runledger:runledger /state /datasets /checkpoints /run/runledger \
        /keys/admin /keys/controller /keys/operator /keys/agent \
    && chmod 0700 /run/runledger /keys/admin /keys/controller /keys/operator /keys/agent

WORKDIR /opt/runledger

# The dependencies first, read from pyproject.toml alone: this layer (torch
# included) is rebuilt when the dependencies change, not when the code does.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install --index-url "$TORCH_INDEX_URL" "$(grep '^torch' /tmp/requirements.txt)" \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# The package itself, once, without touching the dependencies above. The
# checkout stays in /opt/runledger: scripts/compose-credentials.sh and the
# examples (a spec's code.workdir) are read from there.
COPY . .
RUN pip install --no-deps . && rm -rf build *.egg-info

USER runledger
ENTRYPOINT ["runledger"]
CMD ["--help"]
