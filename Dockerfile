# graphbandit container image: graphbandit-server with graphbandit-cli (also the health check)
# graphbandit-loadtest and graphbandit-loadgen, on Debian 12.
#
#   podman build -t graphbandit .            (or docker build; see deploy/compose/README.md)
#   podman run -d -p 50051:50051 -p 9464:9464 -v graphbandit-state:/var/lib/graphbandit graphbandit
#
# Build arguments:
#   BASE_IMAGE  Debian 12 image both stages start from (default debian:bookworm-slim; with no
#               registry at hand, make one with debootstrap: tools/container_test.sh does).
#   RUN_TESTS   1 (default) runs the unit tests (ctest -L unit) in the build stage; 0 skips them.
#   GRAPHBANDIT_ARCH  the CPU the programs are built for (CMakeLists.txt): x86-64-v3 (default:
#               AVX2 and FMA, any x86-64 CPU from about 2015 on, which is what the scoring
#               products need to run near the machine's rate), native (the build host's CPU:
#               fastest, but only for hosts with the same CPU features) or portable (any
#               x86-64, SSE2 only, about half as fast). The server refuses to start on a CPU
#               that lacks what its build assumes, and says so.
# Arguments after the image name are appended to the server's flags (later flags win), e.g.
#   ... graphbandit --graph=/var/lib/graphbandit/friends.txt --shutdown_grace_seconds=20
ARG BASE_IMAGE=debian:bookworm-slim

# ---- build stage: the README's install list on a bare system, the build, the unit tests ----
FROM ${BASE_IMAGE} AS build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
# Only dev.sh first, so that the package layer is reused while the sources change.
COPY tools/dev.sh tools/dev.sh
RUN tools/dev.sh deps && rm -rf /var/lib/apt/lists/*
COPY . .
ARG GRAPHBANDIT_ARCH=x86-64-v3
# The same configure-and-build recipe as `tools/dev.sh build`; the ThreadSanitizer copy of the
# core is only for the tsan test label, which the image does not run.
RUN GRAPHBANDIT_BUILD_DIR=/build \
    GRAPHBANDIT_CMAKE_ARGS="-DGRAPHBANDIT_TSAN_TEST=OFF -DGRAPHBANDIT_ARCH=${GRAPHBANDIT_ARCH}" \
    tools/dev.sh build
ARG RUN_TESTS=1
RUN if [ "$RUN_TESTS" != 0 ]; then \
      ctest --test-dir /build -L unit --output-on-failure -j "$(nproc)" --timeout 900; \
    else echo "RUN_TESTS=0: unit tests skipped"; fi
# Stripped programs, and the Debian packages that hold the shared libraries they load (the
# runtime stage installs exactly those, so the list follows the code).
RUN set -e; mkdir -p /out/bin; \
    for program in server/graphbandit-server client/graphbandit-cli client/graphbandit-loadtest \
                   client/graphbandit-loadgen; do \
      strip --strip-unneeded -o "/out/bin/${program#*/}" "/build/$program"; \
    done; \
    ldd /out/bin/* | awk '/=> \//{print $3}' | sort -u > /tmp/libs; \
    while read -r lib; do \
      dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")"; \
    done < /tmp/libs | cut -d: -f1 | sort -u > /out/runtime-packages; \
    if grep -E -- '-dev$' /out/runtime-packages; then echo "a -dev package in the runtime list" >&2; exit 1; fi; \
    echo "runtime packages:" $(cat /out/runtime-packages)

# ---- runtime stage: shared libraries, the three programs, a non-root user ----
FROM ${BASE_IMAGE}
COPY --from=build /out/runtime-packages /tmp/runtime-packages
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      $(cat /tmp/runtime-packages) >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /tmp/runtime-packages
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/graphbandit --no-create-home \
      --shell /usr/sbin/nologin graphbandit \
 && install -d -o graphbandit -g graphbandit -m 0750 /var/lib/graphbandit
COPY --from=build /out/bin/ /usr/local/bin/
# Every shared library the programs need is here (a library whose package was not found above
# would otherwise only show when the server starts).
RUN if ldd /usr/local/bin/graphbandit-* | grep "not found"; then exit 1; fi
USER 10001:10001
WORKDIR /var/lib/graphbandit
VOLUME /var/lib/graphbandit
# gRPC (BanditService, AdminService, grpc.health.v1, reflection) and Prometheus /metrics.
EXPOSE 50051 9464
STOPSIGNAL SIGTERM
# The health check asks grpc.health.v1 through the CLI; set GRAPHBANDIT_HEALTH_TARGET when the
# server is told to listen elsewhere (e.g. --listen=127.0.0.1:PORT with host networking), and
# GRAPHBANDIT_HEALTH_FLAGS when it serves TLS (e.g. "--tls_ca_file=/etc/graphbandit/ca.pem
# --tls_server_name=graphbandit", plus --tls_cert_file/--tls_key_file for mutual TLS).
ENV GRAPHBANDIT_HEALTH_TARGET=127.0.0.1:50051 GRAPHBANDIT_HEALTH_FLAGS=
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD graphbandit-cli --target="$GRAPHBANDIT_HEALTH_TARGET" --deadline_ms=3000 $GRAPHBANDIT_HEALTH_FLAGS health || exit 1
ENTRYPOINT ["graphbandit-server", "--listen=0.0.0.0:50051", "--metrics_listen=0.0.0.0:9464", \
            "--state_dir=/var/lib/graphbandit"]
CMD []
