# Prometheus from Debian's archive, for hosts that cannot pull prom/prometheus:
#   podman build -t localhost/graphbandit-prometheus -f deploy/compose/prometheus.Dockerfile \
#     [--build-arg BASE_IMAGE=localhost/graphbandit-bookworm-base] deploy/compose
#   PROMETHEUS_IMAGE=localhost/graphbandit-prometheus docker-compose -f deploy/compose/compose.yaml up -d
# Runs as nobody with the TSDB in /prometheus, like the upstream image, so compose.yaml's
# command and mounts work unchanged.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o nobody -g nogroup /prometheus
USER nobody
WORKDIR /prometheus
VOLUME /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
