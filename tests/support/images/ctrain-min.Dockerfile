# A small test image: Debian 12 + Python + click (from scripts/base-image.sh) + ctrain's source.
# No TensorFlow: enough to test the runtime wrapper and `ctrain launch` inside a container.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
COPY ctrain /usr/local/lib/python3.11/dist-packages/ctrain
RUN printf '#!/usr/bin/python3\nfrom ctrain.cli import main\nmain()\n' > /usr/local/bin/ctrain \
 && chmod 755 /usr/local/bin/ctrain && ctrain --version
ENTRYPOINT ["ctrain", "launch", "--"]
